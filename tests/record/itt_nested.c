/* Ops that call themselves, as ITT sees them: argv[1] steps, each an ITT frame holding
 * argv[2] "outer" tasks, each holding one "outer" task (an overload calling another,
 * as torch's aten::div does) around three "leaf" tasks; about argv[3] ms of sleep a
 * step. Prints how many of each it emitted. */
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
    long ops = argc > 2 ? atol(argv[2]) : 50;
    long ms = argc > 3 ? atol(argv[3]) : 20;
    __itt_domain *domain = __itt_domain_create("train");
    __itt_string_handle *outer = __itt_string_handle_create("outer");
    __itt_string_handle *leaf = __itt_string_handle_create("leaf");
    for (long s = 0; s < steps; s++) {
        __itt_frame_begin_v3(domain, NULL);
        for (long i = 0; i < ops; i++) {
            __itt_task_begin(domain, __itt_null, __itt_null, outer);
            __itt_task_begin(domain, __itt_null, __itt_null, outer);
            for (int k = 0; k < 3; k++) {
                __itt_task_begin(domain, __itt_null, __itt_null, leaf);
                __itt_task_end(domain);
            }
            __itt_task_end(domain);
            __itt_task_end(domain);
        }
        sleep_ms(ms);
        __itt_frame_end_v3(domain, NULL);
    }
    printf("{\"outer_tasks\": %ld, \"leaf_tasks\": %ld}\n", 2 * steps * ops, 3 * steps * ops);
    return 0;
}
