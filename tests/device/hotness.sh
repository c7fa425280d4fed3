#!/usr/bin/env bash
# On the GPU machine: DAMON hotness over a real training loop (step time before/with/after,
# kdamond and agent CPU), then a recorded run of the same loop and its report.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${BIN:-./target/release/tierscope}
$BIN check --json > "$OUT/check.json" 2>&1
grep -o '"damon[^}]*}' "$OUT/check.json" | head -3
ls /sys/kernel/mm/damon/admin/kdamonds/; cat /sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds
: > "$OUT/hot-train.log"
torchrun --standalone --nproc-per-node 2 tests/device/offload_train.py --steps ${STEPS:-90} >> "$OUT/hot-train.log" 2>&1 &
TR=$!
sleep ${WARMUP:-30}
echo "agent on at $(date +%s.%N)" >> "$OUT/hot-train.log"
python3 - "$BIN" "$OUT" ${WATCH:-30} <<'PY'
import resource, subprocess, sys, time
bin, out, watch = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.time()
with open(f"{out}/hot-snapshot.json", "w") as so, open(f"{out}/hot-snapshot.err", "w") as se:
    rc = subprocess.call([bin, "snapshot", "--json", "--hotness", "--duration", watch, "--match", "torchrun|offload_train"], stdout=so, stderr=se)
wall = time.time() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
open(f"{out}/hot-agent-cost.txt", "w").write(f"rc {rc} wall {wall:.1f}s agent cpu {ru.ru_utime+ru.ru_stime:.2f}s = {100*(ru.ru_utime+ru.ru_stime)/wall:.2f}% of a core, peak rss {ru.ru_maxrss/1024:.1f} MiB\n")
PY
echo "snapshot rc=0 agent off at $(date +%s.%N)" >> "$OUT/hot-train.log"
cat /sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds > "$OUT/nr_kdamonds_after.txt"
wait $TR
cat "$OUT/hot-agent-cost.txt" "$OUT/nr_kdamonds_after.txt"
python3 - "$OUT/hot-train.log" "$OUT/hot-snapshot.json" <<'PY' | tee "$OUT/hot-summary.txt"
import json, re, statistics as st, sys
on = off = None; steps = []
for l in open(sys.argv[1]):
    if m := re.match(r"agent on at ([\d.]+)", l): on = float(m.group(1))
    if m := re.match(r"snapshot rc=\d+ agent off at ([\d.]+)", l): off = float(m.group(1))
    if m := re.match(r"step (\d+) rank \d at ([\d.]+) took ([\d.]+)", l):
        if int(m.group(1)) > 5: steps.append((float(m.group(2)), float(m.group(3))))
w = [t for a, t in steps if on + 3 < a < off]
b = [t for a, t in steps if a < on]
f = [t for a, t in steps if a > off + 1]
print(f"steps before {len(b)} median {st.median(b):.4f}s; with hotness {len(w)} median {st.median(w):.4f}s; after {len(f)} median {st.median(f):.4f}s; ratio {st.median(w) / st.median(b + f):.4f}")
doc = json.load(open(sys.argv[2]))
h = doc.get("hotness")
print(json.dumps(h, indent=1)[:3000])
PY
# A recorded run and its report.
$BIN record -o /tmp/train.tsrec --interval-ms 1000 -- torchrun --standalone --nproc-per-node 2 tests/device/offload_train.py --steps 25 > "$OUT/record.log" 2>&1
echo "record rc=$?" >> "$OUT/record.log"; tail -3 "$OUT/record.log"
ls -la /tmp/train.tsrec
$BIN report /tmp/train.tsrec -o "$OUT/report.html" 2> "$OUT/report.err"; echo "report rc=$?"
$BIN report /tmp/train.tsrec --format md -o "$OUT/report.md" 2>> "$OUT/report.err"; echo "report md rc=$?"
head -60 "$OUT/report.md"
