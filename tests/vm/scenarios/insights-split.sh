# CPU and memory on different nodes, on a two-socket guest (node 0: CPU 0, node 1: CPU 1, one
# memory tier). Both workloads hold 64 MiB bound to node 1:
#   S1 runs on CPU 0 (node 0)  -> cpu_memory_split, its evidence against /proc/PID/stat and numa_maps
#   S2 runs on CPU 1 (node 1)  -> nothing
. /tests/lib.sh
cat > /tmp/split.toml <<'CFG'
open_after_s = 2
split_min_bytes = 33554432
CFG
agent_present || { echo "TS-AGENT missing tierscope with a snapshot subcommand is not in the image"; finish; }
check "node 0 has CPU 0 and node 1 CPU 1" "$(cat /sys/devices/system/node/node0/cpulist) $(cat /sys/devices/system/node/node1/cpulist)" = "0 1"
numactl --physcpubind=0 ts-alloc -a 1:64 -s 600 -r /tmp/r1 > /dev/null & S1=$!
numactl --physcpubind=1 ts-alloc -a 1:64 -s 600 -r /tmp/r2 > /dev/null & S2=$!
wait_file /tmp/r1 30 && wait_file /tmp/r2 30 || { echo "TS-CHECK fail the workloads never finished placing their memory"; finish; }
truth pid.S1 $S1
truth pid.S2 $S2
AGENT_EXTRA="--match ts-alloc --insights-config /tmp/split.toml"
agent_start 6 $S1
agent_wait
for w in S1:$S1 S2:$S2; do
  p=${w#*:}; w=${w%%:*}
  truth $w.cpu "$(awk '{ print $39 }' /proc/$p/stat)"
  truth $w.numa_maps.N0 "$(numa_pages $p 0)"
  truth $w.numa_maps.N1 "$(numa_pages $p 1)"
done
kill $S1 $S2
finish
