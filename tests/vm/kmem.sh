# The agent's kernel memory at this guest's possible CPUs (sourced by scenarios/kmem-*.sh): what
# `check` measures (every map's fdinfo memlock), and `run` starting, logging the same figure and
# serving a Prometheus scrape. The host draws the line through the 2- and 64-CPU guests.
. /tests/lib.sh
possible=$(cat /sys/devices/system/cpu/possible)
truth possible_cpus $(( ${possible##*-} + 1 ))
if ! agent_present; then echo "TS-AGENT missing tierscope is not in the image"; finish; fi
tierscope check --json > /out/agent-check.json 2> /out/check.err
echo "TS-AGENT $? $(head -c 200 /out/check.err | tr '\n' ' ')"
ip link set lo up
tierscope run --prometheus 127.0.0.1:9464 > /out/run.out 2> /out/run.err &
RUN=$!
# Served once a scrape answers with the agent's own series (at most 90 s: 64 TCG CPUs are slow).
i=0
until wget -q -O /out/scrape.txt http://127.0.0.1:9464/metrics 2>/dev/null && grep -q '^tierscope_agent' /out/scrape.txt; do
  i=$((i + 1)); [ $i -gt 90 ] && break
  sleep 1
done
check "run served a Prometheus scrape with the agent's series" -s /out/scrape.txt
kill -INT $RUN; wait $RUN
check "run stopped cleanly on SIGINT" $? -eq 0
line=$(grep -o 'kernel memory [0-9.]* MiB in [0-9]* BPF maps at [0-9]* possible CPUs' /out/run.err | head -1)
echo "run logged: $line"
check "run logged its kernel memory at $possible possible CPUs" -n "$line"
set -- $line
truth run_kernel_memory_mib "$3"
finish
