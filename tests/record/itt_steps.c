/* A training loop as ITT sees it: argv[1] steps, each an ITT frame holding argv[2]
 * "op" tasks and about argv[3] ms of sleep; step argv[4] (if given) sleeps argv[5] ms
 * more (a slow step, or with a long time a stall). Prints what it emitted. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <ittnotify.h>

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    long steps = argc > 1 ? atol(argv[1]) : 20;
    long ops = argc > 2 ? atol(argv[2]) : 100;
    long ms = argc > 3 ? atol(argv[3]) : 50;
    long slow = argc > 4 ? atol(argv[4]) : -1;
    long extra = argc > 5 ? atol(argv[5]) : 0;
    __itt_domain *domain = __itt_domain_create("train");
    __itt_string_handle *forward = __itt_string_handle_create("forward_op");
    __itt_string_handle *backward = __itt_string_handle_create("backward_op");
    for (long s = 0; s < steps; s++) {
        __itt_frame_begin_v3(domain, NULL);
        for (long i = 0; i < ops; i++) {
            __itt_task_begin(domain, __itt_null, __itt_null, i % 2 ? backward : forward);
            __itt_task_end(domain);
        }
        sleep_ms(ms + (s == slow ? extra : 0));
        __itt_frame_end_v3(domain, NULL);
    }
    printf("{\"steps\": %ld, \"tasks\": %ld}\n", steps, steps * ops);
    return 0;
}
