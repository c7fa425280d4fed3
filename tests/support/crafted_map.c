/* Maps each file named on the command line (readable and executable, as the loader maps a
 * library's code), says "ready" on stdout, and holds the mappings until stdin closes. Nothing
 * is touched: tests/crafted_library.rs maps sparse files whose tables claim hundreds of MiB. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY);
        if (fd < 0) { perror(argv[i]); return 1; }
        off_t len = lseek(fd, 0, SEEK_END);
        if (mmap(NULL, (size_t)len, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) {
            perror(argv[i]);
            return 1;
        }
        close(fd);
    }
    printf("ready\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {}
    return 0;
}
