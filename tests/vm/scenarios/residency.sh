# Residency: the workload binds 48 MiB to node 1 and 32 MiB to node 0 and sleeps; the agent's
# per-node resident pages of it must match /proc/PID/numa_maps read at the end of its window.
. /tests/lib.sh
ts-alloc -a 1:48 -a 0:32 -s 120 -r /tmp/ready &
W=$!
wait_file /tmp/ready 60 || { echo "TS-CHECK fail workload never finished touching"; exit 1; }
truth pid $W
# The kernel honoured the binding (numa_maps counts base pages, THP included).
check "48 MiB on node 1 per numa_maps" "$(numa_pages $W 1)" -ge 12288
check "32 MiB on node 0 per numa_maps" "$(numa_pages $W 0)" -ge 8192
if agent_start 3 $W; then agent_wait; fi
truth numa_maps.N0 "$(numa_pages $W 0)"
truth numa_maps.N1 "$(numa_pages $W 1)"
kill $W
finish
