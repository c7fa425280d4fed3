/* ts-alloc: the guest's test workload (static, so it needs nothing in the initramfs).
 *
 *   ts-alloc [-w FILE] [-a NODE:MIB]... [-u] [-l] [-o FIRST] [-f] [-t SECS] [-c SECS] [-s SECS] [-r FILE]
 *
 * -w waits until FILE exists before doing anything (so an observer can attach first). Maps one anonymous region per -a, binds it to NODE with mbind(MPOL_BIND) (NODE -1: no
 * policy), and writes every 4 KiB page once. -u then resets each region to MPOL_DEFAULT (so NUMA
 * balancing may promote it). -r creates FILE containing the pid once everything is touched (the
 * scenario waits on it). -t keeps rewriting every page for SECS seconds (hot memory for
 * promotion; -o rewrites only the regions from index FIRST on, leaving the earlier ones untouched;
 * -f flushes the TLB of the rewritten regions after each round with two mprotect calls, because
 * QEMU's TCG keeps a translation cached (so sets no accessed bit again once DAMON cleared it)
 * far longer than a hardware TLB would over a region this size), -s then sleeps SECS (cold memory for residency and demotion). Prints what it did.
 * -l locks each region with mlock(2) instead of touching it: the kernel faults its pages in on the
 * process's behalf (get_user_pages), as pinning does, and they cannot be reclaimed. -c churns for
 * SECS seconds before the hold: maps 4 MiB (default policy), writes every page, unmaps it, again,
 * so pages are allocated and freed fast while the resident size stays flat.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define MPOL_DEFAULT 0
#define MPOL_BIND 2
#define MAX_REGIONS 8
#define PAGE 4096UL

struct region { int node; size_t len; char *p; };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* An out-of-line call so touch() is not a leaf: gcc 12 sets up no frame in a leaf function that
 * needs no stack, even with -fno-omit-frame-pointer, and a frame-pointer unwinder then skips
 * the caller. */
static void __attribute__((noinline)) not_a_leaf(void) { __asm__ volatile(""); }

/* Not inlined, and built with frame pointers: the CXL scenario expects the agent's allocation
 * sites to read touch > main. */
static void __attribute__((noinline)) touch(struct region *r, unsigned char v) {
    not_a_leaf();
    for (size_t off = 0; off < r->len; off += PAGE) r->p[off] = v;
}

int main(int argc, char **argv) {
    struct region rs[MAX_REGIONS];
    int n = 0, unbind = 0, first_hot = 0, flush = 0, lock = 0, opt;
    double hot = 0, hold = 0, churn = 0;
    const char *ready = NULL, *go = NULL;
    while ((opt = getopt(argc, argv, "w:a:ulo:ft:c:s:r:")) != -1) {
        switch (opt) {
        case 'a': {
            int node; long mib;
            if (n == MAX_REGIONS || sscanf(optarg, "%d:%ld", &node, &mib) != 2 || mib <= 0) {
                fprintf(stderr, "ts-alloc: bad -a %s (want NODE:MIB, at most %d)\n", optarg, MAX_REGIONS);
                return 2;
            }
            rs[n].node = node; rs[n].len = (size_t)mib << 20; n++;
            break;
        }
        case 'w': go = optarg; break;
        case 'u': unbind = 1; break;
        case 'l': lock = 1; break;
        case 'c': churn = atof(optarg); break;
        case 'o': first_hot = atoi(optarg); break;
        case 'f': flush = 1; break;
        case 't': hot = atof(optarg); break;
        case 's': hold = atof(optarg); break;
        case 'r': ready = optarg; break;
        default:
            fprintf(stderr, "usage: ts-alloc [-w FILE] [-a NODE:MIB]... [-u] [-l] [-o FIRST] [-f] [-t SECS] [-c SECS] [-s SECS] [-r FILE]\n");
            return 2;
        }
    }
    while (go && access(go, F_OK) != 0) usleep(10000);
    for (int i = 0; i < n; i++) {
        rs[i].p = mmap(NULL, rs[i].len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (rs[i].p == MAP_FAILED) { perror("ts-alloc: mmap"); return 1; }
        if (rs[i].node >= 0) {
            unsigned long mask = 1UL << rs[i].node;
            if (syscall(SYS_mbind, rs[i].p, rs[i].len, MPOL_BIND, &mask, 64, 0) != 0) {
                perror("ts-alloc: mbind"); return 1;
            }
        }
        if (lock) {
            if (mlock(rs[i].p, rs[i].len) != 0) { perror("ts-alloc: mlock"); return 1; }
        } else {
            touch(&rs[i], 1);
        }
        printf("ts-alloc: region %d: %zu MiB at %p bound to node %d, %s\n", i, rs[i].len >> 20, (void *)rs[i].p, rs[i].node, lock ? "locked" : "touched");
        if (unbind && syscall(SYS_mbind, rs[i].p, rs[i].len, MPOL_DEFAULT, NULL, 0, 0) != 0) {
            perror("ts-alloc: mbind default"); return 1;
        }
    }
    fflush(stdout);
    if (ready) {
        FILE *f = fopen(ready, "w");
        if (!f) { perror("ts-alloc: ready file"); return 1; }
        fprintf(f, "%d\n", getpid());
        fclose(f);
    }
    double end = now() + hot;
    unsigned long rounds = 0;
    while (now() < end) {
        for (int i = first_hot; i < n; i++) {
            touch(&rs[i], (unsigned char)rounds);
            if (flush && (mprotect(rs[i].p, rs[i].len, PROT_READ) != 0 || mprotect(rs[i].p, rs[i].len, PROT_READ | PROT_WRITE) != 0)) {
                perror("ts-alloc: mprotect"); return 1;
            }
        }
        rounds++;
    }
    if (hot > 0) printf("ts-alloc: %lu rounds of rewriting in %.0f s\n", rounds, hot);
    end = now() + churn;
    unsigned long churned = 0;
    while (now() < end) {
        struct region c = { .len = 4UL << 20, .node = -1 };
        c.p = mmap(NULL, c.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (c.p == MAP_FAILED) { perror("ts-alloc: churn mmap"); return 1; }
        /* Base pages, one fault each, like a training step's small temporaries. */
        madvise(c.p, c.len, MADV_NOHUGEPAGE);
        touch(&c, 1);
        munmap(c.p, c.len);
        churned++;
    }
    if (churn > 0) printf("ts-alloc: %lu rounds of map, touch, unmap 4 MiB in %.0f s\n", churned, churn);
    fflush(stdout);
    if (hold > 0) usleep((useconds_t)(hold * 1e6));
    return 0;
}
