#!/usr/bin/env bash
# On the GPU machine: does tierscope count the faults CUDA takes when it pins host memory?
# `tierscope snapshot` watches while tests/device/pinned_faults.py pins 2 GiB and fills it (and a
# pageable 2 GiB); the script prints the process's own counters and the snapshot's, side by side.
# Look for: faults within 1% of the process's own minflt+majflt, and on_behalf >= the pinned pages.
# Usage: BIN=.device/tierscope bash tests/device/pinned_faults.sh   (results also under $OUT)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${BIN:-.device/tierscope}
MARK=tierscope_pinned_faults
"$BIN" check > "$OUT/check.txt" 2>&1; echo "check rc=$?" >> "$OUT/check.txt"
"$BIN" snapshot --json --duration "${WATCH:-45}" --match "$MARK" > "$OUT/snapshot.json" 2> "$OUT/snapshot.err" &
AGENT=$!
for _ in $(seq 300); do grep -q "watching for" "$OUT/snapshot.err" && break; sleep 0.1; done
python3 tests/device/pinned_faults.py "$MARK" | tee "$OUT/pinned.txt"
echo "python rc=${PIPESTATUS[0]}"
wait $AGENT
echo "snapshot rc=$?"
python3 - "$OUT/snapshot.json" "$OUT/pinned.txt" "$MARK" <<'PY' | tee "$OUT/compare.txt"
import json, re, sys
snap = json.load(open(sys.argv[1]))
own = dict(kv.split("=") for kv in re.search(r"^final (.*)$", open(sys.argv[2]).read(), re.M).group(1).split())
p = next(p for p in snap["processes"] if sys.argv[3] in p["cmdline"])
faults, by, major = p["faults"], p["faults_by_path"], p["major_faults"]
kernel = int(own["faults"])
print(f"process {p['pid']} exited={p['exited']}: tierscope faults {faults:,}, its own minflt+majflt {kernel:,} "
      f"({100 * (faults - kernel) / kernel:+.3f}%)")
print(f"by path: cpu_user {by['cpu_user']:,} cpu_kernel {by['cpu_kernel']:,} on_behalf {by['on_behalf']:,}; "
      f"major {major:,} (own majflt {int(own['majflt']):,})")
print(f"on_behalf {by['on_behalf']:,} vs pinned pages {int(own['pinned_pages']):,}: "
      f"{'covers' if by['on_behalf'] >= int(own['pinned_pages']) else 'SHORT'}")
print("agent:", {k: snap["agent"][k] for k in ("fault_reads", "fault_read_ms", "faults_traced_over_kernel")})
PY
