#!/usr/bin/env bash
# On the GPU machine: what the agent costs a training rank, measured apart from the machine's
# step-time noise (issues 30, 31). The offload loop (tests/device/offload_train.py, PARAMS_M
# million parameters, one rank) runs; for each agent configuration in CONFIGS (flags of
# `tierscope snapshot`, joined by commas; `none`: no flag), the agent watches it for WATCH seconds
# after SETTLE, with
# kernel.bpf_stats_enabled=1, and the script prints, over that window: each program's runs per
# second and ns per run (the kernel's own bpf_prog_info run_time_ns / run_cnt), the programs'
# time as a share of the rank's CPU time (they run in its threads' context, or interrupt them)
# and of the machine's CPUs, and the agent's own CPU. These are direct costs; cache effects
# on the rank are not in them (the ABBA step-time pairs of cxl_overhead.sh are, with their noise).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${BIN:-./target/release/tierscope}
HERE=$(cd "$(dirname "$0")" && pwd)
PARAMS_M=${PARAMS_M:-128}
SETTLE=${SETTLE:-12}
WATCH=${WATCH:-30}
CONFIGS=${CONFIGS:-"--cxl-node=0 --cxl-node=0,--site-sample-every=0 --cxl-node=0,--cpu-samples-hz=0 none --cxl-node=0,--page-path=sampled"}
LOG="$OUT/share-train.log"
torchrun --standalone --nproc-per-node 1 "$HERE/offload_train.py" --steps 100000 --params-m "$PARAMS_M" > "$LOG" 2>&1 &
TRAIN=$!
trap 'kill $TRAIN 2>/dev/null; sysctl -qw kernel.bpf_stats_enabled=0' EXIT
until [ "$(grep -c 'rank 0 at' "$LOG")" -ge 5 ]; do
    kill -0 $TRAIN 2>/dev/null || { echo "training exited:"; tail -20 "$LOG"; exit 1; }
    sleep 1
done
sysctl -qw kernel.bpf_stats_enabled=1
for config in $CONFIGS; do
    # Programs loaded before this agent (the system's, an earlier agent's) are left out.
    MAXID=$(python3 -c "import sys; sys.path.insert(0, '$HERE'); from bpf_prog_stats import programs; print(max((p[0] for p in programs()), default=0))")
    # shellcheck disable=SC2046
    "$BIN" snapshot --json --duration $((SETTLE + WATCH + 3)) --match offload_train $(echo "$config" | tr ',' ' ' | sed 's/^none$//') > "$OUT/share-snapshot.json" 2> "$OUT/share-agent.err" &
    AGENT=$!
    sleep "$SETTLE"
    python3 - "$AGENT" "$WATCH" "$config" "$LOG" "$HERE" "$MAXID" <<'PY'
import os, re, sys, time
sys.path.insert(0, sys.argv[5])
from bpf_prog_stats import programs
agent, watch, config, log = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
def argv(p):
    try:
        return open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
    except OSError:
        return []
# The rank: a python whose script is offload_train.py (not torchrun, nor a shell whose command
# line merely mentions it, such as the one that started this script).
# torchrun starts it as `python -u offload_train.py ...`.
rank = next(int(p) for p in os.listdir("/proc") if p.isdigit() and b"python" in (argv(p) or [b""])[0]
            and any(a.endswith(b"offload_train.py") for a in argv(p)[1:3]))
hz = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / hz
def threads(pid):
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{t}/comm").read().strip()
            f = open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()
            out[(t, name)] = (int(f[11]) + int(f[12])) / hz
        except OSError:
            pass
    return out
def steps():
    return [float(m.group(1)) for l in open(log) if (m := re.search(r"rank 0 at [\d.]+ took ([\d.]+)", l))]
maxid = int(sys.argv[6])
p0 = {(i, n): (ns, c) for i, n, ns, c in programs() if i > maxid}
r0, a0, s0, t0, th0 = cpu(rank), cpu(agent), len(steps()), time.time(), threads(agent)
time.sleep(watch)
p1 = {(i, n): (ns, c) for i, n, ns, c in programs() if i > maxid}
r1, a1, s1, t1, th1 = cpu(rank), cpu(agent), len(steps()), time.time(), threads(agent)
wall, rank_cpu, ncpu = t1 - t0, r1 - r0, os.cpu_count()
print(f"== agent {config}: {wall:.1f} s, {s1 - s0} steps, the rank used {rank_cpu:.1f} s of CPU ({rank_cpu / wall:.2f} cores); the agent {a1 - a0:.2f} s ({(a1 - a0) / wall * 100:.2f}% of a core)")
by_name = {}
for k, v in th1.items():
    by_name[k[1]] = by_name.get(k[1], 0) + v - th0.get(k, 0)
print("   agent threads: " + ", ".join(f"{n} {s / wall * 100:.2f}%" for n, s in sorted(by_name.items(), key=lambda kv: -kv[1]) if s > 0))
total = 0
for k, (ns, c) in sorted(p1.items(), key=lambda kv: -(kv[1][0] - p0.get(kv[0], (0, 0))[0])):
    dns, dc = ns - p0.get(k, (0, 0))[0], c - p0.get(k, (0, 0))[1]
    if dc <= 0:
        continue
    total += dns
    print(f"   {k[1]:16} {dc / wall:10.0f} runs/s {dns / dc:7.0f} ns/run  {dns / 1e9 / rank_cpu * 100:6.3f}% of the rank's CPU")
print(f"   all programs: {total / 1e9:.3f} s = {total / 1e9 / rank_cpu * 100:.3f}% of the rank's CPU time, {total / 1e9 / wall / ncpu * 100:.3f}% of the machine's {ncpu} CPUs; "
      f"with the agent's own CPU: {(total / 1e9 + a1 - a0) / rank_cpu * 100:.3f}% of the rank's CPU time")
PY
    wait $AGENT
    python3 -c "import json, sys; d = json.load(open(sys.argv[1])); p = d['agent']['page_path']; f = p.get('alloc_cache_flushes'); print(f'   allocation-cache flushes: {f} in {d[\"duration_s\"]:.1f} s = {f / d[\"duration_s\"]:.0f}/s' if f is not None else '   (no flush count)')" "$OUT/share-snapshot.json" || tail -3 "$OUT/share-agent.err"
    # The sampled page path's own account: the weights it chose and the share attached.
    python3 -c "import json, sys; p = json.load(open(sys.argv[1]))['agent']['page_path']; print('   page path', p['mode'], {k: p.get(k) for k in ('weight', 'node_page_events_per_s', 'attached_share', 'windows', 'toggle_us_mean', 'ms_by_weight')})" "$OUT/share-snapshot.json" || true
done
