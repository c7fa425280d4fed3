# On the GPU machine: a process pins 2 GiB through CUDA (`torch.empty(..., pin_memory=True)`, the
# NVIDIA driver's cuMemHostAlloc: counted in neither VmPin nor VmLck) and reports the kernel's
# truth about it: the range, its pages per node from its own numa_maps, VmPin/VmLck, and the
# kernel's global pin counter (nr_foll_pin_acquired) across the pinning. It holds the memory
# for HOLD seconds (a few of the agent's readings), then leaves. pinned_memory.sh compares.
# Usage: python3 pinned_memory.py MARKER [HOLD]
import os
import re
import sys
import time

import torch


def foll_pins():
    s = open("/proc/vmstat").read()
    return int(re.search(r"^nr_foll_pin_acquired (\d+)", s, re.M).group(1))


assert torch.cuda.is_available(), "no CUDA device"
torch.zeros(1, device="cuda")
before = foll_pins()
x = torch.empty(512 * 1024 * 1024, dtype=torch.float32, pin_memory=True)
pinned_pages = foll_pins() - before
start = x.data_ptr()
nodes = {}
for line in open("/proc/self/numa_maps"):
    f = line.split()
    if int(f[0], 16) == start:
        nodes = {k[1:]: int(v) for k, v in (t.split("=") for t in f if re.match(r"N\d+=", t))}
status = {l.split(":")[0]: l.split()[1] for l in open("/proc/self/status") if l.startswith(("VmPin", "VmLck"))}
print(f"truth pid={os.getpid()} bytes={x.numel() * 4} addr={start:#x} foll_pin_pages={pinned_pages} "
      f"numa_pages={nodes} VmPin_kB={status['VmPin']} VmLck_kB={status['VmLck']}", flush=True)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 8)
os._exit(0)
