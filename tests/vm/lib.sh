# Helpers for the guest's scenario scripts (busybox sh). Sourced by tests/vm/scenarios/*.sh.
#
# Protocol with the host (console lines; the host parses them, see xtask/src/vm/scenarios.rs):
#   TS-TRUTH <key> <number>   a figure from the kernel's own accounting (ground truth)
#   TS-CHECK ok|fail <text>   a guest-side check of kernel behaviour (did demotion happen at all...)
#   TS-AGENT <status> <text>  how the agent run went; its JSON is in /out/agent.json
#   TS-QMP <id> <json>        a QMP command for the host to run; the reply lands in /out/qmp-reply.<id>
FAILED=0

truth() { echo "TS-TRUTH $1 $2"; }

check() { # check "description" test-args...
  what=$1; shift
  if [ "$@" ]; then echo "TS-CHECK ok $what"; else echo "TS-CHECK fail $what"; FAILED=1; fi
}

# The value of a /proc/vmstat counter (0 when the kernel lacks it).
vmstat() { awk -v k="$1" '$1 == k { v = $2 } END { print v + 0 }' /proc/vmstat; }

# Pages of process $1 on node $2, summed over /proc/PID/numa_maps (N<node>=<pages>).
numa_pages() {
  awk -v n="N$2=" '{ for (i = 1; i <= NF; i++) if (index($i, n) == 1) s += substr($i, length(n) + 1) } END { print s + 0 }' "/proc/$1/numa_maps"
}

# Waits up to $2 seconds for file $1; fails when it never appears.
wait_file() {
  i=0
  while [ ! -e "$1" ]; do
    i=$((i + 1)); [ $i -gt $(($2 * 10)) ] && return 1
    sleep 0.1
  done
}

# Asks the host to run a QMP command; sets QMP_REPLY to its reply (a JSON line). Not for use
# inside $(...): the request line must reach the console and QMP_ID must persist.
QMP_ID=0
qmp() {
  QMP_ID=$((QMP_ID + 1))
  echo "TS-QMP $QMP_ID $1"
  if wait_file "/out/qmp-reply.$QMP_ID" 20; then QMP_REPLY=$(cat "/out/qmp-reply.$QMP_ID"); else QMP_REPLY='{"error":"no reply from the host within 20 s"}'; fi
}

# True when the agent is in the image and its `snapshot` subcommand exists.
agent_present() { [ -x /usr/bin/tierscope ] && tierscope snapshot --help >/dev/null 2>&1; }

# The accuracy checks count every page event: these shapes have a CXL-tier node, where the agent's
# default page path is sampled (cxl.sh checks that default apart).
EXACT="--page-path exact"

# Starts `tierscope snapshot --json --duration $1 --pid $2 $EXACT $AGENT_EXTRA` in the background, output to
# /out/$AGENT_OUT.json (default agent; the host reads every /out/agent-NAME.json too), and waits
# until it says it is watching (its "tierscope: watching for" line on
# stderr, printed once its programs are attached), at most 60 s. Sets AGENT_PID.
# Prints TS-AGENT missing when the agent is not usable.
agent_start() {
  AGENT_PID=
  AGENT_ERR=/out/${AGENT_OUT:-agent}.err
  if ! agent_present; then echo "TS-AGENT missing tierscope with a snapshot subcommand is not in the image"; return 1; fi
  t0=$(date +%s)
  # shellcheck disable=SC2086 # AGENT_EXTRA holds several flags
  tierscope snapshot --json --duration "$1" --pid "$2" $EXACT $AGENT_EXTRA > "/out/${AGENT_OUT:-agent}.json" 2> "$AGENT_ERR" &
  AGENT_PID=$!
  i=0
  until grep -q 'watching for' "$AGENT_ERR" 2>/dev/null; do
    kill -0 $AGENT_PID 2>/dev/null || { echo "TS-INFO agent exited before watching: $(head -c 300 "$AGENT_ERR")"; return 0; }
    i=$((i + 1)); [ $i -gt 600 ] && { echo "TS-CHECK fail agent did not start watching within 60 s"; FAILED=1; return 0; }
    sleep 0.1
  done
  echo "TS-INFO agent watching after $(($(date +%s) - t0)) s ($(bpftool link show 2>/dev/null | grep -c '^[0-9]') BPF links)"
}

# Ends the agent's window now (SIGINT: it takes a last reading and prints its document), for
# scenarios whose kernel figures must end where the agent's window ends; then agent_wait.
agent_stop() {
  [ -n "$AGENT_PID" ] || return 1
  kill -INT $AGENT_PID 2>/dev/null
  agent_wait
}

# Seconds since boot with hundredths (for rates over a few seconds).
uptime_s() { cut -d' ' -f1 /proc/uptime; }

# Waits for the agent started by agent_start and reports its exit status.
agent_wait() {
  [ -n "$AGENT_PID" ] || return 1
  wait $AGENT_PID
  rc=$?
  echo "TS-AGENT $rc $(head -c 300 "$AGENT_ERR" | tr '\n' ' ')"
  return $rc
}

# Loads the CXL stack, creates a volatile region on mem0 and waits for it to come online as a
# NUMA node. Sets CXL_NODE on success.
cxl_setup() {
  for m in cxl_acpi cxl_pci cxl_mem dax_cxl device_dax kmem; do modprobe $m || { echo "TS-CHECK fail modprobe $m"; return 1; }; done
  wait_file /sys/bus/cxl/devices/mem0 30 || { echo "TS-CHECK fail mem0 never appeared under /sys/bus/cxl/devices"; return 1; }
  wait_file /sys/bus/cxl/devices/decoder0.0 10 || { echo "TS-CHECK fail no root decoder decoder0.0"; return 1; }
  cxl create-region -m -t ram -d decoder0.0 -w 1 mem0 > /tmp/region.json 2>&1 || { echo "TS-CHECK fail cxl create-region: $(cat /tmp/region.json)"; return 1; }
  i=0
  while :; do
    for d in /sys/devices/system/node/node*; do
      n=${d##*node}
      [ "$n" -ge 2 ] && [ -n "$(ls $d | grep '^memory[0-9]')" ] && { CXL_NODE=$n; return 0; }
    done
    i=$((i + 1)); [ $i -gt 100 ] && { echo "TS-CHECK fail region created but no memory node >= 2 came online"; return 1; }
    sleep 0.1
  done
}

finish() { exit $FAILED; }
