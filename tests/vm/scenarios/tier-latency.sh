# Tier latency: `tierscope probe-latency` measures every memory node of the CXL shape (node 0
# DRAM with the CPUs, node 1 CPU-less and slower per HMAT, node 2 the CXL region) and reports
# the firmware's HMAT figures beside its own. Under TCG, guest RAM on nodes 0 and 1 is the same
# host memory (no real latency difference), while the CXL window is emulated device memory that
# is far slower: the host judges what is real here. Buffers are small (TCG, and slow CXL).
. /tests/lib.sh
cxl_setup || exit 1
truth cxl.node $CXL_NODE
for d in /sys/devices/system/node/node*; do
  n=${d##*node}
  [ -n "$(ls $d | grep '^memory[0-9]')" ] && truth node.$n.has_memory 1
  f=$d/access0/initiators/read_latency
  [ -r $f ] && truth hmat.$n.read_latency_ns "$(cat $f)"
  f=$d/access0/initiators/read_bandwidth
  [ -r $f ] && truth hmat.$n.read_bandwidth_mbps "$(cat $f)"
done
if ! [ -x /usr/bin/tierscope ] || ! tierscope probe-latency --help >/dev/null 2>&1; then
  echo "TS-AGENT missing tierscope with a probe-latency subcommand is not in the image"
  finish
fi
t0=$(date +%s)
tierscope probe-latency --json --buffer-mib 4 --repeats 3 > /out/agent.json 2> /out/agent.err
rc=$?
echo "TS-INFO probe-latency took $(($(date +%s) - t0)) s"
echo "TS-AGENT $rc $(head -c 300 /out/agent.err | tr '\n' ' ')"
tierscope probe-latency --buffer-mib 4 --repeats 1 --node 0 2>&1 | head -5 | sed 's/^/TS-INFO /'
finish
