/* Emits ITT tasks on one thread at a steady rate, as a busy op stream would: one task
 * every 2e9/EVENTS_PER_S ns (a begin and an end, two events) for SECONDS. Names and
 * durations (20-80 % of the period) are drawn from a fixed-seed generator rather than
 * cycled: a stream that repeats exactly would compress better than real ops do.
 *
 *   itt_paced EVENTS_PER_S SECONDS   ->  {"events": ..., "pairs": ..., "late_pairs": ...}
 *
 * late_pairs counts tasks that began more than one period after their slot: if it is
 * large, the rate asked for was not kept. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <ittnotify.h>

#include "ops.h"

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static unsigned long long rng = 0x9E3779B97F4A7C15ULL;

static unsigned next_random(unsigned bound) { /* xorshift64 */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % bound);
}

static void wait_until(long long t) {
    while (now_ns() < t) {
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s EVENTS_PER_S SECONDS\n", argv[0]);
        return 2;
    }
    double rate = atof(argv[1]), seconds = atof(argv[2]);
    long long period = (long long)(2e9 / rate);
    long pairs = (long)(seconds * rate / 2);
    __itt_domain *domain = __itt_domain_create("bench");
    __itt_string_handle *names[OP_COUNT];
    for (int i = 0; i < OP_COUNT; i++)
        names[i] = __itt_string_handle_create(OP_NAMES[i]);
    long late = 0;
    long long start = now_ns();
    for (long i = 0; i < pairs; i++) {
        long long slot = start + i * period;
        wait_until(slot);
        if (now_ns() - slot > period)
            late++;
        __itt_task_begin(domain, __itt_null, __itt_null, names[next_random(OP_COUNT)]);
        wait_until(slot + period / 5 + next_random(period * 3 / 5));
        __itt_task_end(domain);
    }
    printf("{\"events\": %ld, \"pairs\": %ld, \"late_pairs\": %ld, \"seconds\": %.3f}\n",
           2 * pairs, pairs, late, (now_ns() - start) / 1e9);
    return 0;
}
