#!/usr/bin/env bash
# On the GPU machine: what `tierscope run` at its defaults costs a real training loop, against no
# agent at all (no tierscope process, no tierscope BPF program loaded: tests/device/arms.py checks
# through the bpf syscall before each alone block), with an A/A arm (`sleep` started and ended like
# the agent) and each named feature's marginal arm beside it, in one long run of the offload loop
# (tests/device/offload_train.py, torch's default threads: one per core, so the rank uses every
# core), node 0 declared cxl (every allocation lands on the "CXL" tier: the sampled page path and
# the CXL sites at work).
# ARMS: which arms, of: default (tierscope run, the config only declaring node 0 cxl), aa
# (sleep), no_sampler ([collect] cpu_samples_hz = 0), copies_all (stack copies at every sample
# that asks and the background threads in the normal class: the defaults before issue 40),
# exact (--page-path exact). ROUNDS rounds, one ABBA pair per arm each, blocks of BLOCK steps
# (+SKIP left out), an arm's block SETTLE s after its start.
# Pass rule (issue 40, declared before the run): for `default`, median step-time change <= +0.5%
# and the bootstrap 95% interval's upper end < +1.5%; reported for every arm.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${BIN:-./target/release/tierscope}
ARMS=${ARMS:-"default aa"}
ROUNDS=${ROUNDS:-11}; BLOCK=${BLOCK:-16}; SKIP=${SKIP:-2}; SETTLE=${SETTLE:-3}
PARAMS_M=${PARAMS_M:-552}
HERE=$(cd "$(dirname "$0")" && pwd)
LOG="$OUT/train.log"
printf '[tiers]\ncxl = [0]\n' > "$OUT/cxl0.toml"
printf '[tiers]\ncxl = [0]\n[collect]\ncpu_samples_hz = 0\n' > "$OUT/no_sampler.toml"
printf '[tiers]\ncxl = [0]\n[collect]\ncpu_stack_copies_per_sec = 200\nwork_class = "normal"\n' > "$OUT/copies_all.toml"
arms=()
for a in $ARMS; do
    case $a in
        default) arms+=("default=$BIN run --config $OUT/cxl0.toml --match offload_train") ;;
        aa) arms+=("aa=sleep 100000") ;;
        no_sampler) arms+=("no_sampler=$BIN run --config $OUT/no_sampler.toml --match offload_train") ;;
        copies_all) arms+=("copies_all=$BIN run --config $OUT/copies_all.toml --match offload_train") ;;
        exact) arms+=("exact=$BIN run --config $OUT/cxl0.toml --match offload_train --page-path exact") ;;
        *) echo "unknown arm $a"; exit 1 ;;
    esac
done
torchrun --standalone --nproc-per-node 1 "$HERE/offload_train.py" --steps 100000 --params-m "$PARAMS_M" > "$LOG" 2>&1 &
TRAIN=$!
trap 'kill $TRAIN 2>/dev/null' EXIT
until [ "$(grep -c 'rank 0 at' "$LOG")" -ge 5 ]; do
    kill -0 $TRAIN 2>/dev/null || { echo "training exited:"; tail -20 "$LOG"; exit 1; }
    sleep 1
done
python3 "$HERE/arms.py" "$LOG" "$ROUNDS" "$BLOCK" "$SKIP" "$SETTLE" "${arms[@]}" | tee "$OUT/default-cost.txt"
