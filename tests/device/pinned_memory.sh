#!/usr/bin/env bash
# On the GPU machine: does tierscope see CUDA-pinned host memory as pinned, on its node?
# 1. tests/device/pinned_memory.py pins 2 GiB with torch (cuMemHostAlloc) under `tierscope
#    snapshot`: the snapshot's pinned bytes against the 2 GiB, the range's own numa_maps pages
#    and the kernel's pin counter. Target: within 1%.
# 2. The offload loop (tests/device/offload_train.py, two torchrun ranks) with node 0 declared cxl
#    (`--cxl-node 0`, like `[tiers] cxl = [0]`): `pinned_on_slow_tier` must open for each rank with its pinned bytes as
#    evidence, checked against the kernel's pin counter (nr_foll_pin_acquired - released, all
#    processes) read while the loop runs.
# Usage: BIN=.device/tierscope bash tests/device/pinned_memory.sh   (results also under $OUT)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${BIN:-.device/tierscope}
HERE=$(dirname "$0")
MARK=tierscope_pinned_memory
# The driver library the dynamic linker finds (what torch loads); the agent probes its own list
# of host paths first, and the libraries.path of the snapshot says which one it went by.
ls -la /usr/local/nvidia/lib64/libcuda.so* /usr/lib/x86_64-linux-gnu/libcuda.so* 2>&1 | tee "$OUT/libcuda.txt"
TIERSCOPE_CUDA_LIBRARIES=$(ldconfig -p | awk '/libcuda.so.1 / {print $NF; exit}')
export TIERSCOPE_CUDA_LIBRARIES
echo "ldconfig: $TIERSCOPE_CUDA_LIBRARIES" | tee -a "$OUT/libcuda.txt"

"$BIN" snapshot --json --duration "${WATCH:-14}" --match "$MARK" > "$OUT/pin2g.json" 2> "$OUT/pin2g.err" &
AGENT=$!
for _ in $(seq 300); do grep -q "watching for" "$OUT/pin2g.err" && break; sleep 0.1; done
python3 "$HERE/pinned_memory.py" "$MARK" 8 | tee "$OUT/pin2g.txt"
wait $AGENT; echo "snapshot rc=$?"
python3 - "$OUT/pin2g.json" "$OUT/pin2g.txt" <<'PY' | tee "$OUT/compare.txt"
import ast, json, re, sys
snap = json.load(open(sys.argv[1]))
t = re.search(r"^truth (.*)$", open(sys.argv[2]).read(), re.M).group(1)
truth = dict(re.findall(r"(\w+)=(\{[^}]*\}|\S+)", t))
pid, want = int(truth["pid"]), int(truth["bytes"])
numa = {k: int(v) * 4096 for k, v in ast.literal_eval(truth["numa_pages"]).items()}
p = next(p for p in snap["processes"] if p["pid"] == pid)
pin = p["pinned"] or {}
got = pin.get("cuda_host_alloc_bytes", 0)
by_node = p["pinned_bytes_by_node"]
print(f"2 GiB pin: process {pid} VmPin {truth['VmPin_kB']} kB, VmLck {truth['VmLck_kB']} kB; "
      f"kernel pin counter +{int(truth['foll_pin_pages']):,} pages ({int(truth['foll_pin_pages']) * 4096:,} B)")
print(f"  tierscope cuda_host_alloc_bytes {got:,} vs {want:,} ({100 * (got - want) / want:+.3f}%)")
for n, b in sorted(numa.items()):
    g = int(by_node.get(n, 0))
    print(f"  node {n}: tierscope pinned {g:,} B vs the range's numa_maps {b:,} B ({100 * (g - b) / max(b, 1):+.3f}%)"
          f" -> {'within 1%' if abs(g - b) <= 0.01 * b else 'OFF'}")
print("  agent.pinning:", json.dumps({k: snap["agent"]["pinning"][k] for k in ("cuda", "libraries", "ranges", "range_bytes")}))
print("  drops:", {k: v for k, v in snap["agent"]["drops"].items() if "pin" in k})
PY

# 2. The offload loop, node 0 declared cxl.
"$BIN" snapshot --json --cxl-node 0 --duration "${LOOP_WATCH:-60}" --match 'torchrun|offload_train' \
    > "$OUT/offload.json" 2> "$OUT/offload.err" &
AGENT=$!
for _ in $(seq 300); do grep -q "watching for" "$OUT/offload.err" && break; sleep 0.1; done
pins() { awk '/^nr_foll_pin_acquired/ {a=$2} /^nr_foll_pin_released/ {r=$2} END {print a - r}' /proc/vmstat; }
P0=$(pins)
torchrun --standalone --nproc-per-node 2 "$HERE/offload_train.py" --steps "${STEPS:-90}" --params-m "${PARAMS_M:-552}" \
    > "$OUT/offload.log" 2>&1 &
TRAIN=$!
# The kernel's count of pages held pinned, read while the loop runs (steps 20..).
for _ in $(seq 600); do [ "$(grep -c '^step' "$OUT/offload.log")" -ge 40 ] && break; sleep 0.2; done
P1=$(pins); echo "held_pinned_pages $((P1 - P0))" | tee "$OUT/kernel_pins.txt"
wait $AGENT; echo "snapshot rc=$?"
kill -INT $TRAIN 2>/dev/null; wait $TRAIN
python3 - "$OUT/offload.json" "$OUT/kernel_pins.txt" <<'PY' | tee -a "$OUT/compare.txt"
import json, sys
snap = json.load(open(sys.argv[1]))
held = int(open(sys.argv[2]).read().split()[1]) * 4096
ranks = [p for p in snap["processes"] if p.get("role") == "worker"]
total = 0
for p in ranks:
    pin = p["pinned"] or {}
    total += pin.get("cuda_host_alloc_bytes", 0) + pin.get("cuda_host_register_bytes", 0)
    print(f"rank {p['rank']} pid {p['pid']}: pinned by node {p['pinned_bytes_by_node']}, "
          f"cuda {pin.get('cuda_host_alloc_bytes', 0):,} B, VmLck {pin.get('locked_bytes', 0)}, VmPin {pin.get('vm_pin_bytes', 0)}")
print(f"ranks' CUDA-pinned bytes {total:,} vs the kernel's pages held pinned (all processes) {held:,} "
      f"({100 * (total - held) / max(held, 1):+.2f}%)")
ins = [i for i in snap["insights"]["open"] + snap["insights"]["closed"] if i["id"] == "pinned_on_slow_tier"]
for i in ins:
    print(f"insight pinned_on_slow_tier {i['subject']} opened at {i['opened_at_s']:.1f}s: {i['summary']}")
    print("  evidence:", {k: f"{v:,.0f}" for k, v in i["evidence"].items()})
opened = {i["subject"].get("pid") for i in ins}
for p in ranks:
    print(f"rank {p['rank']} pid {p['pid']}: pinned_on_slow_tier {'OPENED' if p['pid'] in opened else 'NOT opened'}")
print("agent.pinning:", json.dumps({k: snap["agent"]["pinning"][k] for k in ("cuda", "ranges", "range_bytes", "placement_failures")}))
PY
