#!/usr/bin/env bash
# On the GPU machine (kernel with DAMON_PADDR and DAMON_SYSFS, no DAMON_VADDR): what `--hotness`
# reports there and what it costs. Needs target/release/tierscope and tierscope-fault-storm.
# Writes $OUT/check.json, $OUT/hotness.json, $OUT/bench.txt and the DAMON sysfs counts before and
# after. Expect: check's damon.why_not null (or naming the kdamond that is there), hotness.state
# "on" with per_process false and node.by_tier filled, nr_kdamonds the same before and after, and
# the bench's two "hotness:" lines (storm slowdown with --hotness, kdamond CPU).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
K=/sys/kernel/mm/damon/admin/kdamonds
echo "before: nr_kdamonds $(cat $K/nr_kdamonds 2>/dev/null || echo absent)" > "$OUT/damon-counts.txt"
target/release/tierscope check --json > "$OUT/check.json" 2>&1
target/release/tierscope snapshot --json --duration 20 --hotness > "$OUT/hotness.json" 2> "$OUT/hotness.err"
echo "after: nr_kdamonds $(cat $K/nr_kdamonds 2>/dev/null || echo absent); kdamond threads $(ps -e | grep -c '[k]damond')" >> "$OUT/damon-counts.txt"
cargo xtask bench --no-build --pairs ${PAIRS:-3} > "$OUT/bench.txt" 2>&1 || true
cat "$OUT/damon-counts.txt"; grep "hotness" "$OUT/bench.txt"
