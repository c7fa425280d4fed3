# Insights: an idle guest opens none; then, in one agent window, workloads that must open an
# insight beside ones that must not, each insight's evidence printed from the kernel's own
# accounting (numa_maps, node meminfo, /proc/PID/stat and status, vmstat) for the host to compare.
#   W0 healthy: 32 MiB on node 0 (DRAM), sleeping                          -> nothing
#   W1 48 MiB on node 1 (slow), its mbind reset to default                  -> slow_tier_with_fast_room
#   W2 48 MiB on node 1 under its own mbind                                 -> nothing
#   W3 16 MiB mlocked on node 1 (faulted in on its behalf), after the agent attached -> pinned_on_slow_tier
#   W4 16 MiB mlocked on node 0, likewise                                   -> nothing
#   W5 maps, touches and unmaps 4 MiB in a loop                             -> allocation_churn
#   R0/R1 ranks of job "imb": 32 MiB on node 0 / 32 MiB on node 1           -> rank_imbalance (rank 1)
#   E0/E1 ranks of job "even": 32 MiB on node 0 each                        -> nothing
. /tests/lib.sh
cat > /tmp/ins.toml <<'CFG'
open_after_s = 2
close_after_s = 60
window_s = 5
slow_tier_min_bytes = 16777216
pinned_min_bytes = 8388608
churn_min_pages_per_s = 1000
churn_max_growth_pct = 25
rank_min_slow_bytes = 16777216
promote_min_candidates_per_s = 50
CFG
agent_present || { echo "TS-AGENT missing tierscope with a snapshot subcommand is not in the image"; finish; }
# The idle guest: nothing runs but init.
tierscope snapshot --json --duration 4 $EXACT --insights-config /tmp/ins.toml > /out/agent-node.json 2> /out/agent-idle.err
echo "TS-INFO idle snapshot status $?"

echo 2 > /proc/sys/kernel/numa_balancing
echo 1 > /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps
echo 100 > /sys/kernel/debug/sched/numa_balancing/scan_delay_ms
echo 100 > /sys/kernel/debug/sched/numa_balancing/scan_period_min_ms
ts-alloc -a 0:32 -s 600 -r /tmp/r0 > /dev/null & W0=$!
ts-alloc -a 1:48 -u -s 600 -r /tmp/r1 > /dev/null & W1=$!
ts-alloc -a 1:48 -s 600 -r /tmp/r2 > /dev/null & W2=$!
ts-alloc -c 300 -s 600 -r /tmp/r5 > /dev/null & W5=$!
RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 TORCHELASTIC_RUN_ID=imb ts-alloc -a 0:32 -s 600 -r /tmp/r6 > /dev/null & R0=$!
RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 TORCHELASTIC_RUN_ID=imb ts-alloc -a 1:32 -s 600 -r /tmp/r7 > /dev/null & R1=$!
RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 TORCHELASTIC_RUN_ID=even ts-alloc -a 0:32 -s 600 -r /tmp/r8 > /dev/null & E0=$!
RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 TORCHELASTIC_RUN_ID=even ts-alloc -a 0:32 -s 600 -r /tmp/r9 > /dev/null & E1=$!
for f in /tmp/r0 /tmp/r1 /tmp/r2 /tmp/r6 /tmp/r7 /tmp/r8 /tmp/r9; do
  wait_file $f 60 || { echo "TS-CHECK fail a workload never finished placing its memory ($f)"; finish; }
done
for k in W0:$W0 W1:$W1 W2:$W2 W5:$W5 R0:$R0 R1:$R1 E0:$E0 E1:$E1; do truth "pid.${k%%:*}" "${k#*:}"; done
check "W1: 48 MiB on node 1 per numa_maps" "$(numa_pages $W1 1)" -ge 12288
check "W1's mapping has the default policy again" "$(grep -c 'bind:1' /proc/$W1/numa_maps)" -eq 0
check "W2's mapping is under its own bind:1" "$(grep -c 'bind:1' /proc/$W2/numa_maps)" -ge 1

AGENT_EXTRA="--match ts-alloc --insights-config /tmp/ins.toml"
agent_start 90 $W0
# Locked after the agent attached: the faults taken on their behalf fall in its window.
ts-alloc -a 1:16 -l -s 600 -r /tmp/r3 > /dev/null & W3=$!
ts-alloc -a 0:16 -l -s 600 -r /tmp/r4 > /dev/null & W4=$!
wait_file /tmp/r3 30 && wait_file /tmp/r4 30 || echo "TS-CHECK fail the locking workloads never finished"
truth pid.W3 $W3
truth pid.W4 $W4
check "W3: 16 MiB locked (VmLck)" "$(awk '/^VmLck/ { print $2 }' /proc/$W3/status)" -ge 16384
sleep 2
# Steady state: what the kernel says now, while the agent's last readings are taken.
truth W1.numa_maps.N1 "$(numa_pages $W1 1)"
truth node0.MemFree_kB "$(awk '/MemFree/ { print $4 }' /sys/devices/system/node/node0/meminfo)"
truth W3.VmLck_VmPin_kB "$(awk '/^VmLck|^VmPin/ { s += $2 } END { print s }' /proc/$W3/status)"
truth W3.VmLck_kB "$(awk '/^VmLck/ { print $2 }' /proc/$W3/status)"
truth W3.numa_maps.N1 "$(numa_pages $W3 1)"
truth R1.numa_maps.N0 "$(numa_pages $R1 0)"
truth R1.numa_maps.N1 "$(numa_pages $R1 1)"
# Churn: the kernel's fault count of W5 over the agent's last window (window_s 5), which the
# agent's stop right after ends (under TCG the rate varies with the host's load: the same 5 s).
f0=$(awk '{ print $10 + $12 }' /proc/$W5/stat); u0=$(uptime_s)
rss0=$(awk '/^VmRSS/ { print $2 }' /proc/$W5/status)
sleep 5
f1=$(awk '{ print $10 + $12 }' /proc/$W5/stat); u1=$(uptime_s)
rss1=$(awk '/^VmRSS/ { print $2 }' /proc/$W5/status)
agent_stop
truth churn.faults_per_s "$(awk -v a="$f0" -v b="$f1" -v s="$u0" -v e="$u1" 'BEGIN { printf "%d", (b - a) / (e - s) }')"
truth churn.rss_change_kb $((rss1 - rss0))
kill $W0 $W1 $W2 $W3 $W4 $W5 $R0 $R1 $E0 $E1 2>/dev/null
finish
