# Promotion: 64 MiB first touched on node 1, then its policy reset to default and rewritten for
# 20 s with NUMA balancing in tiering mode (2) and short scan periods: the kernel promotes it
# to node 0. The agent's numa_misplaced migrations must match the pgpromote_success delta, and
# the workload's node 0 residency must match numa_maps.
. /tests/lib.sh
echo 2 > /proc/sys/kernel/numa_balancing
echo 100 > /sys/kernel/debug/sched/numa_balancing/scan_delay_ms
echo 100 > /sys/kernel/debug/sched/numa_balancing/scan_period_min_ms
ts-alloc -w /tmp/go -a 1:64 -u -t 20 -s 120 -r /tmp/ready &
W=$!
truth pid $W
agent_start 32 $W
before=$(vmstat pgpromote_success)
touch /tmp/go
wait_file /tmp/ready 30 || { echo "TS-CHECK fail workload did not touch 64 MiB within 30 s"; exit 1; }
n0_start=$(numa_pages $W 0)
check "64 MiB first placed on node 1" "$(numa_pages $W 1)" -ge 16384
sleep 22 # the rewriting phase
after=$(vmstat pgpromote_success)
[ -n "$AGENT_PID" ] && check "the agent's window covers the promotion phase (still running)" -d /proc/$AGENT_PID
truth pgpromote_success $((after - before))
check "the kernel promoted pages (pgpromote_success delta $((after - before)) > 0)" $((after - before)) -gt 0
check "the workload's node 0 residency grew" "$(numa_pages $W 0)" -gt "$n0_start"
[ -n "$AGENT_PID" ] && agent_wait
truth numa_maps.N0 "$(numa_pages $W 0)"
truth numa_maps.N1 "$(numa_pages $W 1)"
kill $W
finish
