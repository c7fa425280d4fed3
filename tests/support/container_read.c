/* A process for a container's root: reads the file argv[1] (argv[2] MiB of it) into a fresh
 * buffer with libc's read(), so that every page of the buffer is first touched by the kernel
 * inside read(): each allocation's user stack is read() in the root's own libc, called from
 * read_into(), from main(). Speaks the workload protocol (ready PID / go / done bytes=N, then
 * waits for stdin to close); its PID is the one in its own namespace. Built with
 * -O2 -fomit-frame-pointer: only the unwind tables (the root's libc's among them) walk its
 * stacks. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define KEEP() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) size_t read_into(int fd, char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got < (1 << 20) ? n - got : (1 << 20));
        if (r <= 0) break;
        got += (size_t)r;
    }
    KEEP();
    return got;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    size_t n = (size_t)atol(argv[2]) << 20;
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) return 3;
    char *buf = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return 4;
    printf("ready %d\n", getpid());
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 5;
    size_t got = read_into(fd, buf, n);
    printf("done bytes=%zu\n", got);
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
    }
    return 0;
}
