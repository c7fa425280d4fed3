# The kernel-memory scenario on 2 CPUs (tests/vm/kmem.sh).
. /tests/kmem.sh
