#!/usr/bin/env bash
# On the GPU machine: `tierscope topology` (text, JSON), the NVIDIA driver's files and the PCI classes, and a
# snapshot of a torch process on cuda:0 with LOCAL_RANK=0: its `gpu` must name the H200, its PCI
# address and node, from the /dev/nvidiaN it holds open. Usage: BIN=.device/tierscope bash tests/device/gpu_placement.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=${BIN:-.device/tierscope}
"$B" topology > "$OUT/topology.txt" 2>&1
"$B" topology --json > "$OUT/topology.json" 2> "$OUT/topology.err"
for d in /proc/driver/nvidia/gpus/*; do echo "== $d"; ls "$d"; cat "$d/information"; done > "$OUT/driver.txt" 2>&1
for d in /sys/bus/pci/devices/*; do echo "$d $(cat $d/class) $(cat $d/vendor) $(cat $d/numa_node)"; done > "$OUT/pci.txt" 2>&1
nproc > "$OUT/nproc.txt"
LOCAL_RANK=0 RANK=0 WORLD_SIZE=1 python3 -c "
import torch, time
x = torch.ones(1 << 20, device='cuda:0')
torch.cuda.synchronize()
print('ready', torch.cuda.get_device_name(0), flush=True)
time.sleep(30)
" > "$OUT/py.txt" 2>&1 &
PY=$!
for _ in $(seq 240); do grep -q ready "$OUT/py.txt" && break; sleep 0.25; done
ls -l /proc/$PY/fd > "$OUT/fds.txt" 2>&1
"$B" snapshot --json --duration 4 --pid "$PY" > "$OUT/snap.json" 2> "$OUT/snap.err"
echo "snapshot rc=$?"
kill $PY 2>/dev/null
python3 - "$OUT/snap.json" "$PY" <<'PY' | tee "$OUT/summary.txt"
import json, sys
s = json.load(open(sys.argv[1]))
print("gpus:", json.dumps(s["gpus"]))
p = next(p for p in s["processes"] if p["pid"] == int(sys.argv[2]))
print("rank", p["rank"], "local_rank", p["local_rank"], "role", p.get("role"))
print("gpu:", json.dumps(p["gpu"]))
print("cpus:", json.dumps(p["cpus"]))
PY
grep -c nvidia "$OUT/fds.txt"
