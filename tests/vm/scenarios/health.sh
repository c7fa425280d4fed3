# Health: while the agent runs, the host injects CXL events and poison through QMP. The
# kernel's own trace buffer (cxl:* tracepoints) is the ground truth; the agent's snapshot must
# show each injected event with the injected values decoded (the host judges them). Poison is
# only reported when the device's poison list is read (trigger_poison_list): the agent must do
# that itself, so the script reads the list only after the agent has finished.
. /tests/lib.sh
cxl_setup || exit 1
T=/sys/kernel/tracing
echo 1 > $T/events/cxl/enable
echo > $T/trace
agent_start 25 $$
DEV='"path":"/machine/peripheral/cxl-mem0"'
inject() { # inject <what> <json>
  qmp "$2"
  check "QMP $1 accepted (reply $QMP_REPLY)" "$QMP_REPLY" = "{}"
}
inject general-media '{"execute":"cxl-inject-general-media-event","arguments":{'"$DEV"',"log":"informational","flags":1,"dpa":4096,"descriptor":3,"type":0,"transaction-type":1}}'
inject memory-module '{"execute":"cxl-inject-memory-module-event","arguments":{'"$DEV"',"log":"warning","flags":1,"type":0,"health-status":3,"media-status":7,"additional-status":33,"life-used":30,"temperature":45,"dirty-shutdown-count":1,"corrected-volatile-error-count":5,"corrected-persistent-error-count":0}}'
inject dram '{"execute":"cxl-inject-dram-event","arguments":{'"$DEV"',"log":"informational","flags":1,"dpa":8192,"descriptor":1,"type":1,"transaction-type":2}}'
inject poison '{"execute":"cxl-inject-poison","arguments":{'"$DEV"',"start":8192,"length":64}}'
sleep 5 # interrupt-driven events arrive; the agent reads the poison list on its own meanwhile
[ -n "$AGENT_PID" ] && agent_wait
echo 1 > /sys/bus/cxl/devices/mem0/trigger_poison_list
sleep 2
for e in cxl_general_media cxl_memory_module cxl_dram cxl_poison; do
  n=$(grep -c " $e:" $T/trace)
  truth trace.$e $n
  check "kernel traced $e ($n)" "$n" -ge 1
done
check "poison listed by cxl list --media-errors" -n "$(cxl list -m mem0 --media-errors 2>/dev/null | grep -i offset)"
finish
