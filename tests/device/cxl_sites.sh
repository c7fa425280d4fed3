#!/usr/bin/env bash
# On the GPU machine: a real torchrun offload loop with node 0 declared cxl; step time before,
# with and after the agent; agent CPU and RSS; site-sampling outcomes and top sites.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${BIN:-./target/release/tierscope}
: > "$OUT/cxl.log"
torchrun --standalone --nproc-per-node 2 tests/device/offload_train.py --steps ${STEPS:-90} >> "$OUT/cxl.log" 2>&1 &
TR=$!
sleep ${WARMUP:-30}
echo "agent on at $(date +%s.%N)" >> "$OUT/cxl.log"
python3 - "$BIN" "$OUT" ${WATCH:-30} <<'PY'
import resource, subprocess, sys, time
bin, out, watch = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.time()
with open(f"{out}/cxl-snapshot.json", "w") as so, open(f"{out}/cxl-snapshot.err", "w") as se:
    rc = subprocess.call([bin, "snapshot", "--json", "--duration", watch, "--match", "torchrun|offload_train", "--cxl-node", "0"], stdout=so, stderr=se)
wall = time.time() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
open(f"{out}/cxl-agent-cost.txt", "w").write(f"rc {rc} wall {wall:.1f}s cpu {ru.ru_utime+ru.ru_stime:.2f}s = {100*(ru.ru_utime+ru.ru_stime)/wall:.2f}% of a core, peak rss {ru.ru_maxrss/1024:.1f} MiB\n")
PY
echo "snapshot rc=0 agent off at $(date +%s.%N)" >> "$OUT/cxl.log"
wait $TR
echo "train rc=$?" >> "$OUT/cxl.log"
cat "$OUT/cxl-agent-cost.txt"
python3 - "$OUT/cxl.log" "$OUT/cxl-snapshot.json" <<'PY' | tee "$OUT/cxl-summary.txt"
import json, re, statistics as st, sys
on = off = None; steps = []
for l in open(sys.argv[1]):
    if m := re.match(r"agent on at ([\d.]+)", l): on = float(m.group(1))
    if m := re.match(r"snapshot rc=\d+ agent off at ([\d.]+)", l): off = float(m.group(1))
    if m := re.match(r"step (\d+) rank \d at ([\d.]+) took ([\d.]+)", l):
        if int(m.group(1)) > 5: steps.append((float(m.group(2)), float(m.group(3))))
w = [t for a, t in steps if on + 3 < a < off]
b = [t for a, t in steps if a < on]
f = [t for a, t in steps if a > off + 1]
med = lambda xs: f"{st.median(xs):.4f}s" if xs else "n/a (no steps: raise STEPS)"
print(f"steps before {len(b)} median {med(b)}; with agent {len(w)} median {med(w)}; after {len(f)} median {med(f)}")
if w and b + f:
    print(f"ratio with/without {st.median(w) / st.median(b + f):.4f}")
doc = json.load(open(sys.argv[2]))
ag = doc.get("agent", {})
print("site_sampling", json.dumps(ag.get("site_sampling"), indent=None))
print("drops", ag.get("drops"))
for p in doc["processes"]:
    if not p.get("top_cxl_alloc_sites"): continue
    print(f"pid {p['pid']} {p['comm']} rank {p.get('rank')} faults {p['faults']} by path {p.get('faults_by_path')} resident_by_tier {p.get('resident_bytes_by_tier')}")
    sites = p["top_cxl_alloc_sites"]
    listed, carried = sum(s["pages"] for s in sites), sum(s.get("sampled_pages", s["pages"]) for s in sites)
    print(f"  node 0 (declared cxl) pages allocated {p['alloc_pages_by_node'].get('0')}; {p['cxl_alloc_site_count']} sites, the top {len(sites)} list {listed} pages, their samples carried {carried}")
    for s in p["top_cxl_alloc_sites"][:3]:
        print("  site pages", s.get("pages"), "sampled", s.get("sampled_pages"))
        for fr in s["frames"][:14]: print("    ", fr)
PY
