# Demotion: with demotion enabled, the workload first touches 200 MiB on the default policy
# (it lands on node 0, which has free memory), then 320 MiB bound to node 0: node 0 (512 MiB)
# overfills and reclaim demotes its cold pages to node 1. (Without the binding the allocator
# simply falls back to node 1 and nothing is demoted.) The agent's demotion migrations must
# match the pgdemote_* delta of /proc/vmstat over the same window, and the workload's node 1
# residency must match numa_maps.
. /tests/lib.sh
echo 1 > /sys/kernel/mm/numa/demotion_enabled
pgdemote() { echo $(( $(vmstat pgdemote_kswapd) + $(vmstat pgdemote_direct) + $(vmstat pgdemote_khugepaged) )); }
ts-alloc -w /tmp/go -a -1:200 -a 0:320 -s 120 -r /tmp/ready &
W=$!
truth pid $W
agent_start 25 $W
before=$(pgdemote)
n1_before=$(numa_pages $W 1)
t0=$(date +%s)
touch /tmp/go
wait_file /tmp/ready 50 || { echo "TS-CHECK fail workload did not finish touching 520 MiB within 50 s"; exit 1; }
# Let reclaim settle: demotion stops once node 0 is back above its high watermark.
last=-1
while [ "$(pgdemote)" != "$last" ]; do last=$(pgdemote); sleep 1; done
after=$(pgdemote)
[ -n "$AGENT_PID" ] && check "the agent's window covers the demotion (still running when it settled)" -d /proc/$AGENT_PID
echo "TS-INFO touched and settled in $(($(date +%s) - t0)) s"
truth pgdemote $((after - before))
check "the kernel demoted pages (pgdemote delta $((after - before)) > 0)" $((after - before)) -gt 0
[ -n "$AGENT_PID" ] && agent_wait
truth numa_maps.N0 "$(numa_pages $W 0)"
truth numa_maps.N1 "$(numa_pages $W 1)"
check "the workload's node 1 residency grew" "$(numa_pages $W 1)" -gt "$n1_before"
kill $W
finish
