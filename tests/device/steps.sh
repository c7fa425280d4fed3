#!/usr/bin/env bash
# On the GPU machine: training steps found from outside (issue 31). `tierscope record` runs one
# rank of the offload loop (tests/device/offload_train.py, STEPS steps, node 0 declared cxl) at
# the sampler's defaults; `report` finds the rank's steps from its rhythm and with a marker; each
# is compared with the loop's own `step N rank 0 at T took S` lines: how many, and the median.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${BIN:-./target/release/tierscope}
HERE=$(cd "$(dirname "$0")" && pwd)
STEPS=${STEPS:-60}
"$BIN" record --cxl-node 0 --interval-ms ${INTERVAL_MS:-100} -o "$OUT/steps.tscope" -- \
    torchrun --standalone --nproc-per-node 1 "$HERE/offload_train.py" --steps "$STEPS" > "$OUT/steps-train.log" 2> "$OUT/record.err"
echo "record rc=$? $(tail -c 300 "$OUT/record.err" | tr '\n' ' ')"
"$BIN" report "$OUT/steps.tscope" --format json > "$OUT/steps-rhythm.json" 2> "$OUT/report.err"
"$BIN" report "$OUT/steps.tscope" --format json --step-marker "${MARKER:-offload_train.py:main}" > "$OUT/steps-marker.json" 2>> "$OUT/report.err"
python3 - "$OUT" "$STEPS" <<'PY'
import json, re, statistics as st, sys
out, ran = sys.argv[1], int(sys.argv[2])
own = [float(m.group(1)) for l in open(f"{out}/steps-train.log") if (m := re.search(r"step \d+ rank 0 at [\d.]+ took ([\d.]+)", l))]
print(f"the loop: {len(own)} steps, median {st.median(own):.4f} s (all), {st.median(own[5:]):.4f} s (after the first 5)")
for how in ("rhythm", "marker"):
    rep = json.load(open(f"{out}/steps-{how}.json"))
    for r in rep.get("steps", []):
        if not r.get("count"):
            print(f"{how}: pid {r.get('pid')} {r.get('comm')}: no steps: {r.get('reason')}")
            continue
        m, typ = r["median_s"], r.get("typical_s", 0)
        print(f"{how}: pid {r['pid']} {r['comm']} rank {r.get('rank')}: {r['count']} steps (ran {ran}) by {r['found_by']} {r.get('frame')} regular {r.get('regular_share')}; "
              f"median {m:.4f} s vs the loop's {st.median(own):.4f} s ({(m / st.median(own) - 1) * 100:+.2f}%, on the sample grid), "
              f"typical {typ:.4f} s vs the loop's median ({(typ / st.median(own) - 1) * 100:+.2f}%), p90 {r.get('p90_s')}")
        ph = {}
        for s in r["steps"]:
            for k, v in s.get("cpu_s_by_phase", {}).items():
                ph[k] = ph.get(k, 0) + v
        print(f"   CPU by phase over the steps: " + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(ph.items(), key=lambda x: -x[1])))
        est = [sum(s["pages_by_node_estimate"].values()) for s in r["steps"] if s.get("pages_by_node_estimate")]
        proc = next((p for p in rep.get("processes", []) if p["pid"] == r["pid"]), {})
        total = sum(proc.get("alloc_pages_by_node", {}).values())
        print(f"   pages: {r.get('pages')}; {len(est)} steps with an estimate, {sum(est):.0f} pages over them "
              f"({sum(est) / max(len(est), 1):.0f} a step), the rank's whole recording {total} pages")
        print(f"   the live agent's step records: {r.get('live_count')}")
        for s in r.get("slowest", [])[:3]:
            print("   slowest:", json.dumps(s)[:300])
PY
