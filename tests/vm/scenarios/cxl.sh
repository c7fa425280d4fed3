# CXL: the emulated Type 3 device's volatile capacity becomes a region onlined as a memory node
# in its own tier; the workload binds 32 MiB to it (touching CXL memory is slow under TCG: ~10 s). The
# agent must classify the node `cxl` from the region, and count the allocations there with sites.
. /tests/lib.sh
cxl_setup || exit 1
truth cxl.node $CXL_NODE
tier_of() { for t in /sys/devices/virtual/memory_tiering/memory_tier*; do grep -qw "$1" $t/nodelist 2>/dev/null && echo ${t##*memory_tier}; done; }
check "node $CXL_NODE is in a lower tier than node 0 ($(tier_of $CXL_NODE) > $(tier_of 0))" "$(tier_of $CXL_NODE)" -gt "$(tier_of 0)"
check "dax device targets node $CXL_NODE" "$(cat /sys/bus/dax/devices/dax*/target_node | head -1)" = "$CXL_NODE"
check "node $CXL_NODE has no CPUs" -z "$(cat /sys/devices/system/node/node$CXL_NODE/cpulist)"
ts-alloc -w /tmp/go -a $CXL_NODE:32 -s 120 -r /tmp/ready &
W=$!
truth pid $W
agent_start 25 $W
t0=$(date +%s)
touch /tmp/go
wait_file /tmp/ready 60 || { echo "TS-CHECK fail workload did not touch 32 MiB of CXL memory within 60 s"; exit 1; }
echo "TS-INFO 32 MiB touched on node $CXL_NODE in $(($(date +%s) - t0)) s"
check "32 MiB on node $CXL_NODE per numa_maps" "$(numa_pages $W $CXL_NODE)" -ge 8192
[ -n "$AGENT_PID" ] && agent_wait
truth numa_maps.N$CXL_NODE "$(numa_pages $W $CXL_NODE)"
kill $W
# Without --page-path, a node with a CXL tier gets the sampled page path, and the snapshot says why.
tierscope snapshot --json --duration 1 > /out/default-page-path.json 2> /tmp/default.err
check "the page path is sampled by default on a node with a CXL tier" -n "$(grep -E '"mode": *"sampled"' /out/default-page-path.json)"
check "the snapshot says it chose sampled for the CXL node" -n "$(grep -oE 'CXL tier \(node [0-9, ]+\)' /out/default-page-path.json | grep -w "$CXL_NODE")"
finish
