# Unhealthy device under a job: the emulated CXL Type 3 device's memory is onlined as a node;
# job J1 holds 8 MiB there, job J0 8 MiB on node 0 (DRAM). Two agent runs:
#   healthy: the device is healthy                              -> nothing opens
#   poisoned: the host injected poison (QMP) before the run; the agent reads the device's poison
#             list itself                                       -> unhealthy_device_under_job for
#             J1's job only, its evidence against numa_maps and the kernel's cxl_poison trace
. /tests/lib.sh
cat > /tmp/cxl.toml <<'CFG'
open_after_s = 2
CFG
agent_present || { echo "TS-AGENT missing tierscope with a snapshot subcommand is not in the image"; finish; }
cxl_setup || exit 1
truth cxl.node $CXL_NODE
T=/sys/kernel/tracing
echo 1 > $T/events/cxl/enable
echo > $T/trace
ts-alloc -a $CXL_NODE:8 -s 600 -r /tmp/r1 > /dev/null & J1=$!
ts-alloc -a 0:8 -s 600 -r /tmp/r0 > /dev/null & J0=$!
wait_file /tmp/r1 60 && wait_file /tmp/r0 20 || { echo "TS-CHECK fail the workloads never finished placing their memory"; finish; }
truth pid.J1 $J1
truth pid.J0 $J0
check "J1: 8 MiB on node $CXL_NODE per numa_maps" "$(numa_pages $J1 $CXL_NODE)" -ge 2048
AGENT_EXTRA="--match ts-alloc --insights-config /tmp/cxl.toml"

AGENT_OUT=agent-healthy agent_start 5 $J0
agent_wait

qmp '{"execute":"cxl-inject-poison","arguments":{"path":"/machine/peripheral/cxl-mem0","start":8192,"length":64}}'
check "QMP cxl-inject-poison accepted (reply $QMP_REPLY)" "$QMP_REPLY" = "{}"
AGENT_OUT=agent agent_start 7 $J0
agent_wait
# The kernel's side: the poison records the agent's list reads made it trace, the last one's
# length, and J1's pages on the device's node.
n=$(grep -c ' cxl_poison:' $T/trace)
truth trace.cxl_poison "$n"
check "kernel traced cxl_poison after the agent read the list ($n)" "$n" -ge 1
len=$(grep ' cxl_poison:' $T/trace | tail -1 | sed -n 's/.* dpa_length=\(0x[0-9a-f]*\).*/\1/p')
truth poison.dpa_length $((len))
truth poison.ranges "$(grep ' cxl_poison:' $T/trace | sed -n 's/.* dpa=\(0x[0-9a-f]*\) .*/\1/p' | sort -u | wc -l)"
truth J1.numa_maps.Ncxl "$(numa_pages $J1 $CXL_NODE)"
truth J0.numa_maps.Ncxl "$(numa_pages $J0 $CXL_NODE)"
kill $J0 $J1
finish
