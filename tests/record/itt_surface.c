/* Emits the ITT calls beyond tasks through ittnotify's static part: frames (begin/end
 * and submitted), markers (task and global scope), a task with metadata (a u64 array
 * and a string), a task named by its function, and two counters (u64: set, inc, dec;
 * double: set). Prints its own account as JSON: the address of the task's function
 * and each counter's values in order. */
#include <stdio.h>

#include <ittnotify.h>

static volatile unsigned long sink;

static void spin(void) {
    for (unsigned long i = 0; i < 200000; i++) sink += i;
}

static void named_function(void) { spin(); }

int main(void) {
    __itt_domain *domain = __itt_domain_create("surface");
    __itt_string_handle *mark = __itt_string_handle_create("mark");
    __itt_string_handle *step = __itt_string_handle_create("step");
    __itt_string_handle *batch = __itt_string_handle_create("batch");
    __itt_string_handle *phase = __itt_string_handle_create("phase");
    __itt_thread_set_name("surface-main");

    for (int i = 0; i < 5; i++) {
        __itt_frame_begin_v3(domain, NULL);
        spin();
        __itt_frame_end_v3(domain, NULL);
    }
    __itt_timestamp begin = __itt_get_timestamp();
    spin();
    __itt_timestamp end = __itt_get_timestamp();
    __itt_frame_submit_v3(domain, NULL, begin, end);

    for (int i = 0; i < 3; i++) __itt_marker(domain, __itt_null, mark, __itt_scope_task);
    __itt_marker(domain, __itt_null, mark, __itt_scope_global);

    __itt_task_begin(domain, __itt_null, __itt_null, step);
    unsigned long long sizes[2] = {32, 64};
    __itt_metadata_add(domain, __itt_null, batch, __itt_metadata_u64, 2, sizes);
    __itt_metadata_str_add(domain, __itt_null, phase, "train", 0);
    spin();
    __itt_task_end(domain);

    __itt_task_begin_fn(domain, __itt_null, __itt_null, (void *)named_function);
    named_function();
    __itt_task_end(domain);

    __itt_counter depth = __itt_counter_create("queue depth", "surface");
    unsigned long long values[3] = {3, 7, 2};
    for (int i = 0; i < 3; i++) __itt_counter_set_value(depth, &values[i]);
    __itt_counter_inc(depth);           /* 3 */
    __itt_counter_inc_delta(depth, 5);  /* 8 */
    __itt_counter_dec(depth);           /* 7 */
    __itt_counter_dec_delta(depth, 2);  /* 5 */
    __itt_counter load = __itt_counter_create_typed("load", "surface", __itt_metadata_double);
    double loads[2] = {0.5, 1.25};
    for (int i = 0; i < 2; i++) __itt_counter_set_value(load, &loads[i]);

    printf("{\"function\": \"%p\", \"queue depth\": [3, 7, 2, 3, 8, 7, 5], \"load\": [0.5, 1.25]}\n",
           (void *)named_function);
    return 0;
}
