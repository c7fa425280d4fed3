"""ABBA pairs of single steps (or short units of steps) within one long training run: the agent is
started once and then continued (SIGCONT: "agent" units) and stopped (SIGSTOP: "alone" units) at
step boundaries, so that the two states alternate every step or two (A B B A A B ...) instead of
every block of 20-30 steps: the machine's drift in regimes of 20-30 steps falls inside a pair,
not between its halves, and no unit waits for an agent's start-up.

usage: abba_steps.py LOG PAIRS BLOCK SKIP SETTLE_S -- AGENT_CMD...
The training job writes `step N rank R at T took S cpu C` lines to LOG (started by the caller).
The agent starts once (stderr to LOG.steps.err) and runs SETTLE_S seconds before the first unit
(its start-up left out). Pair p runs its units alone, agent (even p) or agent, alone (odd p); a
unit is SKIP steps of rank 0 left out and BLOCK steps measured, its value their median. The
switch to the next unit's state follows the line of its last step as it appears (the log is
followed, 5 ms polls); a step that ended before the switch is in no unit. A stop counts only
with none of the sampled page path's links (mm_page_alloc, mm_page_free, page_fault_user/kernel:
a thread of the agent attaches them for part of each 256 ms on a busy node) open in the stopped
agent: else it is continued for 30 ms and stopped again (50 times at most: with them attached
throughout, with --page-path exact or on a quiet node, the driver gives up). A stopped agent's
other kernel programs stay attached: the pairs compare its user-space work and page-path windows
with none of them, not a run with no agent at all. Each continue opens a window at once (the
cycle restarts from now after a stall), so the windows fall at the units' starts. Prints one
line per pair, abba_blocks.py's summaries (step time and step CPU time), the agent's CPU in its
units, the stop retries and the switches' latency (from the step line's time to the switch done:
the share of the next step run in the previous state).
"""
import os
import signal
import statistics as st
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from abba_blocks import STEP, agent_cpu_ticks, interrupt, summary  # noqa: E402

PAGE_TPS = {"mm_page_alloc", "mm_page_free", "page_fault_user", "page_fault_kernel"}


class Log:
    """The training log, followed: only the bytes appended since the last read are parsed."""

    def __init__(self, path, agent):
        self.f, self.rest, self.ready, self.agent = open(path, "rb"), b"", [], agent

    def read(self):
        lines = (self.rest + self.f.read()).split(b"\n")
        self.rest = lines.pop()
        for line in lines:
            if m := STEP.search(line.decode(errors="replace")):
                cpu = float(m.group(4)) if m.group(4) else None
                self.ready.append((int(m.group(1)), float(m.group(2)), float(m.group(3)), cpu))

    def skip_all(self):
        self.read()
        self.ready.clear()

    def next(self, deadline_s=120):
        """The next step of rank 0: (step, at, took, cpu)."""
        t = time.time()
        while not self.ready:
            alive(self.agent)
            if time.time() - t > deadline_s:
                raise SystemExit(f"abba_steps: no step in {deadline_s} s (has the training stopped?)")
            time.sleep(0.005)
            self.read()
        return self.ready.pop(0)


def alive(agent):
    if (rc := agent.poll()) is not None:
        try:
            tail = "".join(open(agent.err_path).readlines()[-20:])
        except OSError as e:
            tail = f"({e})"
        raise SystemExit(f"abba_steps: the agent exited (rc {rc}); its stderr ends:\n{tail}")


def all_stopped(pid):
    """Every thread of `pid` in state T (stopped)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            state = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # the thread exited
        if state != "T":
            return False
    return True


def page_links(pid):
    """The page path's tracepoints whose links `pid` holds open (from each link fd's fdinfo; a
    map's fdinfo is slow to read, so the links are found by their fd's name first)."""
    open_ = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:bpf_link":
                continue
            info = open(f"/proc/{pid}/fdinfo/{fd}").read()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in info.splitlines() if ":\t" in line)
        if fields.get("link_type") == "raw_tracepoint" and fields.get("tp_name") in PAGE_TPS:
            open_.append(fields["tp_name"])
    return open_


def stop(agent, tries=50):
    """SIGSTOPs the agent with no page-path link open; returns the retries it took."""
    for retry in range(tries):
        alive(agent)
        agent.send_signal(signal.SIGSTOP)
        t = time.time()
        while not all_stopped(agent.pid):
            alive(agent)
            if time.time() - t > 2:
                raise SystemExit("abba_steps: the agent did not stop (state T) within 2 s of a SIGSTOP")
            time.sleep(0.0002)
        if not (links := page_links(agent.pid)):
            return retry
        agent.send_signal(signal.SIGCONT)
        time.sleep(0.03)
    raise SystemExit(f"abba_steps: {tries} stops of the agent all found page-path links open ({', '.join(links)}): "
                     "the agent keeps them attached (--page-path exact, or sampled at weight 1 on a quiet node), "
                     "so its alone units would not be alone")


def end(agent):
    """Continues and interrupts the agent; kills it after 20 s: no stopped agent is left behind."""
    if agent.poll() is None:
        agent.send_signal(signal.SIGCONT)
        interrupt(agent)


def run(agent, log, pairs, block, skip, settle):
    time.sleep(settle)
    log.skip_all()
    units = {"alone": [], "agent": []}
    cpu_units = {"alone": [], "agent": []}
    cpu, ticks, cpu_s = [], 0, 0.0
    latency, retries, stale = [], [], 0
    took = []
    state = "agent"
    prev = log.next()  # the step the first switch follows
    for p in range(pairs):
        got = {}
        for way in ("alone", "agent") if p % 2 == 0 else ("agent", "alone"):
            if way != state:
                if way == "alone":
                    retries.append(stop(agent))
                else:
                    agent.send_signal(signal.SIGCONT)
                state = way
                latency.append(time.time() - prev[1])
            t0 = time.time()
            c0 = agent_cpu_ticks(agent.pid)
            unit = []
            while len(unit) < skip + block:
                s = log.next()
                if s[1] <= t0:
                    stale += 1  # ended before the switch (a late one): in no unit
                    continue
                unit.append(s)
            prev = unit[-1]
            if way == "agent":
                dt, dticks = time.time() - t0, agent_cpu_ticks(agent.pid) - c0
                cpu.append(dticks / dt)  # ticks of 10 ms per second = % of a core
                ticks, cpu_s = ticks + dticks, cpu_s + dt
            got[way] = unit[skip:]
            took += [s[2] for s in got[way]]
            units[way].append(st.median(s[2] for s in got[way]))
            cpus = [s[3] for s in got[way]]
            cpu_units[way].append(st.median(cpus) if None not in cpus else None)

        def what(way):
            u = got[way]
            n = f"step {u[0][0]}" if len(u) == 1 else f"steps {u[0][0]}..{u[-1][0]}"
            return f"{way} {units[way][-1]:.4f} s ({n})"

        print(f"pair {p + 1}: {what('alone')}, {what('agent')}", flush=True)
    print(f"{pairs} pairs of {skip}+{block}-step units ({len(took)} steps measured)")
    summary("step time", units, "alone")
    if None not in cpu_units["alone"] + cpu_units["agent"]:
        summary("step CPU time (the process's, all threads)", cpu_units, "alone")
    if cpu:
        print(f"agent CPU while watching: {min(cpu):.2f}-{max(cpu):.2f}% of a core (median {st.median(cpu):.2f}%; "
              f"all its units: {ticks / cpu_s:.2f}%)")
    print(f"stops: {len(retries)}, retried {sum(retries)} times (page-path links open at the SIGSTOP; "
          f"at most {max(retries, default=0)} in one stop)")
    med, lat = st.median(took), st.median(latency)
    print(f"switches: {len(latency)}, latency from the step's line to the switch done: median {lat * 1000:.1f} ms, "
          f"max {max(latency) * 1000:.1f} ms ({lat / med * 100:.2f}% and {max(latency) / med * 100:.2f}% of the "
          f"median step, {med:.4f} s); steps ended before a switch, in no unit: {stale}")


def main():
    a = sys.argv[1:]
    if len(a) < 7 or a[5] != "--":
        raise SystemExit(__doc__)
    log, pairs, block, skip, settle = a[0], int(a[1]), int(a[2]), int(a[3]), float(a[4])
    # A SIGTERM or SIGHUP (a timeout, the shell's exit) ends the agent too.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda n, _: sys.exit(128 + n))
    err_path = f"{log}.steps.err"
    agent = subprocess.Popen(a[6:], stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
    agent.err_path = err_path
    try:
        run(agent, Log(log, agent), pairs, block, skip, settle)
    finally:
        end(agent)


if __name__ == "__main__":
    main()
