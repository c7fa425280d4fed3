#!/usr/bin/env bash
# On the GPU machine: what `tierscope run` with node 0 declared cxl (every allocation of the loop
# lands on the "CXL" tier) costs a real training loop, in paired step times.
# One long torchrun of the offload loop (tests/device/offload_train.py, NPROC ranks); for each
# page path in PAGE_PATHS, PAIRS ABBA pairs (the order alternating: A B, B A, ...); each pair's
# change is agent / alone - 1 (median steps of its units). Prints their median, a bootstrap 95%
# interval and how many pairs went each way, and the agent's CPU.
# Targets (issue 30): paired median <= +0.5%, the interval's upper end < +1.5%, over >= 10 pairs.
# (Fresh torchrun starts per round, as before, took ~75 s a pair: 10 pairs did not fit a call.)
# DESIGN=blocks (tests/device/abba_blocks.py): a unit is BLOCK steps of rank 0 after SKIP left out,
# the agent started for it (SETTLE s before) and ended after. The machine drifts in regimes of
# 20-30 steps (~1.1 s a step) and a start needs ~10 s to settle, so blocks are long and pair
# changes spread (SD 7-10%). Blocks of 6 steps of the 128 M loop (0.19 s a step) were too short on
# 2026-12-02 (BENCHMARKS.md): the defaults are the 552 M loop of realworld.md (~0.55 s a step) and
# 20-step blocks.
# DESIGN=steps (tests/device/abba_steps.py): the agent starts once (SETTLE s, default 20, left
# out), then is continued (agent) or SIGSTOPped (alone) at step boundaries, units of BLOCK=1
# step (SKIP=0), 150 pairs: a log with no agent re-paired as alternating single steps gave a
# median's interval of about +-0.8% over 140 pairs. A stop is retried until none of the page
# path's tp_btf links is open; a stopped agent's other kernel programs stay attached (the pairs
# measure its user-space work and page-path windows). 300 steps a page path: one per device call.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${BIN:-./target/release/tierscope}
DESIGN=${DESIGN:-blocks}
# SETTLE: seconds between an agent's start and its block (blocks: 3 puts its start-up inside the
# block; 15+ leaves it out) or its first unit (steps).
case $DESIGN in
    blocks) PAIRS=${PAIRS:-10}; BLOCK=${BLOCK:-20}; SKIP=${SKIP:-2}; SETTLE=${SETTLE:-3} ;;
    steps) PAIRS=${PAIRS:-150}; BLOCK=${BLOCK:-1}; SKIP=${SKIP:-0}; SETTLE=${SETTLE:-20} ;;
    *) echo "DESIGN=$DESIGN: blocks or steps"; exit 1 ;;
esac
NPROC=${NPROC:-1}
PARAMS_M=${PARAMS_M:-552}
# "default": no --page-path, the agent's own choice (what the issue's target is about); "sampled"
# or "exact": asked for; "none": `sleep` instead of the agent (started and stopped, or SIGSTOPped
# and continued), an A/A test of the method: the interval it gets is the machine's own noise at
# this design.
# DESIGN=steps measures the sampled page path only (exact's programs stay attached when stopped;
# so do sampled's on a quiet node, at weight 1: abba_steps.py gives up then).
if [ "$DESIGN" = steps ]; then PAGE_PATHS=${PAGE_PATHS:-default}; else PAGE_PATHS=${PAGE_PATHS:-"default exact"}; fi
# More agent flags (e.g. --cpu-samples-hz 0); VS: flags of a baseline agent run in the "alone"
# blocks instead of nothing (e.g. VS="--cpu-samples-hz 0" with AGENT_ARGS empty: what the CPU
# sampler alone costs).
AGENT_ARGS=${AGENT_ARGS:-}
# THREADS=N: the rank runs N torch threads pinned to CPUs 0..N-1 and the agent runs on the others:
# the per-event programs still run in the rank's threads (what the page path costs it), the
# agent's own threads cannot preempt one of the rank's (an OpenMP region waits for its slowest
# thread). Unset: torch's default (a thread per core) and no pinning.
THREADS=${THREADS:-}
RANK_PIN=(); AGENT_PIN=(); TRAIN_THREADS=()
if [ -n "$THREADS" ]; then
    RANK_PIN=(taskset -c "0-$((THREADS - 1))")
    AGENT_PIN=(taskset -c "$THREADS-$(($(nproc) - 1))")
    TRAIN_THREADS=(--threads "$THREADS")
fi
VS=${VS:-}
[ "$DESIGN" = steps ] && [ -n "$VS" ] && { echo "VS needs DESIGN=blocks"; exit 1; }
HERE=$(cd "$(dirname "$0")" && pwd)
LOG="$OUT/train.log"
printf '[tiers]\ncxl = [0]\n' > "$OUT/cxl0.toml"

"${RANK_PIN[@]}" torchrun --standalone --nproc-per-node "$NPROC" "$HERE/offload_train.py" --steps 100000 --params-m "$PARAMS_M" "${TRAIN_THREADS[@]}" > "$LOG" 2>&1 &
TRAIN=$!
trap 'kill $TRAIN 2>/dev/null' EXIT
# Warm-up: the first steps allocate the pinned state.
until [ "$(grep -c 'rank 0 at' "$LOG")" -ge 5 ]; do
    kill -0 $TRAIN 2>/dev/null || { echo "training exited:"; tail -20 "$LOG"; exit 1; }
    sleep 1
done
for mode in $PAGE_PATHS; do
    if [ "$DESIGN" = steps ]; then
        design="$PAIRS ABBA pairs of $BLOCK-step units (+$SKIP skipped), the agent started once (${SETTLE}s before the first) and SIGSTOPped for alone units"
    else
        design="$PAIRS ABBA pairs of $BLOCK steps (+$SKIP skipped, agent blocks ${SETTLE}s after its start)"
    fi
    echo "== page path $mode $AGENT_ARGS${THREADS:+ rank on CPUs 0-$((THREADS - 1)) with $THREADS threads, agent on the rest}${VS:+ vs $VS}: $design ==" | tee -a "$OUT/overhead-summary.txt"
    agent=("${AGENT_PIN[@]}" "$BIN" run --config "$OUT/cxl0.toml" --match 'offload_train')
    case $mode in
        default) ;;
        none) agent=(sleep 100000) ;;
        *) agent+=(--page-path "$mode") ;;
    esac
    vs=()
    # shellcheck disable=SC2206
    [ -n "$VS" ] && vs=(--vs "${agent[@]}" $VS)
    # shellcheck disable=SC2206
    python3 "$HERE/abba_$DESIGN.py" "$LOG" "$PAIRS" "$BLOCK" "$SKIP" "$SETTLE" -- "${agent[@]}" $AGENT_ARGS "${vs[@]}" \
        | tee -a "$OUT/overhead-summary.txt"
done
