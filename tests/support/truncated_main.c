/* dlopens the library argv[1], then speaks the workload protocol twice (ready PID / go / done):
 * the first go allocates argv[2] MiB from this program's code, then enters the library, which
 * calls back (the first done line comes from the callback); the second go allocates as much
 * from that callback, after the test truncated the library. It never returns
 * into the library: it waits for stdin to close and _exits from the callback. Built with
 * -O2 -fomit-frame-pointer: only the unwind tables walk its stacks. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static size_t bytes;
static char line[16];

#define KEEP() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) char *fill(size_t n) {
    char *p = malloc(n);
    for (size_t i = 0; p && i < n; i += 4096) ((volatile char *)p)[i] = 1;
    KEEP();
    return p;
}

__attribute__((noinline)) char *before_truncation(size_t n) {
    char *p = fill(n);
    KEEP();
    return p;
}

__attribute__((noinline)) char *after_truncation(size_t n) {
    char *p = fill(n);
    KEEP();
    return p;
}

static char *first;

static void inside_library(void) {
    /* Only now, with the library's frame below this one and none of its code left to run, may
     * the test truncate it. */
    printf("done phase=1 bytes=%zu\n", bytes);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) _exit(1);
    char *p = after_truncation(bytes);
    printf("done phase=2 bytes=%zu\n", bytes);
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {}
    _exit(p && p[0] == 1 && first[0] == 1 ? 0 : 2);
}

int main(int argc, char **argv) {
    if (argc < 3) return 1;
    bytes = strtoul(argv[2], 0, 10) << 20;
    void *lib = dlopen(argv[1], RTLD_NOW);
    void (*enter)(void (*)(void)) = lib ? (void (*)(void (*)(void)))dlsym(lib, "trunc_lib_enter") : 0;
    if (!enter) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    printf("ready %d\n", getpid());
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 1;
    first = before_truncation(bytes);
    enter(inside_library);
    return 3; /* never reached */
}
