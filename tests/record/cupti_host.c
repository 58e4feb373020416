/* Plays the CUDA driver's part for `opscope record --cupti` on a machine without a
 * GPU: loads the library CUDA_INJECTION64_PATH names and calls its
 * InitializeInjection, as cuInit does; then waits argv[1] ms (the span of the call the
 * stand-in libcupti reports) and exits, which flushes the activity buffers. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    const char *path = getenv("CUDA_INJECTION64_PATH");
    if (!path) {
        fprintf(stderr, "no CUDA_INJECTION64_PATH\n");
        return 2;
    }
    void *library = dlopen(path, RTLD_NOW);
    int (*initialize)(void) = library ? (int (*)(void))dlsym(library, "InitializeInjection") : NULL;
    if (!initialize) {
        fprintf(stderr, "cannot load InitializeInjection from %s: %s\n", path, dlerror());
        return 2;
    }
    int status = initialize();
    long ms = argc > 1 ? atol(argv[1]) : 50;
    struct timespec wait = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&wait, NULL);
    printf("{\"initialized\": %d}\n", status);
    return 0;
}
