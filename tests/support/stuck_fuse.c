// A process stuck on a fault that never completes, for the root tests (tests/stuck_process.rs).
//
// `stuck-fuse DIR` mounts a FUSE file system on DIR in a mount namespace of its own and serves
// it from a forked child: a file `f` whose reads are never answered. The parent maps `f` and
// points its command line and environment at the mapping (PR_SET_MM_MAP, needs
// CAP_SYS_RESOURCE or CAP_CHECKPOINT_RESTORE), then prints `ready PID` and sleeps. Any reader of
// its /proc/PID/cmdline or environ faults on `f` through its memory and waits on the server,
// holding its mmap lock, until the server dies (killing the parent kills the server: its parent
// death signal); the kernel then aborts the connection and the readers get an error.
// A userfaultfd does not do this on 6.x kernels: a remote read that cannot retry gets SIGBUS
// (an empty read) rather than waiting.
//
// `stuck-fuse DIR lib` serves the file as `libcuda.so.1` instead and only maps it executable
// (never touching it) before it prints `ready PID`: the process itself answers every read, and
// whoever opens and reads the library (the agent, looking up the CUDA driver's entry points)
// waits on the server.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_BYTES (64 * 1024)

// The one file served: `f`, or `libcuda.so.1` in `lib` mode.
static const char *file_name = "f";

static void die(const char *what) {
  fprintf(stderr, "stuck-fuse: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void reply(int fd, uint64_t unique, int error, const void *body, size_t len) {
  char buf[sizeof(struct fuse_out_header) + 512];
  struct fuse_out_header *h = (struct fuse_out_header *)buf;
  h->len = sizeof *h + len;
  h->error = error;
  h->unique = unique;
  if (len) memcpy(buf + sizeof *h, body, len);
  if (write(fd, buf, h->len) < 0 && errno != ENOENT) die("write /dev/fuse");
}

static void attr_of(uint64_t node, struct fuse_attr *a) {
  memset(a, 0, sizeof *a);
  a->ino = node;
  a->nlink = 1;
  a->blksize = 4096;
  if (node == FUSE_ROOT_ID) {
    a->mode = S_IFDIR | 0755;
  } else {
    a->mode = S_IFREG | 0444;
    a->size = FILE_BYTES;
    a->blocks = FILE_BYTES / 512;
  }
}

// Answers everything but READ, which it never answers.
static void serve(int fd) {
  static char buf[FUSE_MIN_READ_BUFFER + 1024 * 1024];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == ENOENT) continue;
      if (errno == ENODEV) exit(0);
      die("read /dev/fuse");
    }
    struct fuse_in_header *in = (struct fuse_in_header *)buf;
    void *arg = buf + sizeof *in;
    switch (in->opcode) {
    case FUSE_INIT: {
      struct fuse_init_in *i = arg;
      struct fuse_init_out o = {.major = FUSE_KERNEL_VERSION, .minor = FUSE_KERNEL_MINOR_VERSION,
                                .max_readahead = i->max_readahead, .max_write = 65536, .time_gran = 1};
      reply(fd, in->unique, 0, &o, sizeof o);
      break;
    }
    case FUSE_LOOKUP:
      if (strcmp((char *)arg, file_name) != 0) {
        reply(fd, in->unique, -ENOENT, NULL, 0);
      } else {
        struct fuse_entry_out e = {.nodeid = 2, .entry_valid = 3600, .attr_valid = 3600};
        attr_of(2, &e.attr);
        reply(fd, in->unique, 0, &e, sizeof e);
      }
      break;
    case FUSE_GETATTR: {
      struct fuse_attr_out a = {.attr_valid = 3600};
      attr_of(in->nodeid, &a.attr);
      reply(fd, in->unique, 0, &a, sizeof a);
      break;
    }
    case FUSE_OPEN: {
      struct fuse_open_out o = {.fh = 1};
      reply(fd, in->unique, 0, &o, sizeof o);
      break;
    }
    case FUSE_READ:      // never answered: whoever faults on `f` waits
    case FUSE_FORGET:    // no reply expected
    case FUSE_BATCH_FORGET:
    case FUSE_INTERRUPT: // the READ stays unanswered
      break;
    case FUSE_FLUSH:
    case FUSE_RELEASE:
      reply(fd, in->unique, 0, NULL, 0);
      break;
    default:
      reply(fd, in->unique, -ENOSYS, NULL, 0);
    }
  }
}

static int mem_fd, go[2];
static char *stuck_at;
static volatile pid_t reader_tid, writer_tid;

// Reads its own mapping of `f` through /proc/self/mem: a remote access that cannot drop the
// mmap lock, so the lock stays held (for reading) while the READ waits for an answer.
static void *read_own_mapping(void *unused) {
  (void)unused;
  char c;
  reader_tid = gettid();
  pread(mem_fd, &c, 1, (off_t)(unsigned long)stuck_at);
  return NULL;
}

// Once told to: an mmap, which waits for the lock for writing; readers that come after it queue.
static void *map_more(void *unused) {
  (void)unused;
  char c;
  writer_tid = gettid();
  if (read(go[0], &c, 1) != 1) die("read go");
  mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return NULL;
}

// Waits until thread `*tid` sleeps uninterruptibly or on a lock (state D, or S in an rwsem).
static void wait_blocked(volatile pid_t *tid, const char *what) {
  for (int i = 0; i < 3000; i++) {
    if (*tid) {
      char p[64], buf[512] = {0}, wchan[128] = {0};
      snprintf(p, sizeof p, "/proc/self/task/%d/stat", *tid);
      int fd = open(p, O_RDONLY);
      if (fd >= 0) {
        if (read(fd, buf, sizeof buf - 1) < 0) buf[0] = 0;
        close(fd);
      }
      snprintf(p, sizeof p, "/proc/self/task/%d/wchan", *tid);
      fd = open(p, O_RDONLY);
      if (fd >= 0) {
        if (read(fd, wchan, sizeof wchan - 1) < 0) wchan[0] = 0;
        close(fd);
      }
      char *r = strrchr(buf, ')');
      if (r && (r[2] == 'D' || strstr(wchan, "rwsem") || strstr(wchan, "request_wait_answer"))) return;
    }
    usleep(10000);
  }
  fprintf(stderr, "stuck-fuse: %s never blocked\n", what);
  exit(1);
}

int main(int argc, char **argv) {
  int lib = argc == 3 && strcmp(argv[2], "lib") == 0;
  if (argc != 2 && !lib) {
    fprintf(stderr, "usage: stuck-fuse DIR [lib]\n");
    return 2;
  }
  const char *dir = argv[1];
  if (lib) file_name = "libcuda.so.1";
  if (unshare(CLONE_NEWNS)) die("unshare(CLONE_NEWNS)");
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) die("making / private");
  int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) die("/dev/fuse");
  char opts[128];
  snprintf(opts, sizeof opts, "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", fd);
  if (mount("tierscope-stuck", dir, "fuse", MS_NOSUID | MS_NODEV, opts)) die("mount fuse");
  pid_t parent = getpid();
  pid_t server = fork();
  if (server < 0) die("fork");
  if (server == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) exit(0);
    serve(fd);
  }
  close(fd);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file_name);
  int f = open(path, O_RDONLY | O_CLOEXEC);
  if (f < 0) die(path);
  if (lib) {
    // Code as /proc/PID/maps shows a loaded library's (r-xp), never read.
    if (mmap(NULL, FILE_BYTES, PROT_READ | PROT_EXEC, MAP_PRIVATE, f, 0) == MAP_FAILED) die("mmap");
    printf("ready %d\n", getpid());
    fflush(stdout);
    for (;;) pause();
  }
  char *m = mmap(NULL, FILE_BYTES, PROT_READ, MAP_SHARED, f, 0);
  if (m == MAP_FAILED) die("mmap");
  mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  if (mem_fd < 0) die("/proc/self/mem");
  stuck_at = m;
  if (pipe(go)) die("pipe");
  // Both threads before the lock is held: a thread's stack is an mmap, which would wait too
  // (the reader takes the lock as soon as it runs, so it is started last).
  pthread_t reader, writer;
  if (pthread_create(&writer, NULL, map_more, NULL) || pthread_create(&reader, NULL, read_own_mapping, NULL))
    die("pthread_create");
  wait_blocked(&reader_tid, "the read of its own FUSE page");
  if (write(go[1], "g", 1) != 1) die("write go");
  wait_blocked(&writer_tid, "its mmap");
  // From here nothing may allocate (malloc may mmap or brk: both wait for the lock too).
  char line[64];
  int n = snprintf(line, sizeof line, "ready %d\n", getpid());
  if (write(1, line, n) != n) die("write ready");
  for (;;) pause();
}
