#!/usr/bin/env bash
# On the GPU machine: the CXL allocation sites of a real torch training loop (one process of
# tests/device/offload_train.py: pinned fp32 master weights and Adam state, CPU Adam step) with
# node 0 declared cxl, the agent started first so the pinning lines are seen. Prints the top
# sites (Python frames first), the share of frames named (native, Python), how stacks were taken,
# the user-space unwinding time per sample, and the kernel cost per sample: mm_page_alloc's
# run_time_ns per call with sampling on, less the same with sampling off (--site-sample-every 0),
# times calls per delivered sample. bpf_stats is on only while measuring.
# With PIDNS=1 the loop runs as a container's process: under `unshare -pfm --mount-proc` (its own
# PID and mount namespaces; CPython's thread ids are then that namespace's).
# Usage: BIN=/path/to/tierscope OUT=/tmp/out [PIDNS=1] bash tests/device/python_sites.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${BIN:-./target/release/tierscope}
STEPS=${STEPS:-25}
HERE=$(dirname "$0")
WRAP=()
[ "${PIDNS:-0}" = 1 ] && WRAP=(unshare -pfm --mount-proc)
# The page-allocation program: the classic tracepoint or the tp_btf one (names cut to 15 bytes).
STATS="python3 $HERE/bpf_prog_stats.py mm_page_alloc mm_page_alloc_b"
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)' | tee "$OUT/py-versions.txt"

run() { # run NAME AGENT-ARGS...: the agent on, then a training run, then the agent off
    local name=$1; shift
    sysctl -q kernel.bpf_stats_enabled=1
    "$BIN" snapshot --json --duration 600 --match offload_train --cxl-node 0 "$@" \
        > "$OUT/py-$name.json" 2> "$OUT/py-$name.err" &
    local ag=$!
    for _ in $(seq 120); do grep -q "watching for" "$OUT/py-$name.err" && break; sleep 0.5; done
    $STATS > "$OUT/py-$name.stats0"
    "${WRAP[@]}" python3 "$HERE/offload_train.py" --steps "$STEPS" > "$OUT/py-$name-train.log" 2>&1
    $STATS > "$OUT/py-$name.stats1"
    kill -INT $ag; wait $ag
    sysctl -q kernel.bpf_stats_enabled=0
}
run off --site-sample-every 0
run on
python3 - "$OUT" <<'PY' | tee "$OUT/py-summary.txt"
import json, sys
out = sys.argv[1]
def cost(name):
    a = open(f"{out}/py-{name}.stats0").read().split(); b = open(f"{out}/py-{name}.stats1").read().split()
    total = lambda v, i: sum(int(x) for x in v[i::3])
    return total(b, 1) - total(a, 1), total(b, 2) - total(a, 2)
(off_ns, off_n), (on_ns, on_n) = cost("off"), cost("on")
doc = json.load(open(f"{out}/py-on.json"))
ss = doc["agent"]["site_sampling"]
st, fn = ss["stacks"], ss["frames_named"]
per_call_off, per_call_on = off_ns / max(off_n, 1), on_ns / max(on_n, 1)
print(f"mm_page_alloc: {per_call_off:.0f} ns/call without sampling ({off_n} calls), {per_call_on:.0f} ns/call with ({on_n} calls)")
print(f"kernel cost per delivered sample: {(per_call_on - per_call_off) * on_n / max(ss['delivered'], 1):.0f} ns ({ss['delivered']} samples)")
print(f"user-space unwinding per sample: {st['unwind_ns_per_sample']} ns")
pct = lambda a, b: f"{100 * a / b:.1f}%" if b else "n/a"
print(f"frames named: native {fn['native_named']}/{fn['native']} = {pct(fn['native_named'], fn['native'])}, "
      f"python {fn['python_named']}/{fn['python']} = {pct(fn['python_named'], fn['python'])}")
print("site_sampling", json.dumps({k: v for k, v in ss.items() if k not in ("stacks", "frames_named")}))
print("stacks", json.dumps(st))
for p in doc["processes"]:
    if not p.get("top_cxl_alloc_sites"): continue
    print(f"pid {p['pid']} {p['comm']} sites {p['cxl_alloc_site_count']}")
    for s in p["top_cxl_alloc_sites"][:6]:
        print(f"  site pages {s['pages']} samples {s['samples']}")
        frames = s["frames"]
        py = [f for f in frames if f["kind"] == "python"]
        for f in py[:8]: print(f"    {f['file']}:{f['line']} in {f['function']}")
        native = [t for t, f in zip(s["frames_text"], frames) if f["kind"] == "native"]
        for t in native[:16]: print(f"    {t}")
PY
