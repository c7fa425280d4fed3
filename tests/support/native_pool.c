// A native worker pool, as OpenMP, MKL or ATen's intra-op pool runs an optimizer step: threads
// that the interpreter never saw (no Python thread state) fill memory while the Python thread
// that handed them the work waits in a foreign call. Built by tests/site_frames.rs; loaded with
// ctypes by native_pool.py.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct share {
    size_t bytes;
    void *kept;
};

__attribute__((noinline)) static void *pool_worker(void *arg) {
    struct share *s = arg;
    s->kept = malloc(s->bytes);
    if (s->kept)
        memset(s->kept, 1, s->bytes);  // every page faulted in by this worker thread
    return NULL;
}

// Fills `mib` MiB in `threads` native threads; returns the bytes filled. The memory is kept.
long pool_fill(long mib, int threads) {
    pthread_t t[64];
    static struct share s[64];
    if (threads < 1 || threads > 64)
        return -1;
    long filled = 0;
    for (int i = 0; i < threads; i++) {
        s[i].bytes = ((size_t)mib << 20) / threads;
        if (pthread_create(&t[i], NULL, pool_worker, &s[i]) != 0)
            return -1;
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        filled += s[i].kept ? (long)s[i].bytes : 0;
    }
    return filled;
}
