# Tiering per pod from the kernel's own cgroup v2 counters (issue 44). Three pod-shaped cgroups on
# the HMAT guest (node 1 the lower tier), each with one ts-alloc holding 32 MiB: A on node 0, B on
# node 1, C first on node 1, then rewritten for 12 s under NUMA balancing's tiering mode (the
# kernel promotes it; the rewriting ends inside the agent's window). The truth is each cgroup's
# own memory.numa_stat (anon + file by node) and memory.stat's tiering counters, read after the
# agent's window.
. /tests/lib.sh
agent_present || { echo "TS-AGENT missing tierscope with a snapshot subcommand is not in the image"; finish; }
CG=/sys/fs/cgroup
grep -q " $CG cgroup2 " /proc/mounts || mount -t cgroup2 none $CG
check "cgroup v2 mounted at $CG" -f $CG/cgroup.controllers
POD=$CG/kubepods.slice/kubepods-pod11111111_2222_3333_4444_555555555555.slice
A=cri-containerd-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.scope
B=cri-containerd-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.scope
C=cri-containerd-cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc.scope
mkdir -p $POD/$A $POD/$B $POD/$C
echo +memory > $CG/cgroup.subtree_control
echo +memory > $CG/kubepods.slice/cgroup.subtree_control
echo +memory > $POD/cgroup.subtree_control
check "memory controller in the containers' cgroups" -f $POD/$A/memory.numa_stat
# Each workload joins its cgroup before it allocates, so its pages are charged there.
sh -c "echo \$\$ > $POD/$A/cgroup.procs && exec ts-alloc -a 0:32 -s 600 -r /tmp/rA" > /dev/null & PA=$!
sh -c "echo \$\$ > $POD/$B/cgroup.procs && exec ts-alloc -a 1:32 -s 600 -r /tmp/rB" > /dev/null & PB=$!
echo 2 > /proc/sys/kernel/numa_balancing
echo 100 > /sys/kernel/debug/sched/numa_balancing/scan_delay_ms
echo 100 > /sys/kernel/debug/sched/numa_balancing/scan_period_min_ms
sh -c "echo \$\$ > $POD/$C/cgroup.procs && exec ts-alloc -w /tmp/goC -a 1:32 -u -t 12 -s 600 -r /tmp/rC" > /dev/null & PC=$!
wait_file /tmp/rA 30 && wait_file /tmp/rB 30 || { echo "TS-CHECK fail the workloads never finished placing their memory"; finish; }
check "A is in its cgroup" "$(cat /proc/$PA/cgroup)" = "0::/kubepods.slice/kubepods-pod11111111_2222_3333_4444_555555555555.slice/$A"
AGENT_EXTRA="--match ts-alloc"
agent_start 18 $PA
touch /tmp/goC
wait_file /tmp/rC 30 || echo "TS-CHECK fail C never finished placing its memory"
agent_wait
for w in A:$A B:$B C:$C; do
  d=$POD/${w#*:}; w=${w%%:*}
  for n in 0 1; do
    truth $w.N$n "$(awk -v n="N$n=" '$1 == "anon" || $1 == "file" { for (i = 2; i <= NF; i++) if (index($i, n) == 1) s += substr($i, length(n) + 1) } END { print s + 0 }' $d/memory.numa_stat)"
  done
  for c in pgpromote_success pgdemote_kswapd pgdemote_direct pgdemote_khugepaged numa_pages_migrated numa_hint_faults numa_pte_updates; do
    v=$(awk -v k=$c '$1 == k { print $2 }' $d/memory.stat)
    [ -n "$v" ] && truth $w.$c "$v"
  done
done
check "the kernel promoted some of C's pages" "$(awk '$1 == "pgpromote_success" { print $2 }' $POD/$C/memory.stat)" -gt 0
kill $PA $PB $PC
finish
