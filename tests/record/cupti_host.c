/* Plays the CUDA driver's part for `opscope record --cupti` on a machine without a
 * GPU: loads the library CUDA_INJECTION64_PATH names and calls its
 * InitializeInjection, as cuInit does; then waits argv[1] ms (the span of the call the
 * stand-in libcupti reports) and exits, which flushes the activity buffers. With
 * `fork` as argv[2] it forks after the injection, and the child exits at once (its
 * exit handlers run, as a DataLoader worker's do). With `term` it ends by SIGTERM
 * instead of exiting (a job scheduler's stop): no exit handler runs. Prints its
 * CLOCK_MONOTONIC at the start and the end, for the times of the records. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    long long started = monotonic();
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
    if (argc > 2 && strcmp(argv[2], "fork") == 0) {
        pid_t child = fork();
        if (child == 0) exit(0);
        waitpid(child, NULL, 0);
    }
    long ms = argc > 1 ? atol(argv[1]) : 50;
    struct timespec wait = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&wait, NULL);
    printf("{\"initialized\": %d, \"monotonic\": [%lld, %lld]}\n", status, started,
           monotonic());
    fflush(stdout);
    if (argc > 2 && strcmp(argv[2], "term") == 0) {
        kill(getpid(), SIGTERM);
        for (;;) pause(); /* SIGTERM ends the process before this returns */
    }
    return 0;
}
