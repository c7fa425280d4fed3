# Insights about tiering that fights itself, three agent runs on the same two-tier guest with
# demotion enabled and NUMA balancing in tiering mode (2):
#   p1 healthy: 32 MiB hot on node 1, default promotion rate limit: all promoted -> nothing
#   p2 rate-limited: 64 MiB hot on node 1, limit 1 MB/s: most candidates refused
#                                     -> promotion_rate_limited on node 0 (and no ping-pong: fits)
#   p3 ping-pong: 520 MiB hot (node 0 has 512): kswapd demotes what NUMA balancing promotes
#                                     -> tiering_ping_pong on node 0
# Each run's window is its whole duration (window_s 120): the workload starts after the agent's
# first reading, is killed, and once the kernel's counters hold still the agent is stopped
# (SIGINT: one last reading), so the evidence rates times the window lie between the kernel's
# /proc/vmstat deltas over the phase and over the agent's whole life, however slow the host.
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

# phase NAME RATE_LIMIT_MBps MIN_DEMOTED MIN_PROMOTED MIN_CANDIDATES ts-alloc-args...: runs the
# workload (rewriting its memory) under the agent until the kernel's counters moved by at least
# the minima since it started (how long that takes depends on the host's load under TCG, so the
# phase lasts until then, at most 60 s), and prints the kernel's deltas over the phase as
# TS-TRUTH NAME.demoted|promoted|candidates.
phase() {
  name=$1; echo "$2" > /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps
  min_d=$3; min_p=$4; min_c=$5; shift 5
  rm -f /tmp/go /tmp/ready
  ts-alloc -w /tmp/go "$@" -t 600 -r /tmp/ready > "/tmp/$name.log" & W=$!
  # The agent's window starts at its first reading, somewhere between here and the baseline below
  # (before agent_start sees its "watching" line: read after it, this baseline once missed 255
  # promotions of the workload placing its memory): what the kernel counts in between
  # (promotions still landing from before; 1,543 pages once in CI) is in the agent's window and
  # not in the phase's. Both deltas are printed; the agent's count must lie between them.
  set -- $(counters); da=$1; pa=$2; ca=$3
  AGENT_OUT=agent-$name AGENT_EXTRA="--insights-config /tmp/tier.toml" agent_start 120 $W
  sleep 2 # the agent's first reading comes before anything counted here
  set -- $(counters); d0=$1; p0=$2; c0=$3; t0=$(date +%s)
  touch /tmp/go
  wait_file /tmp/ready 60 || echo "TS-CHECK fail $name: the workload never finished placing its memory"
  i=0
  while :; do
    set -- $(counters)
    [ $(($1 - d0)) -ge "$min_d" ] && [ $(($2 - p0)) -ge "$min_p" ] && [ $(($3 - c0)) -ge "$min_c" ] && break
    i=$((i + 1)); [ $i -gt 120 ] && break
    sleep 0.5
  done
  check "$name: within 60 s the kernel demoted >= $min_d, promoted >= $min_p, counted >= $min_c candidates ($(($1 - d0)) $(($2 - p0)) $(($3 - c0)))" $i -le 120
  kill $W; wait $W 2>/dev/null
  last=; while [ "$(counters)" != "$last" ]; do last=$(counters); sleep 0.5; done
  set -- $(counters); de=$1; pe=$2; ce=$3
  # The counters stay put now: the rates over the window change only by the span, and a finding
  # that started to hold late in the phase still gets its open_after_s (2 s) before the stop.
  sleep 3
  [ -n "$AGENT_PID" ] && check "$name: the agent's window covers the phase (still running after it settled)" -d /proc/$AGENT_PID
  agent_stop
  # Read after the agent's last reading: its window lies inside [before it started, now] for
  # certain. Counters that held still for half a second can move again: once the workload is
  # gone, NUMA balancing promotes back what kswapd demoted of other processes (the agent's own
  # pages among them; 2,062 pages once in CI, during the 3 s above).
  set -- $(counters)
  echo "TS-INFO $name: phase of $(($(date +%s) - t0)) s"
  truth "$name.demoted" $((de - d0))
  truth "$name.promoted" $((pe - p0))
  truth "$name.candidates" $((ce - c0))
  truth "$name.demoted_since_agent" $(($1 - da))
  truth "$name.promoted_since_agent" $(($2 - pa))
  truth "$name.candidates_since_agent" $(($3 - ca))
}

# All 32 MiB promoted (8192 pages), each a candidate first.
phase p1 65536 0 8192 8192 -a 1:32 -u
# Candidates pile up at 256 pages/s promoted.
phase p2 1 0 0 32768 -a 1:64 -u
# Both ways, each at least 4096 pages.
phase p3 65536 4096 4096 0 -a 0:320 -a 0:200 -u
finish
