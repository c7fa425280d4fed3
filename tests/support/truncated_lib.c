/* A library that calls back into its program, which never returns into it: the test truncates
 * this file while the program allocates inside the callback, so the library's frame stays on
 * every sampled stack while its pages (code, unwind tables) are gone from the file. */
__attribute__((noinline)) void trunc_lib_enter(void (*cb)(void)) {
    cb();
    __asm__ volatile("" ::: "memory"); /* no tail call: this frame stays on the stack */
}
