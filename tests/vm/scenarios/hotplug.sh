# Memory onlined while the agent watches (issue 42): the CXL region is created after the snapshot
# started, and a workload binds 32 MiB to its new node as soon as it is online. At the node's
# default page path every page counts on the new node, none on an unknown one (before: by node
# {0: 71, 1023: 2560, 2: 5120}: the pages of blocks the agent had not read yet).
. /tests/lib.sh
EXACT=
for m in cxl_acpi cxl_pci cxl_mem dax_cxl device_dax kmem; do modprobe $m || { echo "TS-CHECK fail modprobe $m"; exit 1; }; done
# The region's node is the first after the firmware's two (the CXL window's proximity domain).
ts-alloc -w /tmp/go -a 2:32 -s 120 -r /tmp/ready &
W=$!
truth pid $W
agent_start 60 $W
echo "TS-INFO the page path at start: $(grep -o 'page path[^"]*' "$AGENT_ERR" | head -1)"
cxl_setup || exit 1
truth cxl.node $CXL_NODE
check "the region's memory is node 2" "$CXL_NODE" = 2
touch /tmp/go
wait_file /tmp/ready 60 || { echo "TS-CHECK fail workload did not touch 32 MiB of node 2 within 60 s"; exit 1; }
truth numa_maps.N2 "$(numa_pages $W 2)"
agent_stop
kill $W
finish
