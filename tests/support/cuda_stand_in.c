/* A stand-in for the CUDA driver library's host-memory entry points, for hosts without a GPU:
 * the same exported names and signatures as libcuda.so.1 (cuMemHostAlloc, cuMemAllocHost_v2,
 * cuMemHostRegister_v2, cuMemFreeHost, cuMemHostUnregister), doing what the NVIDIA driver does
 * to the process's memory as far as the kernel shows it: a host allocation is a shared
 * anonymous mapping of its own, faulted in whole (the driver's shows as "/dev/zero (deleted)",
 * rw-s); a registration pins the caller's pages (here with mlock, which the kernel can do
 * without a device). tests/pinned.rs builds it as libcuda.so.1 and has tierscope probe it. */
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

typedef int CUresult;
enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2 };

static struct { void *p; size_t n; } held[64];

static CUresult alloc(void **pp, size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(p, 0, bytes);
    for (int i = 0; i < 64; i++) {
        if (!held[i].p) {
            held[i].p = p;
            held[i].n = bytes;
            *pp = p;
            return CUDA_SUCCESS;
        }
    }
    munmap(p, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* Each entry point allocates itself, as the driver's do: no exported function calls another. */
CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags) {
    (void)flags;
    return alloc(pp, bytes);
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytes) { return alloc(pp, bytes); }

CUresult cuMemFreeHost(void *p) {
    for (int i = 0; i < 64; i++) {
        if (held[i].p == p) {
            munmap(p, held[i].n);
            held[i].p = NULL;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags) {
    (void)flags;
    return mlock(p, bytes) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemHostUnregister(void *p) {
    (void)p;
    return CUDA_SUCCESS;
}
