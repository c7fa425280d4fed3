# A stand-in trainer for the recorded demo session (tests/vm/scenarios/recorded-demo.sh): its optimizer
# state is allocated in init_optimizer_state (on the CXL node the scenario prefers for it) and
# rewritten by each step. Runs under `python3.11 -S` with no library beyond the interpreter's own.
import sys
import time

PAGE = 4096


def init_optimizer_state(mib):
    state = []
    for _ in range(mib):
        chunk = bytearray(1 << 20)
        for i in range(0, len(chunk), PAGE):
            chunk[i] = 1
        state.append(chunk)
    return state


def step(state, n):
    for chunk in state:
        for i in range(0, len(chunk), PAGE * 8):
            chunk[i] = n & 0xFF


def main():
    mib, seconds = int(sys.argv[1]), float(sys.argv[2])
    state = init_optimizer_state(mib)
    print("ready", flush=True)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        step(state, n)
        n += 1
        time.sleep(0.2)
    print("steps", n, flush=True)


main()
