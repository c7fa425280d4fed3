# Hotness (issue 18): the workload keeps touching 16 MiB on the CXL node and leaves 64 MiB on
# node 0 untouched. The agent's DAMON monitor must show at least 12 MiB hot on tier cxl and at
# least 48 MiB cold on dram for the process within a minute; then per node only (per-process
# monitoring forced off, as where CONFIG_DAMON_VADDR is absent); and nothing of DAMON may be
# left after the agent exits, after SIGTERM, or after SIGKILL and a restart.
. /tests/lib.sh
DAMON=/sys/kernel/mm/damon/admin/kdamonds
# kdamond threads running (the kernel's own truth; DAMON's sysfs files can answer EBUSY while a
# command such as update_schemes_tried_regions holds its lock).
threads() { ps | grep -c '[k]damond'; }
running() { threads; }
# Waits up to 60 s until $1 kdamonds run (the agent's worker thread starts them).
wait_running() { i=0; while [ "$(running)" -lt "$1" ]; do i=$((i + 1)); [ $i -gt 600 ] && return 1; sleep 0.1; done; }

check "DAMON sysfs present" -d "$DAMON"
check "no kdamond before the agent" "$(cat $DAMON/nr_kdamonds)" -eq 0
cxl_setup || exit 1
truth cxl.node "$CXL_NODE"
ts-alloc -a 0:64 -a "$CXL_NODE":16 -o 1 -f -t 900 -r /tmp/ready &
W=$!
wait_file /tmp/ready 90 || { echo "TS-CHECK fail workload did not touch its 80 MiB within 90 s"; exit 1; }
truth pid $W
check "64 MiB on node 0 per numa_maps" "$(numa_pages $W 0)" -ge 16384
check "16 MiB on node $CXL_NODE per numa_maps" "$(numa_pages $W "$CXL_NODE")" -ge 4096

# Guest-sized intervals (TCG is slow): 20 ms samples, 0.4 s aggregation, cold after 5 s idle.
cat > /tmp/hotness.toml <<'TOML'
[hotness]
sample_ms = 20
aggr_ms = 400
update_ms = 2000
refresh_ms = 2000
max_regions = 200
cold_min_idle_s = 5
kdamond_cpu_max_pct = 25
TOML
{ cat /tmp/hotness.toml; echo "per_process = false"; } > /tmp/hotness-node.toml

AGENT_EXTRA="--hotness --hotness-config /tmp/hotness.toml" agent_start 20 $W
# From the agent watching (its eBPF programs take ~20 s to load under TCG) to its snapshot.
t0=$(date +%s)
wait_running 2 || echo "TS-INFO the agent's 2 kdamonds were not both running within 60 s"
truth kdamonds.running_during "$(running)"
agent_wait
truth hotness.seconds $(($(date +%s) - t0))
truth kdamonds.after_exit "$(cat $DAMON/nr_kdamonds)"
truth kdamond_threads.after_exit "$(threads)"

# Per node only.
tierscope snapshot --json --duration 20 $EXACT --pid $W --hotness --hotness-config /tmp/hotness-node.toml > /out/agent-node.json 2> /out/agent-node.err
echo "TS-INFO per-node run: $(head -c 300 /out/agent-node.err | tr '\n' ' ')"
truth kdamonds.after_node_run "$(cat $DAMON/nr_kdamonds)"

# SIGKILL leaves the kdamonds running; the next start stops them and puts nr_kdamonds back.
tierscope snapshot --json --duration 300 $EXACT --pid $W --hotness --hotness-config /tmp/hotness.toml > /dev/null 2> /tmp/killed.err &
K=$!
wait_running 2 || echo "TS-INFO the agent to be killed never had 2 kdamonds running: $(head -c 300 /tmp/killed.err)"
kill -9 $K
wait $K
truth kdamonds.running_after_kill "$(running)"
tierscope snapshot --json --duration 1 $EXACT --hotness --hotness-config /tmp/hotness.toml > /dev/null 2> /tmp/restart.err
echo "TS-INFO restart: $(head -c 300 /tmp/restart.err | tr '\n' ' ')"
truth kdamonds.after_restart "$(cat $DAMON/nr_kdamonds)"
truth kdamonds.running_after_restart "$(running)"
truth kdamond_threads.after_restart "$(threads)"

# SIGTERM: the agent stops what it started before it exits.
tierscope snapshot --json --duration 300 $EXACT --pid $W --hotness --hotness-config /tmp/hotness.toml > /dev/null 2> /tmp/term.err &
K=$!
wait_running 2 || echo "TS-INFO the agent to be stopped never had 2 kdamonds running"
kill -TERM $K
wait $K
truth kdamonds.after_term "$(cat $DAMON/nr_kdamonds)"
truth kdamond_threads.after_term "$(threads)"
kill $W
finish
