/* A stand-in libcuda.so.1 for `bench/gpu/check.sh --stand-in`: the driver functions
 * cuda_check.c calls, on a device that is a clock. cuInit loads the library
 * CUDA_INJECTION64_PATH names and calls its InitializeInjection, as the driver does;
 * each call then tells the stand-in libcupti (tests/record/stand_in_cupti.c) the
 * records CUPTI would make of it: the driver call, and the kernel, copy or memset it
 * queued, at times a stream's work follows one after another on (scale 200 µs, add
 * 100 µs, copies at 10 GB/s, memsets at 100 GB/s). Events are stamped where their
 * stream is, so cuEventElapsedTime measures the work between them as the GPU would,
 * and synchronising waits until the device's clock gets there.
 * Kernels launched while a stream is captured go into the graph, and each launch of
 * the graph runs them under the launch's correlation id. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum { MAX_STREAMS = 8, MAX_CAPTURED = 64 };

typedef struct {
    int id;
    uint64_t end_us; /* when the stream's last work ends */
    int capturing;
} Stream;

typedef struct {
    const char *name;
    uint64_t dur_us;
} Function;

typedef struct {
    uint64_t at_us;
} Event;

typedef struct {
    Function *kernels[MAX_CAPTURED];
    int n;
} Graph;

static Stream streams[MAX_STREAMS];
static int n_streams;
static Stream default_stream = {7, 0, 0};
static Function scale = {"scale", 200}, add = {"add", 100};
static uint32_t correlation;
static void (*tell)(const char *);
static uint64_t (*now_us)(void);
static Graph *capturing_into;

static uint64_t now(void) { return now_us ? now_us() : 0; }

static void say(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *format, ...) {
    char line[512];
    __builtin_va_list args;
    __builtin_va_start(args, format);
    vsnprintf(line, sizeof line, format, args);
    __builtin_va_end(args);
    if (tell) tell(line);
}

/* The driver call `cbid` at now, under a new correlation id. */
static uint32_t call(int cbid) {
    uint64_t t = now();
    uint32_t c = ++correlation;
    say("driver cbid=%d corr=%u start=%llu end=%llu", cbid, c, (unsigned long long)t,
        (unsigned long long)t + 2);
    return c;
}

/* Work of `us` on `s`: it starts when the stream is free, not before now. */
static uint64_t queue(Stream *s, uint64_t us) {
    uint64_t t = now() + 3;
    uint64_t start = s->end_us > t ? s->end_us : t;
    s->end_us = start + us;
    return start;
}

static Stream *stream_of(void *handle) { return handle ? (Stream *)handle : &default_stream; }

/* The host waits, as for a GPU, until the device's clock reaches `us`. */
static void wait_until(uint64_t us) {
    while (now_us && now() < us) {
        struct timespec pause = {0, 20000};
        nanosleep(&pause, NULL);
    }
}

CUresult cuInit(unsigned flags) {
    (void)flags;
    const char *path = getenv("CUDA_INJECTION64_PATH");
    void *injection = path ? dlopen(path, RTLD_NOW) : NULL;
    int (*initialize)(void) = injection ? (int (*)(void))dlsym(injection, "InitializeInjection") : NULL;
    if (initialize) initialize();
    void *cupti = dlopen("libcupti.so.12", RTLD_NOW | RTLD_NOLOAD);
    if (cupti) {
        tell = (void (*)(const char *))dlsym(cupti, "stand_in_cupti_add");
        now_us = (uint64_t(*)(void))dlsym(cupti, "stand_in_cupti_now_us");
    }
    return 0;
}

CUresult cuGetErrorName(CUresult r, const char **name) {
    (void)r;
    *name = "CUDA_ERROR_STAND_IN";
    return 0;
}
CUresult cuDeviceGet(int *device, int ordinal) { *device = ordinal; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **context, int device) { (void)device; *context = (void *)1; return 0; }
CUresult cuCtxSetCurrent(void *context) { (void)context; return 0; }
CUresult cuModuleLoadData(void **module, const void *image) {
    (void)image;
    *module = (void *)1;
    return 0;
}
CUresult cuModuleGetFunction(void **f, void *module, const char *name) {
    (void)module;
    if (!strcmp(name, "scale")) *f = &scale;
    else if (!strcmp(name, "add")) *f = &add;
    else return 500; /* CUDA_ERROR_NOT_FOUND */
    return 0;
}
CUresult cuStreamCreate(void **stream, unsigned flags) {
    (void)flags;
    if (n_streams == MAX_STREAMS) return 2;
    streams[n_streams] = (Stream){13 + n_streams, 0, 0};
    *stream = &streams[n_streams++];
    return 0;
}
/* What this process holds on the device, told to the stand-in NVML as the driver tells
 * NVML (tests/record/fake_nvml.c reads FAKE_NVML_PROCESSES: "DEVICE PID BYTES"). */
static void tell_nvml(size_t held) {
    const char *path = getenv("FAKE_NVML_PROCESSES");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) return;
    fprintf(f, "0 %d %zu\n", (int)getpid(), held);
    fclose(f);
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
    static CUdeviceptr next = 0x700000000000ull;
    static size_t held = 0;
    size_t rounded = (bytes + 0xfffff) & ~(size_t)0xfffff;
    *p = next;
    next += rounded;
    held += rounded;
    tell_nvml(held);
    return 0;
}

static CUresult copy(int cbid, int kind, size_t bytes, void *stream) {
    Stream *s = stream_of(stream);
    uint32_t c = call(cbid);
    uint64_t us = bytes / 10000 + 1; /* 10 GB/s */
    uint64_t start = queue(s, us);
    say("memcpy copy=%d bytes=%zu stream=%d corr=%u start=%llu end=%llu", kind, bytes, s->id, c,
        (unsigned long long)start, (unsigned long long)(start + us));
    return 0;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t bytes) {
    (void)d, (void)h;
    copy(276, 1, bytes, NULL);
    wait_until(default_stream.end_us);
    return 0;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t bytes, void *stream) {
    (void)d, (void)s;
    return copy(281, 8, bytes, stream);
}
CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t bytes, void *stream) {
    (void)h, (void)d;
    return copy(279, 2, bytes, stream);
}
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char value, size_t bytes) {
    (void)d;
    Stream *s = &default_stream;
    uint32_t c = call(249);
    uint64_t us = bytes / 100000 + 1; /* 100 GB/s */
    uint64_t start = queue(s, us);
    say("memset bytes=%zu value=%u stream=%d corr=%u start=%llu end=%llu", bytes, value, s->id, c,
        (unsigned long long)start, (unsigned long long)(start + us));
    wait_until(s->end_us);
    return 0;
}

static void run_kernel(Function *f, Stream *s, uint32_t c, int graph, int node) {
    uint64_t start = queue(s, f->dur_us);
    say("kernel name=%s stream=%d corr=%u start=%llu end=%llu grid=65536,1,1 block=256,1,1 "
        "graph=%d node=%d",
        f->name, s->id, c, (unsigned long long)start, (unsigned long long)(start + f->dur_us),
        graph, node);
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)params,
        (void)extra;
    Stream *s = stream_of(stream);
    uint32_t c = call(307);
    if (s->capturing && capturing_into) {
        if (capturing_into->n < MAX_CAPTURED) capturing_into->kernels[capturing_into->n++] = f;
        return 0;
    }
    run_kernel((Function *)f, s, c, 0, 0);
    return 0;
}

CUresult cuEventCreate(void **event, unsigned flags) {
    (void)flags;
    *event = calloc(1, sizeof(Event));
    return 0;
}
CUresult cuEventRecord(void *event, void *stream) {
    Stream *s = stream_of(stream);
    uint64_t t = now();
    ((Event *)event)->at_us = s->end_us > t ? s->end_us : t;
    return 0;
}
CUresult cuEventSynchronize(void *event) {
    wait_until(((Event *)event)->at_us);
    return 0;
}
CUresult cuEventElapsedTime(float *ms, void *start, void *end) {
    *ms = (float)(((Event *)end)->at_us - ((Event *)start)->at_us) / 1000.0f;
    return 0;
}
CUresult cuCtxSynchronize(void) {
    wait_until(default_stream.end_us);
    for (int k = 0; k < n_streams; k++) wait_until(streams[k].end_us);
    return 0;
}

CUresult cuStreamBeginCapture_v2(void *stream, int mode) {
    (void)mode;
    stream_of(stream)->capturing = 1;
    capturing_into = calloc(1, sizeof(Graph));
    return 0;
}
CUresult cuStreamEndCapture(void *stream, void **graph) {
    stream_of(stream)->capturing = 0;
    *graph = capturing_into;
    capturing_into = NULL;
    return 0;
}
CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    (void)flags;
    *exec = graph;
    return 0;
}
CUresult cuGraphLaunch(void *exec, void *stream) {
    Graph *g = exec;
    Stream *s = stream_of(stream);
    uint32_t c = call(514);
    for (int k = 0; k < g->n; k++) run_kernel(g->kernels[k], s, c, 1, k + 1);
    return 0;
}
