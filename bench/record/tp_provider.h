/* The LTTng-UST tracepoint provider of itt_vs_lttng.c: one event per ITT call, with
 * the payload our collector copies (begin: the domain and the task name; end: none). */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER opscope_bench

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./tp_provider.h"

#if !defined(TP_PROVIDER_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define TP_PROVIDER_H

#include <lttng/tracepoint.h>

LTTNG_UST_TRACEPOINT_EVENT(
    opscope_bench, task_begin,
    LTTNG_UST_TP_ARGS(const char *, domain, const char *, name),
    LTTNG_UST_TP_FIELDS(
        lttng_ust_field_string(domain, domain)
        lttng_ust_field_string(name, name)
    )
)

LTTNG_UST_TRACEPOINT_EVENT(
    opscope_bench, task_end,
    LTTNG_UST_TP_ARGS(),
    LTTNG_UST_TP_FIELDS()
)

#endif

#include <lttng/tracepoint-event.h>
