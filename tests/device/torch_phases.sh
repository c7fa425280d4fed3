#!/usr/bin/env bash
# On the GPU machine: the step phases tierscope names from a plain PyTorch loop's own stacks
# (issue 31). `tierscope record` runs one rank of tests/device/torch_train.py (DataLoader,
# nn.Module forward, loss.backward(), AdamW) at the sampler's defaults; `report` finds its steps
# without a marker; the report's CPU by phase is printed beside the loop's own phase times (wall
# clock, a synchronize after each phase). A phase's sampled CPU is at most its wall time; a
# phase the main thread spends waiting (backward on a GPU: the autograd engine's threads work)
# shows as little CPU there.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BIN=${BIN:-./target/release/tierscope}
HERE=$(cd "$(dirname "$0")" && pwd)
STEPS=${STEPS:-60}
"$BIN" record -o "$OUT/phases.tscope" -- \
    torchrun --standalone --nproc-per-node 1 "$HERE/torch_train.py" --steps "$STEPS" ${TRAIN_ARGS:-} > "$OUT/phases-train.log" 2> "$OUT/phases-record.err"
echo "record rc=$? $(tail -c 300 "$OUT/phases-record.err" | tr '\n' ' ')"
"$BIN" report "$OUT/phases.tscope" --format json > "$OUT/phases.json" 2> "$OUT/phases-report.err" || cat "$OUT/phases-report.err"
python3 - "$OUT" "$STEPS" <<'PY'
import json, re, statistics as st, sys
out, ran = sys.argv[1], int(sys.argv[2])
pat = re.compile(r"step \d+ rank 0 at [\d.]+ took ([\d.]+) phases data ([\d.]+) forward ([\d.]+) backward ([\d.]+) optimizer ([\d.]+)")
own = [tuple(map(float, m.groups())) for l in open(f"{out}/phases-train.log") if (m := pat.search(l))]
if not own:
    print(open(f"{out}/phases-train.log").read()[-2000:]); sys.exit(1)
names = ["data_loading", "forward", "backward", "optimizer"]
tot = {n: sum(o[i + 1] for o in own) for i, n in enumerate(names)}
print(f"the loop: {len(own)} steps, median {st.median(o[0] for o in own):.4f} s; own phase wall time over all steps: "
      + ", ".join(f"{n} {v:.2f} s" for n, v in tot.items()))
rep = json.load(open(f"{out}/phases.json"))
for r in rep.get("steps", []):
    if not r.get("count"):
        print(f"pid {r.get('pid')} {r.get('comm')}: no steps: {r.get('reason')}")
        continue
    print(f"pid {r['pid']} {r['comm']}: {r['count']} steps (ran {ran}) by {r['found_by']} {r.get('frame')}, regular {r.get('regular_share'):.2f}, "
          f"typical {r.get('typical_s'):.4f} s, median {r['median_s']:.4f} s")
    ph, off = {}, 0.0
    for s in r["steps"]:
        off += s.get("off_cpu_s", 0)
        for k, v in s.get("cpu_s_by_phase", {}).items():
            ph[k] = ph.get(k, 0) + v
    print("   sampled main-thread CPU by phase over the found steps: " + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(ph.items(), key=lambda x: -x[1])) + f"; off CPU {off:.2f} s")
    for s in r.get("slowest", [])[:3]:
        print("   slowest:", json.dumps(s)[:300])
prof = rep.get("cpu", rep.get("cpu_profiles"))
print("report keys:", list(rep.keys()))
PY
# The main thread's top Python lines, to see which frames the phases came from.
"$BIN" report "$OUT/phases.tscope" --format md 2>/dev/null | grep -A 25 -i "top python" | head -40
