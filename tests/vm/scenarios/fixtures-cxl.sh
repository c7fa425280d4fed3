# Captures the CXL shape's sysfs (region onlined as a memory node) and the cxl tracepoint formats.
. /tests/lib.sh
cxl_setup || exit 1
echo "TS-INFO CXL region online as node $CXL_NODE"
. /tests/capture.sh
check "CXL memdev captured" -f $F/sysfs/bus/cxl/devices/mem0/serial
check "CXL region captured" -n "$(ls -d $F/sysfs/bus/cxl/devices/region* 2>/dev/null)"
check "cxl_poison format captured" -f $F/tracefs/cxl/cxl_poison/format
finish
