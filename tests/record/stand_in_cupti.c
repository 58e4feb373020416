/* A stand-in libcupti driven by a script of events, for testing `record --cupti` where
 * there is no GPU. It is built against NVIDIA's own headers (cupti_activity.h of the
 * pinned nvidia-cuda-cupti-cu12 wheel, cuda.h of nvidia-cuda-runtime-cu12), so each
 * record has the layout libcupti 12.9 hands over (CUpti_ActivityKernel9, Memcpy6,
 * Memset4, API, Synchronization2, ExternalCorrelation), not one opscope's decoder
 * assumed.
 *
 * The script (STAND_IN_CUPTI_SCRIPT) has one event per line, `kind key=value ...`:
 *
 *   runtime cbid=211 corr=1 start=10 end=15       an API call (driver: `driver`)
 *   kernel name=gemm stream=7 corr=1 start=30 end=80 grid=128,1,1 block=256,1,1 graph=0 node=0
 *   memcpy copy=1 bytes=4096 stream=7 corr=3 start=90 end=95
 *   memset bytes=1024 value=0 stream=13 corr=4 start=100 end=101
 *   sync type=3 stream=7 corr=5 start=110 end=120
 *   external kind=1 id=77 corr=1                 (also made for each API call made
 *                                                  while the thread has an external id
 *                                                  pushed, as libcupti makes them)
 *   dropped 5                                     records CUPTI could not keep
 *
 * Times are µs (`start=`, `end=`; ns as `start_ns=`, `end_ns=`) after the moment the
 * subscriber registered its buffer callbacks, read
 * from the timestamp callback the subscriber registered (as libcupti takes its times
 * from it), or CLOCK_MONOTONIC. Every record is handed over at the subscriber's
 * cuptiActivityFlushAll: as many per buffer as fit, a new buffer asked for when one
 * is full; a null buffer drops what would have gone into it, as libcupti does, and
 * cuptiActivityGetNumDroppedRecords tells it once.
 *
 * What it saw is appended to STAND_IN_CUPTI_LOG, one `key value` line each: the buffer
 * sizes it was given, the records it wrote and dropped, the kinds enabled.
 * STAND_IN_CUPTI_BUSY=1 plays a libcupti another subscriber already holds;
 * STAND_IN_CUPTI_HOLD=K has it ask for K buffers before any record and hand them back
 * only after the others (a device making records faster than buffers come back);
 * STAND_IN_CUPTI_VERSION=N is what cuptiGetVersion says (28, 12.9 Update 1, else);
 * STAND_IN_CUPTI_CLOCK=realtime plays a libcupti without the timestamp callback, its
 * times on CLOCK_REALTIME (CUPTI's own default on Linux). Each flush is logged with the
 * pid that asked for it. */
#include <cuda.h>
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_EVENTS 100000

typedef union {
    CUpti_Activity base;
    CUpti_ActivityKernel9 kernel;
    CUpti_ActivityMemcpy6 memcpy;
    CUpti_ActivityMemset4 memset;
    CUpti_ActivityAPI api;
    CUpti_ActivitySynchronization2 sync;
    CUpti_ActivityExternalCorrelation external;
} Record;

static Record *records;
static size_t n_records;
static size_t dropped_by_script, dropped_unreported;
static int enabled[64];
static CUpti_BuffersCallbackRequestFunc requested;
static CUpti_BuffersCallbackCompleteFunc completed;
static CUpti_TimestampCallbackFunc timestamp;
static uint64_t origin;

static int realtime(void) {
    const char *clock = getenv("STAND_IN_CUPTI_CLOCK");
    return clock && !strcmp(clock, "realtime");
}

static uint64_t now(void) {
    if (timestamp) return timestamp();
    struct timespec ts;
    clock_gettime(realtime() ? CLOCK_REALTIME : CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void say(const char *key, unsigned long long value) {
    const char *path = getenv("STAND_IN_CUPTI_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f) return;
    fprintf(f, "%s %llu\n", key, value);
    fclose(f);
}

static size_t size_of(CUpti_ActivityKind kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel9);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME: return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
        return sizeof(CUpti_ActivityExternalCorrelation);
    default: return sizeof(CUpti_Activity);
    }
}

/* Records are packed one after another, each 8-byte aligned, as libcupti packs them. */
static size_t stride(CUpti_ActivityKind kind) { return (size_of(kind) + 7) & ~(size_t)7; }

/* The value of `key=` in `line`, or `fallback`. */
static unsigned long long field(const char *line, const char *key, unsigned long long fallback) {
    char pattern[40];
    snprintf(pattern, sizeof pattern, " %s=", key);
    const char *at = strstr(line, pattern);
    return at ? strtoull(at + strlen(pattern), NULL, 0) : fallback;
}

static void dims(const char *line, const char *key, int32_t out[3]) {
    char pattern[40];
    snprintf(pattern, sizeof pattern, " %s=", key);
    const char *at = strstr(line, pattern);
    out[0] = out[1] = out[2] = 1;
    if (at) sscanf(at + strlen(pattern), "%d,%d,%d", &out[0], &out[1], &out[2]);
}

static const char *text(const char *line, const char *key) {
    char pattern[40];
    snprintf(pattern, sizeof pattern, " %s=", key);
    const char *at = strstr(line, pattern);
    if (!at) return strdup("");
    at += strlen(pattern);
    size_t n = strcspn(at, " \n");
    char *out = malloc(n + 1);
    memcpy(out, at, n);
    out[n] = 0;
    return out; /* kept for the process's life, as libcupti keeps kernel names */
}

/* A time of the script: `key=` in µs, or `key_ns=` in ns (both after the origin). */
static uint64_t at_us(const char *line, const char *key) {
    char ns_key[40];
    snprintf(ns_key, sizeof ns_key, "%s_ns", key);
    unsigned long long ns = field(line, ns_key, ~0ull);
    if (ns != ~0ull) return origin + ns;
    return origin + 1000ull * field(line, key, 0);
}

/* The external ids each thread pushed, per external kind
 * (cuptiActivityPushExternalCorrelationId): each API call made while one is pushed gets
 * an EXTERNAL_CORRELATION record naming the top one of each kind, as libcupti makes. */
enum { EXTERNAL_KINDS = 8, MAX_PUSHED = 64 };
static __thread uint64_t pushed[EXTERNAL_KINDS][MAX_PUSHED];
static __thread int n_pushed[EXTERNAL_KINDS];

static void add_line(const char *line);

static void add_externals(uint32_t correlation) {
    for (int kind = 0; kind < EXTERNAL_KINDS; kind++) {
        if (!n_pushed[kind]) continue;
        char line[128];
        snprintf(line, sizeof line, "external kind=%d id=%llu corr=%u", kind,
                 (unsigned long long)pushed[kind][n_pushed[kind] - 1], correlation);
        add_line(line);
    }
}

/* One event of the script's form, as a record to hand over at the next flush. */
static void add_line(const char *line) {
    if (!records) records = calloc(MAX_EVENTS, sizeof(Record));
    uint32_t pid = (uint32_t)getpid(), tid = (uint32_t)syscall(SYS_gettid);
    {
        char kind[32] = "";
        if (n_records >= MAX_EVENTS) return;
        if (sscanf(line, "%31s", kind) != 1 || kind[0] == '#') return;
        Record *r = &records[n_records];
        memset(r, 0, sizeof *r);
        if (!strcmp(kind, "runtime") || !strcmp(kind, "driver")) {
            add_externals((uint32_t)field(line, "corr", 0));
            if (n_records >= MAX_EVENTS) return;
            r = &records[n_records];
            memset(r, 0, sizeof *r);
            r->api.kind = !strcmp(kind, "runtime") ? CUPTI_ACTIVITY_KIND_RUNTIME
                                                   : CUPTI_ACTIVITY_KIND_DRIVER;
            r->api.cbid = (CUpti_CallbackId)field(line, "cbid", 0);
            r->api.start = at_us(line, "start");
            r->api.end = at_us(line, "end");
            r->api.processId = pid;
            r->api.threadId = tid;
            r->api.correlationId = (uint32_t)field(line, "corr", 0);
        } else if (!strcmp(kind, "kernel")) {
            r->kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
            r->kernel.start = at_us(line, "start");
            r->kernel.end = at_us(line, "end");
            r->kernel.deviceId = (uint32_t)field(line, "device", 0);
            r->kernel.contextId = (uint32_t)field(line, "context", 1);
            r->kernel.streamId = (uint32_t)field(line, "stream", 7);
            int32_t g[3], b[3];
            dims(line, "grid", g);
            dims(line, "block", b);
            r->kernel.gridX = g[0], r->kernel.gridY = g[1], r->kernel.gridZ = g[2];
            r->kernel.blockX = b[0], r->kernel.blockY = b[1], r->kernel.blockZ = b[2];
            r->kernel.staticSharedMemory = (int32_t)field(line, "static_shared", 0);
            r->kernel.dynamicSharedMemory = (int32_t)field(line, "dynamic_shared", 0);
            r->kernel.correlationId = (uint32_t)field(line, "corr", 0);
            r->kernel.name = text(line, "name");
            r->kernel.graphId = (uint32_t)field(line, "graph", 0);
            r->kernel.graphNodeId = field(line, "node", 0);
            r->kernel.registersPerThread = 32;
        } else if (!strcmp(kind, "memcpy")) {
            r->memcpy.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
            r->memcpy.copyKind = (uint8_t)field(line, "copy", 1);
            r->memcpy.bytes = field(line, "bytes", 0);
            r->memcpy.start = at_us(line, "start");
            r->memcpy.end = at_us(line, "end");
            r->memcpy.deviceId = (uint32_t)field(line, "device", 0);
            r->memcpy.contextId = (uint32_t)field(line, "context", 1);
            r->memcpy.streamId = (uint32_t)field(line, "stream", 7);
            r->memcpy.correlationId = (uint32_t)field(line, "corr", 0);
            r->memcpy.graphId = (uint32_t)field(line, "graph", 0);
            r->memcpy.graphNodeId = field(line, "node", 0);
        } else if (!strcmp(kind, "memset")) {
            r->memset.kind = CUPTI_ACTIVITY_KIND_MEMSET;
            r->memset.value = (uint32_t)field(line, "value", 0);
            r->memset.bytes = field(line, "bytes", 0);
            r->memset.start = at_us(line, "start");
            r->memset.end = at_us(line, "end");
            r->memset.deviceId = (uint32_t)field(line, "device", 0);
            r->memset.contextId = (uint32_t)field(line, "context", 1);
            r->memset.streamId = (uint32_t)field(line, "stream", 7);
            r->memset.correlationId = (uint32_t)field(line, "corr", 0);
            r->memset.graphId = (uint32_t)field(line, "graph", 0);
            r->memset.graphNodeId = field(line, "node", 0);
        } else if (!strcmp(kind, "sync")) {
            r->sync.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
            r->sync.type = (CUpti_ActivitySynchronizationType)field(line, "type", 3);
            r->sync.start = at_us(line, "start");
            r->sync.end = at_us(line, "end");
            r->sync.correlationId = (uint32_t)field(line, "corr", 0);
            r->sync.contextId = (uint32_t)field(line, "context", 1);
            r->sync.streamId = (uint32_t)field(line, "stream", 7);
            r->sync.cudaEventId = (uint32_t)field(line, "event", 0);
        } else if (!strcmp(kind, "external")) {
            r->external.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
            r->external.externalKind = (CUpti_ExternalCorrelationKind)field(line, "kind", 1);
            r->external.externalId = field(line, "id", 0);
            r->external.correlationId = (uint32_t)field(line, "corr", 0);
        } else if (!strcmp(kind, "dropped")) {
            unsigned long long n = 0;
            sscanf(line, "%*s %llu", &n);
            dropped_by_script += n;
            dropped_unreported += n;
            return;
        } else {
            return;
        }
        n_records++;
    }
}

static void read_script(void) {
    const char *path = getenv("STAND_IN_CUPTI_SCRIPT");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) add_line(line);
    fclose(f);
}

/* For a stand-in CUDA driver (bench/gpu/stand_in_cuda.c): an event as it happens, in
 * the script's form, and the time of now in the script's µs. */
void stand_in_cupti_add(const char *line) {
    if (requested) add_line(line);
}

uint64_t stand_in_cupti_now_us(void) { return (now() - origin) / 1000; }
uint64_t stand_in_cupti_now_ns(void) { return now() - origin; }

CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version) {
    const char *v = getenv("STAND_IN_CUPTI_VERSION");
    *version = v ? (uint32_t)atoi(v) : CUPTI_API_VERSION;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *subscriber,
                                    CUpti_CallbackFunc callback, void *data) {
    (void)callback;
    (void)data;
    const char *busy = getenv("STAND_IN_CUPTI_BUSY");
    if (busy && !strcmp(busy, "1")) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    *subscriber = (CUpti_SubscriberHandle)1;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
    (void)subscriber;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str) {
    *str = result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
               ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
               : "CUPTI_ERROR_UNKNOWN";
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid,
                                          const char **name) {
    /* The few names the scripts use, spelt as libcupti spells them (with the version). */
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == 211) *name = "cudaLaunchKernel_v7000";
    else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == 311) *name = "cudaGraphLaunch_v10000";
    else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == 41) *name = "cudaMemcpyAsync_v3020";
    else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid == 307) *name = "cuLaunchKernel";
    else return CUPTI_ERROR_INVALID_PARAMETER;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f) {
    if (realtime()) return CUPTI_ERROR_NOT_SUPPORTED;
    timestamp = f;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t *t) {
    *t = now();
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc r,
                                                    CUpti_BuffersCallbackCompleteFunc c) {
    requested = r;
    completed = c;
    origin = now();
    read_script();
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
    if ((unsigned)kind < 64) enabled[kind] = 1;
    say("enabled", (unsigned long long)kind);
    return CUPTI_SUCCESS;
}

static int wanted(const Record *r) {
    CUpti_ActivityKind kind = r->base.kind;
    return (unsigned)kind < 64 && enabled[kind];
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    say("flush", (unsigned long long)getpid());
    if (!requested || !completed) return CUPTI_SUCCESS;
    const char *hold_text = getenv("STAND_IN_CUPTI_HOLD");
    size_t hold = hold_text ? (size_t)atoi(hold_text) : 0, held_n = 0;
    uint8_t *held[64];
    size_t held_size[64];
    for (; held_n < hold && held_n < 64; held_n++) {
        size_t max_records = 0;
        held[held_n] = NULL;
        held_size[held_n] = 0;
        requested(&held[held_n], &held_size[held_n], &max_records);
        say("held", held_size[held_n]);
    }
    size_t next = 0;
    while (next < n_records) {
        uint8_t *buffer = NULL;
        size_t size = 0, max_records = 0;
        requested(&buffer, &size, &max_records);
        say("buffer", size);
        size_t used = 0, in_buffer = 0;
        for (; next < n_records; next++) {
            const Record *r = &records[next];
            if (!wanted(r)) continue;
            size_t n = stride(r->base.kind);
            if (!buffer || size == 0) {
                /* No buffer: this record is lost, as libcupti loses it. */
                dropped_unreported++;
                say("dropped", 1);
                continue;
            }
            if (used + n > size || (max_records && in_buffer == max_records)) break;
            memcpy(buffer + used, r, size_of(r->base.kind));
            used += n;
            in_buffer++;
            say("written", r->base.kind);
        }
        if (buffer) completed(NULL, 0, buffer, size, used);
    }
    n_records = 0;
    for (size_t k = 0; k < held_n; k++)
        if (held[k]) completed(NULL, 0, held[k], held_size[k], 0);
    if (dropped_unreported && requested) {
        /* Drops are told with a buffer, as libcupti tells them. */
        uint8_t *buffer = NULL;
        size_t size = 0, max_records = 0;
        requested(&buffer, &size, &max_records);
        if (buffer) completed(NULL, 0, buffer, size, 0);
    }
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid,
                                                CUpti_Activity **record) {
    uint8_t *next = *record ? (uint8_t *)*record + stride((*record)->kind) : buffer;
    if (next + sizeof(CUpti_Activity) > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    CUpti_Activity *r = (CUpti_Activity *)next;
    if (next + size_of(r->kind) > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *record = r;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                            uint64_t id) {
    if ((unsigned)kind >= EXTERNAL_KINDS) return CUPTI_ERROR_INVALID_KIND;
    if (n_pushed[kind] == MAX_PUSHED) return CUPTI_ERROR_OUT_OF_MEMORY;
    pushed[kind][n_pushed[kind]++] = id;
    say("pushed", id);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                           uint64_t *last) {
    if ((unsigned)kind >= EXTERNAL_KINDS) return CUPTI_ERROR_INVALID_KIND;
    if (!n_pushed[kind]) return CUPTI_ERROR_QUEUE_EMPTY;
    uint64_t id = pushed[kind][--n_pushed[kind]];
    if (last) *last = id;
    say("popped", id);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t stream,
                                                       size_t *dropped) {
    (void)context;
    (void)stream;
    *dropped = dropped_unreported;
    dropped_unreported = 0;
    return CUPTI_SUCCESS;
}
