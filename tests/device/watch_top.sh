#!/usr/bin/env bash
# On the GPU machine: capture `tierscope top` screens while a real torchrun job runs. Needs the
# release binary at target/release/tierscope and a tmux (carried in .devtools/ when the machine has
# none). Screens go to $OUT/top-*.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if TMUX_BIN=$(command -v tmux); then
  t() { "$TMUX_BIN" -L tsdev "$@"; }
else
  # The carried tmux needs its carried libraries; the machine's own tmux must not see them.
  t() { LD_LIBRARY_PATH=$PWD/.devtools/lib .devtools/tmux -L tsdev "$@"; }
fi
torchrun --standalone --nproc-per-node 2 tests/device/offload_train.py --steps ${STEPS:-120} > "$OUT/train.log" 2>&1 &
TR=$!
sleep ${WARMUP:-30}
t new-session -d -s top -x ${COLS:-160} -y ${ROWS:-48} "$PWD/target/release/tierscope top --match torchrun"
sleep 12
t capture-pane -p -t top > "$OUT/top-overview.txt"
t send-keys -t top 2; sleep 3; t capture-pane -p -t top > "$OUT/top-processes.txt"
t send-keys -t top Enter; sleep 4; t capture-pane -p -t top > "$OUT/top-detail.txt"
t send-keys -t top 4; sleep 3; t capture-pane -p -t top > "$OUT/top-migrations.txt"
t send-keys -t top q; sleep 1
t kill-server 2>/dev/null
kill $TR 2>/dev/null; wait $TR 2>/dev/null
ls -la "$OUT"
