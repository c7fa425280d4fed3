# Insights about tiering that fights itself, three agent runs on the same two-tier guest with
# demotion enabled and NUMA balancing in tiering mode (2):
#   p1 healthy: 32 MiB hot on node 1, default promotion rate limit: all promoted -> nothing
#   p2 rate-limited: 64 MiB hot on node 1, limit 1 MB/s: most candidates refused
#                                     -> promotion_rate_limited on node 0 (and no ping-pong: fits)
#   p3 ping-pong: 520 MiB hot (node 0 has 512): kswapd demotes what NUMA balancing promotes
#                                     -> tiering_ping_pong on node 0
# Each run's window is its whole duration (window_s 120), and the workload starts after the
# agent's first reading and is killed (its tiering settled) before the agent's last, so the
# evidence rates times the window are the kernel's /proc/vmstat deltas over the phase.
. /tests/lib.sh
cat > /tmp/tier.toml <<'CFG'
open_after_s = 2
close_after_s = 120
window_s = 120
ping_pong_min_pages_per_s = 20
promote_min_candidates_per_s = 20
CFG
agent_present || { echo "TS-AGENT missing tierscope with a snapshot subcommand is not in the image"; finish; }
echo 1 > /sys/kernel/mm/numa/demotion_enabled
echo 2 > /proc/sys/kernel/numa_balancing
echo 100 > /sys/kernel/debug/sched/numa_balancing/scan_delay_ms
echo 100 > /sys/kernel/debug/sched/numa_balancing/scan_period_min_ms
demoted() { echo $(($(vmstat pgdemote_kswapd) + $(vmstat pgdemote_direct) + $(vmstat pgdemote_khugepaged) + $(vmstat pgdemote_proactive))); }
counters() { echo "$(demoted) $(vmstat pgpromote_success) $(vmstat pgpromote_candidate)"; }

# phase NAME RATE_LIMIT_MBps AGENT_SECONDS ts-alloc-args...: runs the workload under the agent
# and prints the kernel's deltas over it as TS-TRUTH NAME.demoted|promoted|candidates.
phase() {
  name=$1; echo "$2" > /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps; secs=$3; shift 3
  rm -f /tmp/go /tmp/ready
  ts-alloc -w /tmp/go "$@" -s 600 -r /tmp/ready > "/tmp/$name.log" & W=$!
  AGENT_OUT=agent-$name AGENT_EXTRA="--insights-config /tmp/tier.toml" agent_start "$secs" $W
  sleep 1 # the agent's first reading comes before anything counted here
  set -- $(counters); d0=$1; p0=$2; c0=$3; t0=$(date +%s)
  touch /tmp/go
  wait_file /tmp/ready 40 || echo "TS-CHECK fail $name: the workload never finished placing its memory"
  i=0
  until grep -q 'rounds of rewriting' "/tmp/$name.log"; do i=$((i + 1)); [ $i -gt 300 ] && break; sleep 0.1; done
  kill $W; wait $W 2>/dev/null
  last=; while [ "$(counters)" != "$last" ]; do last=$(counters); sleep 0.5; done
  set -- $(counters)
  [ -n "$AGENT_PID" ] && check "$name: the agent's window covers the phase (still running after it settled)" -d /proc/$AGENT_PID
  echo "TS-INFO $name: $(cat "/tmp/$name.log" | tr '\n' ' ') settled after $(($(date +%s) - t0)) s"
  truth "$name.demoted" $(($1 - d0))
  truth "$name.promoted" $(($2 - p0))
  truth "$name.candidates" $(($3 - c0))
  agent_wait
}

phase p1 65536 10 -a 1:32 -u -t 5
phase p2 1 12 -a 1:64 -u -t 6
phase p3 65536 20 -a 0:320 -a 0:200 -u -t 6
finish
