/* Allocates through a chain of three functions, built with -O2 -fomit-frame-pointer: only the
 * unwind tables can walk it. Speaks the workload protocol (ready PID / go / done / stdin closed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEEP() __asm__ volatile("" ::: "memory") /* no tail calls: each frame stays */

__attribute__((noinline)) char *chain_inner(size_t n) {
    char *p = malloc(n);
    for (size_t i = 0; i < n; i += 4096) ((volatile char *)p)[i] = 1;
    KEEP();
    return p;
}

__attribute__((noinline)) char *chain_middle(size_t n) {
    char *p = chain_inner(n);
    KEEP();
    return p;
}

__attribute__((noinline)) char *chain_outer(size_t n) {
    char *p = chain_middle(n);
    KEEP();
    return p;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 64;
    char line[16];
    printf("ready %d\n", getpid());
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 1;
    char *p = chain_outer(mib << 20);
    printf("done bytes=%zu\n", mib << 20);
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {}
    return p[0] == 1 ? 0 : 2;
}
