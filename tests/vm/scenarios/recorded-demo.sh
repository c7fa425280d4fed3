# The recorded demo session (issue 26): what tierscope shows on a tiered machine, recorded in the
# CXL guest for `cargo xtask run` to replay on machines without a slow tier. One `record` while:
#   train    a Python trainer (job "train") whose optimizer state is allocated on the CXL node
#            (numactl --preferred): a CXL allocation site with Python frames
#   offload  32 MiB placed on node 1 (the lower tier by HMAT; touching the emulated CXL device is
#            too slow under TCG for NUMA balancing to call its pages hot), its policy reset, rewritten
#            in tiering mode (job "offload"): promotions
#   parked   16 MiB placed on node 1, its policy reset, left untouched (job "parked"): nothing
#            promotes it, so slow_tier_with_fast_room opens whatever NUMA balancing does to offload
#   pressure node 0 overfilled (200 MiB default + 320 MiB bound): demotions
# The guest writes the session to /out/demo.tscope; the host reports it and checks the report
# (xtask/src/vm/demo.rs) and, with --update-fixtures, ships the session.
. /tests/lib.sh
agent_present || { echo "TS-AGENT missing tierscope is not in the image"; finish; }
cxl_setup || exit 1
truth cxl.node $CXL_NODE
echo 1 > /sys/kernel/mm/numa/demotion_enabled
echo 2 > /proc/sys/kernel/numa_balancing
echo 100 > /sys/kernel/debug/sched/numa_balancing/scan_delay_ms
echo 100 > /sys/kernel/debug/sched/numa_balancing/scan_period_min_ms
cat > /tmp/ins.toml <<'CFG'
open_after_s = 2
close_after_s = 600
window_s = 5
slow_tier_min_bytes = 4194304
CFG
cat > /tmp/demo-run.sh <<SCRIPT
#!/bin/sh
. /tests/lib.sh
TORCHELASTIC_RUN_ID=train RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 numactl --preferred=$CXL_NODE python3.11 -S /tests/demo_train.py 8 20 > /tmp/train.out 2>&1 &
T=\$!
TORCHELASTIC_RUN_ID=offload RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 ts-alloc -a 1:32 -u -t 20 -s 5 -r /tmp/offload-ready > /dev/null &
O=\$!
TORCHELASTIC_RUN_ID=parked RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 ts-alloc -a 1:16 -u -s 40 -r /tmp/parked-ready > /dev/null &
K=\$!
sleep 8
pd0=\$(( \$(vmstat pgdemote_kswapd) + \$(vmstat pgdemote_direct) ))
ts-alloc -a -1:200 -a 0:320 -s 8 -r /tmp/pressure-ready > /dev/null &
P=\$!
wait \$P
echo "TS-TRUTH demoted \$(( \$(vmstat pgdemote_kswapd) + \$(vmstat pgdemote_direct) - pd0 ))"
wait \$T \$O \$K
exit 0
SCRIPT
chmod +x /tmp/demo-run.sh
p0=$(vmstat pgpromote_success)
tierscope record -o /out/demo.tscope --interval-ms 500 $EXACT --insights-config /tmp/ins.toml -- /tmp/demo-run.sh 2> /out/record.err
rc=$?
truth promoted $(($(vmstat pgpromote_success) - p0))
grep -q '^steps' /tmp/train.out
check "the Python trainer ran its steps ($(tr '\n' ' ' < /tmp/train.out))" $? -eq 0
# The host runs `tierscope report` on /out/demo.tscope (xtask/src/vm/demo.rs: here the agent's
# pages may sit on the emulated CXL device after the pressure phase, where a report crawls).
echo "TS-AGENT $rc $(grep -v -e '^tierscope: record' -e '^tierscope: wrote' /out/record.err | head -c 300 | tr '\n' ' ')"
ls -la /out/demo.tscope
finish
