#!/usr/bin/env python3
"""On the GPU machine (or any host with several CPython versions): which Python versions the
agent names frames of. Finds every python3.N interpreter (PATH, /usr/bin, /usr/local/bin, conda
and pyenv folders), runs tests/support/python_sites.py under each with node 0 declared cxl
(`snapshot --pid PID --cxl-node 0`), and prints per interpreter: its version and path, the top
site's Python frames, whether they name the allocating line (fill_optimizer_state) above its
caller (train_step), and the agent's Python counters (python, python_processes, and the reasons
a Python is not read: python_unsupported_version, python_no_runtime, python_bad_debug_offsets).
Here (CI host) only Debian's 3.11 exists and trixie's 3.13 is tested under chroot; 3.10 could
not be obtained as a binary, so its line here is the first real check of the 3.10 table.
Usage: sudo BIN=./target/release/tierscope OUT=/tmp/out python3 tests/device/python_versions.py
Exit status: 1 when an interpreter of 3.10-3.13 was found whose frames were not named.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "support", "python_sites.py")
BIN = os.environ.get("BIN", "./target/release/tierscope")
OUT = os.environ.get("OUT", "/tmp/out")


def interpreters():
    seen, found = set(), []
    dirs = os.environ.get("PATH", "").split(":") + ["/usr/bin", "/usr/local/bin", "/opt/conda/bin"]
    dirs += glob.glob("/opt/conda/envs/*/bin") + glob.glob(os.path.expanduser("~/.pyenv/versions/*/bin"))
    dirs += glob.glob("/root/miniconda3/envs/*/bin") + glob.glob("/root/miniconda3/bin")
    for d in dirs:
        for p in sorted(glob.glob(os.path.join(d, "python3.[0-9]*"))):
            name = os.path.basename(p)
            if not name[len("python3."):].isdigit() or not os.access(p, os.X_OK):
                continue
            real = os.path.realpath(p)
            if real in seen:
                continue
            seen.add(real)
            found.append(p)
    return found


def run(py):
    version = subprocess.run([py, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True).stdout.strip()
    w = subprocess.Popen([py, SCRIPT, "256"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = int(w.stdout.readline().split()[1])
    agent = subprocess.Popen([BIN, "snapshot", "--json", "--duration", "4", "--pid", str(pid), "--cxl-node", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Let the agent attach before the allocation.
    time.sleep(2)
    w.stdin.write("go\n")
    w.stdin.flush()
    w.stdout.readline()
    out, err = agent.communicate()
    w.stdin.close()
    w.wait()
    tag = os.path.basename(py) + "-" + version
    with open(os.path.join(OUT, f"pyver-{tag}.json"), "w") as f:
        f.write(out)
    with open(os.path.join(OUT, f"pyver-{tag}.err"), "w") as f:
        f.write(err)
    try:
        doc = json.loads(out)
    except ValueError:
        return version, None, None, err.strip().splitlines()[-1:] or ["no output"]
    stacks = doc["agent"]["site_sampling"]["stacks"]
    sites = [p for p in doc["processes"] if p["pid"] == pid]
    top = sites[0]["top_cxl_alloc_sites"][0] if sites and sites[0].get("top_cxl_alloc_sites") else None
    return version, stacks, top, []


def main():
    os.makedirs(OUT, exist_ok=True)
    bad = 0
    pys = interpreters()
    print("interpreters found:", " ".join(pys) or "none")
    for py in pys:
        version, stacks, top, why = run(py)
        minor = int(version.split(".")[1]) if version.count(".") >= 1 else -1
        if stacks is None:
            print(f"{py} {version}: agent failed: {why}")
            bad += 1
            continue
        frames = top["frames_text"] if top else []
        python = [f for f in frames if " in " in f and ":" in f]
        alloc = next((i for i, f in enumerate(frames) if f.endswith(" in fill_optimizer_state")), None)
        caller = next((i for i, f in enumerate(frames) if f.endswith(" in train_step")), None)
        ok = alloc is not None and caller is not None and alloc < caller
        keys = ["python", "python_processes", "python_no_thread", "python_read_failed", "python_unsupported",
                "python_unsupported_version", "python_no_runtime", "python_bad_debug_offsets",
                "python_frames_unresolved"]
        print(f"{py} {version}: {'NAMED' if ok else 'NOT NAMED'}; "
              + " ".join(f"{k}={stacks.get(k)}" for k in keys))
        for f in python[:4]:
            print(f"    {f}")
        if not ok and 10 <= minor <= 13:
            bad += 1
            for f in frames[:12]:
                print(f"    | {f}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    if not shutil.which(BIN) and not os.path.exists(BIN):
        sys.exit(f"{BIN} not found: build it or set BIN")
    main()
