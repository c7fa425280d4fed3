#!/usr/bin/env bash
# On the GPU machine: tierscope watching a real torchrun job (two ranks of a ZeRO-Offload-style
# loop). Needs the release binary at target/release/tierscope (carried). Results go to $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=./target/release/tierscope
$BIN check > "$OUT/check.txt" 2>&1; echo "check rc=$?" >> "$OUT/check.txt"
# Append mode: this script writes its own marker lines into the same log.
: > "$OUT/train.log"
torchrun --standalone --nproc-per-node 2 tests/device/offload_train.py --steps ${STEPS:-60} >> "$OUT/train.log" 2>&1 &
TR=$!
sleep ${WARMUP:-25}
echo "agent on at $(date +%s.%N)" >> "$OUT/train.log"
$BIN snapshot --json --duration ${WATCH:-10} --match torchrun > "$OUT/snapshot.json" 2> "$OUT/snapshot.err"
echo "snapshot rc=$? agent off at $(date +%s.%N)" >> "$OUT/train.log"
wait $TR
echo "train rc=$?" >> "$OUT/train.log"
# Step time before, while and after the agent watched (median per window, both ranks).
python3 - "$OUT/train.log" <<'PY' | tee "$OUT/overhead.txt"
import re, statistics as st, sys
on = off = None
steps = []
for l in open(sys.argv[1]):
    if m := re.match(r"agent on at ([\d.]+)", l): on = float(m.group(1))
    if m := re.match(r"snapshot rc=\d+ agent off at ([\d.]+)", l): off = float(m.group(1))
    if m := re.match(r"step (\d+) rank \d at ([\d.]+) took ([\d.]+)", l):
        if int(m.group(1)) > 5: steps.append((float(m.group(2)), float(m.group(3))))
w = [t for a, t in steps if on + 2 < a < off]
b = [t for a, t in steps if a < on]
f = [t for a, t in steps if a > off + 1]
print(f"steps before {len(b)} median {st.median(b):.3f}s; with agent {len(w)} median {st.median(w):.3f}s; after {len(f)} median {st.median(f):.3f}s")
print(f"ratio with/without {st.median(w) / st.median(b + f):.3f}")
PY
