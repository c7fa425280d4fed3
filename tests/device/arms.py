"""What each way of running the agent costs a training loop, against no agent at all, in one
long run judged by the loop's own step log.

usage: arms.py LOG ROUNDS BLOCK SKIP SETTLE NAME=CMD [NAME=CMD ...]

Each round runs, for every arm in a shuffled order, one pair of blocks: an "alone" block (no
tierscope process, and no BPF program but those loaded before the first agent started: checked
through the bpf syscall before the block counts) and a block of the arm (CMD started SETTLE s
before the block and ended, SIGINT then SIGKILL after 20 s, after it); the two blocks' order
alternates from pair to pair (ABBA). A block is BLOCK steps of rank 0 after SKIP left out. An arm
whose CMD is `sleep ...` is the A/A arm: nothing of tierscope runs in either block, and its
interval is the method's own noise beside the others.

For each arm: every pair's change (median step of the arm's block / median step of its alone block
- 1), their median, a bootstrap 95% interval of the median (10,000 resamples), how many pairs went
each way, the arm's CPU (% of one core, for agent arms); and the same for the step's CPU time.
The pass rule (issue 40), printed for every arm: median <= +0.5% and upper end < +1.5%.
"""
import os
import random
import shlex
import signal
import statistics as st
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from abba_blocks import agent_cpu_ticks, bootstrap_median, interrupt, last_step, wait_steps  # noqa: E402
from bpf_prog_stats import programs  # noqa: E402


def prog_ids():
    return {pid for pid, _, _, _ in programs()}


def wait_clean(baseline, deadline_s=30):
    """Waits until no BPF program but the baseline's is loaded; returns the stragglers' names."""
    t = time.time()
    while True:
        extra = [(pid, name) for pid, name, _, _ in programs() if pid not in baseline]
        if not extra or time.time() - t > deadline_s:
            return [n for _, n in extra]
        time.sleep(0.2)


def summary(name, pairs, key):
    changes = [b[key] / a[key] - 1 for a, b in pairs if a[key] and b[key]]
    if not changes:
        return
    med = st.median(changes)
    lo, hi = bootstrap_median(changes)
    up = sum(c > 0 for c in changes)
    what = "step time" if key == "step" else "step CPU time"
    rule = "met" if med <= 0.005 and hi < 0.015 else "MISSED"
    print(f"{name:12} {what:13}: median {med * 100:+.2f}% over {len(changes)} pairs, bootstrap 95% "
          f"{lo * 100:+.2f}% .. {hi * 100:+.2f}%, {up} higher / {len(changes) - up} lower or equal; "
          f"rule (median <= +0.5%, upper < +1.5%): {rule}", flush=True)


def block(log, skip, n):
    start = last_step(log)
    got = wait_steps(log, start, skip + n)[skip:]
    cpus = [c for _, _, c in got if c is not None]
    return {
        "step": st.median(t for _, t, _ in got),
        "cpu": st.median(cpus) if len(cpus) == len(got) else None,
        "first": got[0][0],
        "last": got[-1][0],
    }


def main():
    log, rounds, n, skip, settle = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    arms = [(a.split("=", 1)[0], shlex.split(a.split("=", 1)[1])) for a in sys.argv[6:]]
    baseline = prog_ids()
    print(f"arms: {', '.join(a for a, _ in arms)}; {rounds} rounds of a pair each; blocks of {n} steps "
          f"(+{skip} left out), an arm's block {settle:.0f} s after its start; {len(baseline)} BPF programs "
          f"loaded before any agent (the baseline)", flush=True)
    rnd = random.Random(int(os.environ.get("SEED", "40")))
    pairs = {a: [] for a, _ in arms}
    cpu = {a: [] for a, _ in arms}
    unclean = 0
    order_flip = 0
    for r in range(rounds):
        order = list(arms)
        rnd.shuffle(order)
        for name, cmd in order:
            ways = ["alone", "arm"] if order_flip % 2 == 0 else ["arm", "alone"]
            order_flip += 1
            got = {}
            for way in ways:
                if way == "alone":
                    left = wait_clean(baseline)
                    if left:
                        unclean += 1
                        print(f"  alone block with programs still loaded: {left}", flush=True)
                    got[way] = block(log, skip, n)
                    continue
                p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(f"{log}.{name}{r}.err", "w"))
                time.sleep(settle)
                # The listing must see an agent's programs, or the alone blocks' check sees nothing.
                got["progs"] = sum(pid not in baseline for pid, _, _, _ in programs())
                c0, t0 = agent_cpu_ticks(p.pid), time.time()
                got[way] = block(log, skip, n)
                cpu[name].append((agent_cpu_ticks(p.pid) - c0) / 100 / (time.time() - t0) * 100)
                interrupt(p)
            pairs[name].append((got["alone"], got["arm"]))
            a, b = got["alone"], got["arm"]
            print(f"round {r + 1} {name:12} alone {a['step']:.4f}s (steps {a['first']}..{a['last']}) "
                  f"arm {b['step']:.4f}s (steps {b['first']}..{b['last']}, {got['progs']} BPF programs of its own) "
                  f"change {(b['step'] / a['step'] - 1) * 100:+.2f}%",
                  flush=True)
    print(f"== summary ({unclean} alone blocks started with leftover programs after 30 s) ==")
    for name, _ in arms:
        summary(name, pairs[name], "step")
    for name, _ in arms:
        if all(a["cpu"] is not None and b["cpu"] is not None for a, b in pairs[name]):
            summary(name, pairs[name], "cpu")
    for name, _ in arms:
        if cpu[name] and any(c > 0 for c in cpu[name]):
            print(f"{name:12} its CPU while running: median {st.median(cpu[name]):.2f}% of a core "
                  f"({min(cpu[name]):.2f}-{max(cpu[name]):.2f})")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
