/* Times PAIRS task begin/end pairs on one thread: ITT tasks (through the collector
 * INTEL_LIBITTNOTIFY64 names, or through none), or, built with -DWITH_LTTNG, the
 * LTTng-UST tracepoints of tp_provider.h with the same payload.
 *
 *   itt_vs_lttng PAIRS BURST PAUSE_MS   ->  {"pairs": ..., "ns": ...}
 *
 * The pairs come in bursts of BURST with PAUSE_MS of sleep between them, and only the
 * bursts are timed: a tight loop of millions of pairs outruns any recorder's drain, and
 * opscope's full ring then drops records (cheaper than keeping them) where LTTng's
 * flight recorder overwrites. A burst that fits in the buffers measures keeping each
 * event, for both. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ops.h"

#ifdef WITH_LTTNG
#define LTTNG_UST_TRACEPOINT_DEFINE
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#include "tp_provider.h"
#else
#include <ittnotify.h>
#endif

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s PAIRS BURST PAUSE_MS\n", argv[0]);
        return 2;
    }
    long pairs = atol(argv[1]), burst = atol(argv[2]);
    struct timespec pause = {0, atol(argv[3]) * 1000000L};
#ifdef WITH_LTTNG
    const char *domain = "bench";
#else
    __itt_domain *domain = __itt_domain_create("bench");
    __itt_string_handle *names[OP_COUNT];
    for (int i = 0; i < OP_COUNT; i++)
        names[i] = __itt_string_handle_create(OP_NAMES[i]);
#endif
    long long timed = 0;
    for (long done = 0; done < pairs;) {
        long n = pairs - done < burst ? pairs - done : burst;
        long long start = now_ns();
        for (long i = done; i < done + n; i++) {
#ifdef WITH_LTTNG
            lttng_ust_tracepoint(opscope_bench, task_begin, domain, OP_NAMES[i % OP_COUNT]);
            lttng_ust_tracepoint(opscope_bench, task_end);
#else
            __itt_task_begin(domain, __itt_null, __itt_null, names[i % OP_COUNT]);
            __itt_task_end(domain);
#endif
        }
        timed += now_ns() - start;
        done += n;
        if (done < pairs)
            nanosleep(&pause, NULL);
    }
    printf("{\"pairs\": %ld, \"ns\": %lld}\n", pairs, timed);
    return 0;
}
