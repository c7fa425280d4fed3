#!/usr/bin/env bash
# On the GPU machine: tierscope watching a real torchrun job (two ranks of a ZeRO-Offload-style
# loop). Needs the release binary at target/release/tierscope (carried). Results go to $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=./target/release/tierscope
$BIN check > "$OUT/check.txt" 2>&1; echo "check rc=$?" >> "$OUT/check.txt"
torchrun --standalone --nproc-per-node 2 tests/device/offload_train.py --steps ${STEPS:-60} > "$OUT/train.log" 2>&1 &
TR=$!
sleep ${WARMUP:-25}
echo "agent on at $(date +%s.%N)" >> "$OUT/train.log"
$BIN snapshot --json --duration ${WATCH:-10} --match torchrun > "$OUT/snapshot.json" 2> "$OUT/snapshot.err"
echo "snapshot rc=$? agent off at $(date +%s.%N)" >> "$OUT/train.log"
wait $TR
echo "train rc=$?" >> "$OUT/train.log"
