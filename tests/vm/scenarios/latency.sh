# Fault latency: kprobes and BPF trampolines work in this kernel (unlike the host's). The agent's
# fentry/fexit on handle_mm_fault must count the workload's faults as a tracefs kprobe on the
# same function, filtered to the workload's pid, counts them. THP is off so 32 MiB is 8192 faults.
. /tests/lib.sh
T=/sys/kernel/tracing
echo never > /sys/kernel/mm/transparent_hugepage/enabled
echo 'p:ts_fault handle_mm_fault' >> $T/kprobe_events
check "tracefs kprobe on handle_mm_fault created" -d $T/events/kprobes/ts_fault
echo 16384 > $T/buffer_size_kb
ts-alloc -w /tmp/go -a 0:32 -s 120 -r /tmp/ready &
W=$!
truth pid $W
echo "common_pid == $W" > $T/events/kprobes/ts_fault/filter
echo > $T/trace
echo 1 > $T/events/kprobes/ts_fault/enable
agent_start 12 $W
touch /tmp/go
wait_file /tmp/ready 30 || { echo "TS-CHECK fail workload did not touch 32 MiB within 30 s"; exit 1; }
sleep 1
echo 0 > $T/events/kprobes/ts_fault/enable
n=$(grep -c 'ts_fault:' $T/trace)
truth handle_mm_fault $n
check "kprobe counted the workload's faults ($n >= 8192)" "$n" -ge 8192
check "no trace events lost" "$(awk '/overrun/ { s += $2 } END { print s + 0 }' $T/per_cpu/cpu*/stats)" -eq 0
[ -n "$AGENT_PID" ] && agent_wait
kill $W
finish
