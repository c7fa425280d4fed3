"""ABBA step-time pairs within one long training run: the agent is started and stopped around
blocks of steps, so that each pair (alone block, agent block; the order alternating from pair to
pair: A B, B A, A B, ...) compares steps of the same processes minutes apart, not two torchrun
start-ups (fresh runs took ~75 s a pair: 10 pairs did not fit one device call).

usage: abba_blocks.py LOG PAIRS BLOCK_STEPS SKIP [SETTLE_S] -- AGENT_CMD... [--vs BASELINE_CMD...]
With `--vs`, the baseline blocks run BASELINE_CMD (e.g. the agent with one feature off) instead
of nothing: the pairs then measure the difference between the two commands.
The training job writes `step N rank R at T took S` lines to LOG (started by the caller). For each
block the driver waits for BLOCK_STEPS steps of rank 0; the first SKIP steps after each change
(the agent starting or stopping) are left out, and an agent block starts SETTLE_S seconds (default
3: load, calibrate, attach) after the agent did: 15 or more leaves its start (discovery, the first
residency walk, Python runtime and module reads) out, measuring the agent as it runs for hours. Prints one line per block and the summary: each
pair's change (median agent step / median alone step - 1), their median, a bootstrap 95% interval
of that median (10,000 resamples of the pairs), and how many pairs went each way.
"""
import os
import random
import re
import signal
import statistics as st
import subprocess
import sys
import time

STEP = re.compile(r"step (\d+) rank 0 at ([\d.]+) took ([\d.]+)(?: cpu ([\d.]+))?")


def steps(log):
    out = []
    with open(log) as f:
        for line in f:
            if m := STEP.search(line):
                cpu = float(m.group(4)) if m.group(4) else None
                out.append((int(m.group(1)), float(m.group(3)), cpu))
    return out


def wait_steps(log, after, n, deadline_s=600):
    t = time.time()
    while time.time() - t < deadline_s:
        s = [x for x in steps(log) if x[0] > after]
        if len(s) >= n:
            return s[:n]
        time.sleep(0.2)
    raise SystemExit(f"abba: no {n} steps after step {after} within {deadline_s} s")


def last_step(log):
    s = steps(log)
    return s[-1][0] if s else 0


def agent_cpu_ticks(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except (OSError, IndexError, ValueError):
        return 0


def interrupt(agent):
    """SIGINT (the agent flushes and stops), then a kill after 20 s."""
    agent.send_signal(signal.SIGINT)
    try:
        agent.wait(timeout=20)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()


def bootstrap_median(xs, n=10_000, seed=1):
    rnd = random.Random(seed)
    meds = sorted(st.median(rnd.choices(xs, k=len(xs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def summary(what, blocks, base):
    changes = [b / a - 1 for a, b in zip(blocks["alone"], blocks["agent"])]
    med = st.median(changes)
    lo, hi = bootstrap_median(changes)
    slower = sum(c > 0 for c in changes)
    print(f"{what}: pair changes: " + ", ".join(f"{c * 100:+.2f}%" for c in changes))
    print(f"{what}: paired median change {med * 100:+.2f}% over {len(changes)} ABBA pairs (agent vs {base}), "
          f"bootstrap 95% interval {lo * 100:+.2f}% .. {hi * 100:+.2f}%; "
          f"{slower} pairs higher with the agent, {len(changes) - slower} lower or equal")
    print(f"{what}: targets: median <= +0.5%: {'met' if med <= 0.005 else 'MISSED'}; "
          f"interval's upper end < +1.5%: {'met' if hi < 0.015 else 'MISSED'}")


def main():
    log, pairs, block, skip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    settle = float(sys.argv[5]) if sys.argv[5] != "--" else 3.0
    cmd = sys.argv[sys.argv.index("--") + 1:]
    agent_cmd, base_cmd = (cmd[:cmd.index("--vs")], cmd[cmd.index("--vs") + 1:]) if "--vs" in cmd else (cmd, None)
    base = "base" if base_cmd else "alone"
    blocks = {"alone": [], "agent": []}
    cpu_blocks = {"alone": [], "agent": []}
    cpu = []
    for p in range(pairs):
        order = ["alone", "agent"] if p % 2 == 0 else ["agent", "alone"]
        for way in order:
            agent = None
            run = agent_cmd if way == "agent" else base_cmd
            if run:
                agent = subprocess.Popen(run, stdout=subprocess.DEVNULL, stderr=open(f"{log}.{way}{p}.err", "w"))
                time.sleep(settle)
            start = last_step(log)
            c0, t0 = (agent_cpu_ticks(agent.pid), time.time()) if agent else (0, 0)
            got = wait_steps(log, start, skip + block)[skip:]
            if agent:
                if way == "agent":
                    cpu.append((agent_cpu_ticks(agent.pid) - c0) / 100 / (time.time() - t0) * 100)
                interrupt(agent)
            med = st.median(t for _, t, _ in got)
            blocks[way].append(med)
            cpus = [c for _, _, c in got if c is not None]
            cmed = st.median(cpus) if len(cpus) == len(got) else None
            cpu_blocks[way].append(cmed)
            label = base if way == "alone" else way
            cpu_text = f" cpu median {cmed:.4f}s" if cmed is not None else ""
            print(f"pair {p + 1} {label:5}: steps {got[0][0]}..{got[-1][0]} median {med:.4f}s{cpu_text}", flush=True)
    summary("step time", blocks, base)
    if all(c is not None for c in cpu_blocks["alone"] + cpu_blocks["agent"]):
        summary("step CPU time (the process's, all threads)", cpu_blocks, base)
    if cpu:
        print(f"agent CPU while watching: {min(cpu):.2f}-{max(cpu):.2f}% of a core (median {st.median(cpu):.2f}%)")


if __name__ == "__main__":
    main()
