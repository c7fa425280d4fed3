#!/usr/bin/env bash
# On the GPU machine: the CPU profile of a real training rank (issue 31) from outside. One rank of
# the offload loop (tests/device/offload_train.py) with node 0 declared cxl; after a warm-up, a
# snapshot of WATCH seconds at the default 49 Hz. Prints the rank's top Python lines (a native
# OpenMP/MKL worker's ticks carry its main thread's line as "(main thread) ..."), its top native
# functions, the sampler's outcomes and the agent's CPU and RSS.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${BIN:-./target/release/tierscope}
HERE=$(cd "$(dirname "$0")" && pwd)
torchrun --standalone --nproc-per-node 1 "$HERE/offload_train.py" --steps ${STEPS:-60} > "$OUT/cpu-train.log" 2>&1 &
TR=$!
sleep ${WARMUP:-25}
python3 - "$BIN" "$OUT" ${WATCH:-20} <<'PY'
import json, resource, subprocess, sys, time
bin, out, watch = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.time()
with open(f"{out}/cpu-snapshot.json", "w") as so, open(f"{out}/cpu-snapshot.err", "w") as se:
    rc = subprocess.call([bin, "snapshot", "--json", "--duration", watch, "--match", "offload_train", "--cxl-node", "0"], stdout=so, stderr=se)
wall = time.time() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"agent rc {rc} wall {wall:.1f}s cpu {ru.ru_utime+ru.ru_stime:.2f}s = {100*(ru.ru_utime+ru.ru_stime)/wall:.2f}% of a core, peak rss {ru.ru_maxrss/1024:.1f} MiB")
doc = json.load(open(f"{out}/cpu-snapshot.json"))
print("cpu_sampling", json.dumps(doc["agent"].get("cpu_sampling")))
print("site stacks", json.dumps(doc["agent"]["site_sampling"].get("stacks")))
for p in doc["processes"]:
    prof = p.get("cpu_profile")
    if not prof or not prof.get("samples"):
        continue
    print(f"pid {p['pid']} {p['comm']} rank {p.get('rank')} threads {p.get('threads')}: {prof['samples']} samples, {prof['ticks']} ticks, {prof['cpu_ns']/1e9:.2f} s CPU")
    for l in prof["top_python_lines"][:8]:
        print(f"   py  {l['share']*100:5.1f}%  {l['what']}")
    for l in prof["top_native_functions"][:8]:
        print(f"   nat {l['share']*100:5.1f}%  {l['what'][:150]}")
PY
wait $TR
grep -c "rank 0 at" "$OUT/cpu-train.log"
