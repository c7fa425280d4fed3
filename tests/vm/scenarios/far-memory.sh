# A CPU-less node that nothing describes (the `bare` shape: no HMAT, no CXL device): what the
# kernel says (its memory tiers, node 1's CPUs) and what `topology` makes of it.
. /tests/lib.sh
truth memory_tiers "$(for t in /sys/devices/virtual/memory_tiering/memory_tier*/nodelist; do [ -s "$t" ] && echo "$t"; done | wc -l)"
truth node1_cpus "$(tr ',' '\n' < /sys/devices/system/node/node1/cpulist | grep -c .)"
if ! agent_present; then echo "TS-AGENT missing tierscope is not in the image"; finish; fi
tierscope topology --json > /out/agent-topology.json 2> /out/topology.err
echo "TS-AGENT $? $(head -c 200 /out/topology.err | tr '\n' ' ')"
tierscope topology > /out/topology.txt 2>&1
cat /out/topology.txt
# The TIER column of the nodes table (the evidence text names `[tiers] cxl = [N]` as the fix).
tier1=$(awk '$1 == "NODE" && $2 == "TIER" { t = 1; next } t && $1 == "1" { print $2; exit }' /out/topology.txt)
if [ "$tier1" = far ]; then
  echo "TS-CHECK ok topology's text says far for node 1"
else
  echo "TS-CHECK fail topology's text says far for node 1, not '$tier1'"
fi
finish
