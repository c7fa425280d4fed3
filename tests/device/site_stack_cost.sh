#!/usr/bin/env bash
# On the GPU machine: what the site-stack machinery (ring buffer, unwinding, Python frames,
# naming) costs the agent during a real training loop with node 0 declared cxl, at the default
# sampling. One torchrun of tests/device/offload_train.py (2 ranks, STEPS steps) under
# `tierscope snapshot --cxl-node 0`; read from /proc while it watches: the agent's CPU (all
# threads, and the site-reader + site-namer threads alone), its peak RSS (VmHWM) and RssAnon /
# RssFile, and the resident size of its largest mappings (the bpf-map lines are the ring
# buffers, mapped twice); from the snapshot: samples delivered per second, ring_full, and the
# user-space unwinding time per sample. Targets: the agent below 2% of a core; before this work
# the peak RSS was 162 MiB (16 MiB ring = 32 MiB resident; symbol tables with DWARF lines).
# Usage: BIN=/path/to/tierscope OUT=/tmp/out bash tests/device/site_stack_cost.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${BIN:-./target/release/tierscope}
STEPS=${STEPS:-40}
HERE=$(dirname "$0")
"$BIN" snapshot --json --duration 900 --match 'torchrun|offload_train' --cxl-node 0 \
    > "$OUT/stackcost.json" 2> "$OUT/stackcost.err" &
ag=$!
for _ in $(seq 120); do grep -q "watching for" "$OUT/stackcost.err" && break; sleep 0.5; done
ticks() { awk '{print $14 + $15}' "/proc/$ag/stat"; }
site_ticks() { cat /proc/$ag/task/*/stat 2>/dev/null | awk '/\(site-/ {s += $14 + $15} END {print s + 0}'; }
t0=$(date +%s.%N); c0=$(ticks); s0=$(site_ticks)
torchrun --standalone --nproc-per-node 2 "$HERE/offload_train.py" --steps "$STEPS" > "$OUT/stackcost-train.log" 2>&1
t1=$(date +%s.%N); c1=$(ticks); s1=$(site_ticks)
grep -E "VmHWM|VmRSS|RssAnon|RssFile" "/proc/$ag/status" > "$OUT/stackcost-status.txt"
python3 - "$ag" > "$OUT/stackcost-maps.txt" <<'PY'
import re, sys
rows, cur = [], None
for l in open(f"/proc/{sys.argv[1]}/smaps"):
    if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", l):
        p = l.split(); cur = [p[5] if len(p) > 5 else "[anon]", 0]; rows.append(cur)
    elif l.startswith("Rss:"):
        cur[1] = int(l.split()[1])
agg = {}
for name, kib in rows:
    agg[name] = agg.get(name, 0) + kib
for name, kib in sorted(agg.items(), key=lambda x: -x[1])[:12]:
    print(f"{kib / 1024:8.1f} MiB {name}")
PY
kill -INT $ag; wait $ag
python3 - "$OUT" "$t0" "$t1" "$c0" "$c1" "$s0" "$s1" <<'PY' | tee "$OUT/stackcost-summary.txt"
import json, sys
out = sys.argv[1]; t0, t1 = float(sys.argv[2]), float(sys.argv[3])
c, s = (int(sys.argv[5]) - int(sys.argv[4])) / 100, (int(sys.argv[7]) - int(sys.argv[6])) / 100
wall = t1 - t0
ss = json.load(open(f"{out}/stackcost.json"))["agent"]["site_sampling"]
n = max(ss["delivered"], 1)
print(f"training wall {wall:.1f}s; agent {100 * c / wall:.2f}% of a core (target < 2%: {'met' if 100 * c / wall < 2 else 'MISSED'}); "
      f"site threads {100 * s / wall:.2f}% of a core, {1e6 * s / n:.0f} us per sample")
print(f"samples delivered {ss['delivered']} ({ss['delivered'] / wall:.0f}/s), ring_full {ss['ring_full']}, "
      f"unwinding {ss['stacks']['unwind_ns_per_sample']} ns/sample, python {ss['stacks']['python']}")
print(open(f"{out}/stackcost-status.txt").read().strip())
print(open(f"{out}/stackcost-maps.txt").read().rstrip())
PY
