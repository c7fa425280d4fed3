# The kernel-memory scenario on 64 CPUs (tests/vm/kmem.sh).
. /tests/kmem.sh
