/* Floods ITT with nested tasks (an outer one holding an inner one, argv[1] times) in a
 * tight loop, far faster than a small ring drains, and prints how many tasks it began:
 * what the recording keeps plus what it counts as dropped must add up to that. */
#include <stdio.h>
#include <stdlib.h>

#include <ittnotify.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    __itt_domain *domain = __itt_domain_create("flood");
    __itt_string_handle *outer = __itt_string_handle_create("outer");
    __itt_string_handle *inner = __itt_string_handle_create("inner");
    for (long i = 0; i < n; i++) {
        __itt_task_begin(domain, __itt_null, __itt_null, outer);
        __itt_task_begin(domain, __itt_null, __itt_null, inner);
        __itt_task_end(domain);
        __itt_task_end(domain);
    }
    printf("{\"tasks\": %ld}\n", 2 * n);
    return 0;
}
