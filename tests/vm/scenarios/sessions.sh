# Sessions: the same workload recorded twice: 32 MiB bound to node 0 (mbind), then, in the first
# recording only, `migratepages` moves it to node 1. The guest writes the moved run's report
# (`report --format json`) to /out/agent.json and `diff --format json stayed moved` to
# /out/agent-node.json; the host checks that the residency moves between the nodes, the
# migrations and the placement call are in the report, and the diff shows the difference.
. /tests/lib.sh
agent_present || { echo "TS-AGENT missing tierscope is not in the image"; exit 1; }
cat > /tmp/run.sh <<'SCRIPT'
#!/bin/sh
# $1: move (migratepages 0 -> 1 halfway) or stay. Prints the kernel's figures as TS-TRUTH.
. /tests/lib.sh
rm -f /tmp/ready
ts-alloc -a 0:32 -s 60 -r /tmp/ready > /dev/null &
W=$!
wait_file /tmp/ready 60 || { echo "TS-CHECK fail $1: the workload never finished touching"; exit 1; }
sleep 1.5
truth "$1.N0.before" "$(numa_pages $W 0)"
m0=$(vmstat pgmigrate_success)
[ "$1" = move ] && migratepages $W 0 1
# Held long enough for the recorder to re-read numa_maps after the move: a process whose pages
# moved is re-read at its CPU-budget interval (model/scan_plan.rs), a few seconds in a slow guest.
sleep 4
truth "$1.N0.after" "$(numa_pages $W 0)"
truth "$1.N1.after" "$(numa_pages $W 1)"
truth "$1.migrated" $(($(vmstat pgmigrate_success) - m0))
kill $W
wait $W
exit 0
SCRIPT
chmod +x /tmp/run.sh
rc=0
for run in move stay; do
  tierscope record -o /out/$run.tscope --interval-ms 250 $EXACT -- /tmp/run.sh $run 2> /out/record-$run.err || rc=$?
done
tierscope report /out/move.tscope --format json -o /out/agent.json 2> /out/agent.err || rc=$?
tierscope diff /out/stay.tscope /out/move.tscope --format json -o /out/agent-node.json 2>> /out/agent.err || rc=$?
echo "TS-AGENT $rc $(cat /out/record-move.err /out/record-stay.err /out/agent.err | grep -v -e '^tierscope: recording' -e '^tierscope: recorded' -e '^tierscope: wrote' | head -c 300 | tr '\n' ' ')"
finish
