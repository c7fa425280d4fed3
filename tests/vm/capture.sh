# Copies the guest's NUMA/tiering/CXL sysfs and tracefs formats into /out/fixtures (the host
# moves them to agent/fixtures). `cat` into files, never cp: sysfs attributes report a size of
# 4096 and cp -a would copy links. Directory links (nodeN/memoryM) become empty files named like
# the link, which is all a topology parser reads from them.
. /tests/lib.sh
F=/out/fixtures
rm -rf $F; mkdir -p $F/sysfs $F/tracefs

put() { # put <path under /sys>
  [ -r "/sys/$1" ] || return 0
  mkdir -p "$F/sysfs/$(dirname "$1")"
  cat "/sys/$1" > "$F/sysfs/$1" 2>/dev/null || rm -f "$F/sysfs/$1"
}

for f in online possible has_memory has_cpu has_normal_memory; do put devices/system/node/$f; done
for d in /sys/devices/system/node/node*; do
  n=devices/system/node/${d##*/}
  for f in cpulist meminfo distance vmstat numastat; do put $n/$f; done
  for a in $d/access*/initiators/*; do [ -f "$a" ] && put "${a#/sys/}"; done
  for a in $d/access*/initiators/node*; do [ -e "$a" ] && : > "$F/sysfs/${a#/sys/}"; done
  for m in $d/memory[0-9]*; do [ -e "$m" ] && mkdir -p "$F/sysfs/$n" && : > "$F/sysfs/$n/${m##*/}"; done
done
put devices/system/memory/block_size_bytes
for t in /sys/devices/virtual/memory_tiering/memory_tier*; do [ -d "$t" ] && put "${t#/sys/}/nodelist"; done

# CXL: every regular attribute of every device (skipping write-only triggers and binary blobs).
for d in /sys/bus/cxl/devices/* /sys/bus/dax/devices/*; do
  [ -e "$d" ] || continue
  real=$(readlink -f "$d")
  bus=$(echo "$d" | cut -d/ -f4)
  for f in $(find "$real" -maxdepth 2 -type f); do
    rel=${f#$real/}
    case "$rel" in *trigger*|*clear_poison*|*inject_poison*|*uevent|*/cdat|cdat|*firmware/data|*/power/*|power/*|*label_storage*|*security/*|*sanitize*|*erase*|*remove) continue ;; esac
    [ -r "$f" ] || continue
    mkdir -p "$F/sysfs/bus/$bus/devices/${d##*/}/$(dirname "$rel")"
    cat "$f" > "$F/sysfs/bus/$bus/devices/${d##*/}/$rel" 2>/dev/null || rm -f "$F/sysfs/bus/$bus/devices/${d##*/}/$rel"
  done
done

T=/sys/kernel/tracing/events
for e in migrate/mm_migrate_pages migrate/mm_migrate_pages_start kmem/mm_page_alloc kmem/mm_page_free sched/sched_move_numa sched/sched_swap_numa $(cd $T && ls -d cxl/* 2>/dev/null); do
  [ -f "$T/$e/format" ] || continue
  mkdir -p "$F/tracefs/$e"; cat "$T/$e/format" > "$F/tracefs/$e/format"
done
echo "TS-INFO captured $(find $F -type f | wc -l) files"
check "node1 captured" -f $F/sysfs/devices/system/node/node1/meminfo
check "memory tiers captured" -n "$(ls $F/sysfs/devices/virtual/memory_tiering 2>/dev/null)"
check "mm_migrate_pages format captured" -f $F/tracefs/migrate/mm_migrate_pages/format
