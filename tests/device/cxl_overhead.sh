#!/usr/bin/env bash
# On the GPU machine: what `tierscope run --cxl-node 0` (node 0 declared cxl, so every allocation
# of the loop takes the site-sampling path at the default rate) costs a real training loop.
# ROUNDS interleaved rounds (ABBA: alone, agent / agent, alone / ...), each a fresh torchrun of
# the offload loop (tests/device/offload_train.py, STEPS steps); the steady step time is the
# median of the steps after the 5th of every rank; the agent's CPU (utime+stime over the run's
# wall time) and peak RSS (VmHWM) are read from /proc while it watches, and its site-sampling
# counters from its Prometheus endpoint. Targets (issue 16): step time within 0.5% of alone,
# agent below 2% of a core.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${BIN:-./target/release/tierscope}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-40}
PORT=${PORT:-19470}
: > "$OUT/overhead.log"

train() { # $1 = label, $2 = round
    torchrun --standalone --nproc-per-node 2 tests/device/offload_train.py --steps "$STEPS" 2>&1 \
        | sed "s/^/$1 round $2 /" >> "$OUT/overhead.log"
}

ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

with_agent() { # $1 = round
    printf '[tiers]\ncxl = [0]\n' > "$OUT/cxl0.toml"
    "$BIN" run --config "$OUT/cxl0.toml" --match 'torchrun|offload_train' --prometheus "127.0.0.1:$PORT" \
        > "$OUT/agent-$1.out" 2> "$OUT/agent-$1.err" &
    local agent=$!
    for _ in $(seq 1 60); do
        python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/metrics', timeout=1)" 2>/dev/null && break
        sleep 0.5
    done
    local t0 c0 t1 c1
    t0=$(date +%s.%N); c0=$(ticks $agent)
    train agent "$1"
    t1=$(date +%s.%N); c1=$(ticks $agent)
    local hwm; hwm=$(awk '/VmHWM/ {print $2}' "/proc/$agent/status")
    python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$PORT/metrics', timeout=5).read().decode())" \
        | grep -E 'site_samples|kernel_dropped' > "$OUT/agent-$1.metrics" 2>/dev/null
    kill -INT $agent; wait $agent
    echo "agent round $1 cpu_ticks $((c1 - c0)) wall $(python3 -c "print($t1 - $t0)") hwm_kib $hwm" >> "$OUT/overhead.log"
}

for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then train alone "$r"; with_agent "$r"; else with_agent "$r"; train alone "$r"; fi
done

python3 - "$OUT/overhead.log" <<'PY' | tee "$OUT/overhead-summary.txt"
import re, statistics as st, sys
steps = {"alone": [], "agent": []}; per_round = {}; cost = []
for l in open(sys.argv[1]):
    if m := re.match(r"(alone|agent) round (\d+) step (\d+) rank \d at [\d.]+ took ([\d.]+)", l):
        if int(m.group(3)) > 5:
            steps[m.group(1)].append(float(m.group(4)))
            per_round.setdefault((m.group(1), int(m.group(2))), []).append(float(m.group(4)))
    if m := re.match(r"agent round (\d+) cpu_ticks (\d+) wall ([\d.]+) hwm_kib (\d+)", l):
        cost.append((int(m.group(2)) / 100 / float(m.group(3)) * 100, int(m.group(4)) / 1024))
for (way, r), v in sorted(per_round.items(), key=lambda x: (x[0][1], x[0][0])):
    print(f"round {r} {way:5}: {len(v)} steps, median {st.median(v):.4f}s")
a, w = st.median(steps["alone"]), st.median(steps["agent"])
print(f"steady step median: alone {a:.4f}s, with tierscope run --cxl-node 0 {w:.4f}s, ratio {w / a:.4f} "
      f"({(w / a - 1) * 100:+.2f}%; target within 0.5%: {'met' if abs(w / a - 1) <= 0.005 else 'MISSED'})")
# Rounds are pairs run back to back (ABBA): the ratio within each pair cancels the drift from round
# to round (alone rounds alone differed by 5% in session 3); their median is the paired figure.
pairs = [st.median(per_round[("agent", r)]) / st.median(per_round[("alone", r)])
         for r in sorted({r for _, r in per_round}) if ("agent", r) in per_round and ("alone", r) in per_round]
if pairs:
    pm = st.median(pairs)
    print("per-round ratios agent/alone: " + ", ".join(f"{p:.4f}" for p in pairs))
    print(f"paired median ratio {pm:.4f} ({(pm - 1) * 100:+.2f}%; target within 0.5%: "
          f"{'met' if abs(pm - 1) <= 0.005 else 'MISSED'})")
for i, (cpu, rss) in enumerate(cost, 1):
    print(f"agent round {i}: {cpu:.2f}% of a core (target < 2%: {'met' if cpu < 2 else 'MISSED'}), peak RSS {rss:.1f} MiB")
PY
grep -h -E 'site_samples' "$OUT"/agent-*.metrics | head -20
