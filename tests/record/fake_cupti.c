/* A stand-in libcupti for tests on machines without a GPU: the activity API as
 * cupti_activity.h documents it, holding back one runtime-API record (a
 * cudaLaunchKernel call, laid out as CUpti_ActivityAPI) until the subscriber flushes.
 * The call's times come from the subscriber's timestamp callback: it begins when the
 * callbacks are registered and ends at the flush. With FAKE_CUPTI_BUSY=1 it behaves as
 * a libcupti another subscriber holds (cuptiSubscribe fails with
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef int CUptiResult;
enum { SUCCESS = 0, ERROR_MAX_LIMIT_REACHED = 12, ERROR_MULTIPLE_SUBSCRIBERS = 39 };

typedef struct __attribute__((packed, aligned(8))) {
    uint32_t kind;          /* CUPTI_ACTIVITY_KIND_RUNTIME = 5 */
    uint32_t cbid;          /* CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 = 211 */
    uint64_t start;
    uint64_t end;
    uint32_t processId;
    uint32_t threadId;
    uint32_t correlationId;
    uint32_t returnValue;
} ActivityAPI;

typedef void (*BufferRequested)(uint8_t **, size_t *, size_t *);
typedef void (*BufferCompleted)(void *, uint32_t, uint8_t *, size_t, size_t);
typedef uint64_t (*Timestamp)(void);

static BufferRequested requested;
static BufferCompleted completed;
static Timestamp timestamp;
static uint64_t call_start;
static int pending;

CUptiResult cuptiSubscribe(void **subscriber, void *callback, void *data) {
    (void)callback;
    (void)data;
    const char *busy = getenv("FAKE_CUPTI_BUSY");
    if (busy && strcmp(busy, "1") == 0) return ERROR_MULTIPLE_SUBSCRIBERS;
    *subscriber = (void *)1;
    return SUCCESS;
}

CUptiResult cuptiUnsubscribe(void *subscriber) {
    (void)subscriber;
    return SUCCESS;
}

CUptiResult cuptiActivityRegisterTimestampCallback(Timestamp callback) {
    timestamp = callback;
    return SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(BufferRequested r, BufferCompleted c) {
    requested = r;
    completed = c;
    call_start = timestamp ? timestamp() : 0;
    pending = 1;
    return SUCCESS;
}

CUptiResult cuptiActivityEnable(uint32_t kind) {
    (void)kind;
    return SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    if (!pending || !requested || !completed) return SUCCESS;
    pending = 0;
    uint8_t *buffer = NULL;
    size_t size = 0, max_records = 0;
    requested(&buffer, &size, &max_records);
    if (!buffer || size < sizeof(ActivityAPI)) return SUCCESS;
    ActivityAPI call = {5, 211, call_start, timestamp ? timestamp() : 0,
                        (uint32_t)getpid(), (uint32_t)syscall(SYS_gettid), 42, 0};
    memcpy(buffer, &call, sizeof call);
    completed(NULL, 0, buffer, size, sizeof call);
    return SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, void **record) {
    uint8_t *next = *record ? (uint8_t *)*record + sizeof(ActivityAPI) : buffer;
    if (next + sizeof(ActivityAPI) > buffer + valid) return ERROR_MAX_LIMIT_REACHED;
    *record = next;
    return SUCCESS;
}
