/* The GPU check's program (bench/gpu/check.sh): the CUDA driver API alone, from
 * libcuda.so.1 opened at run time, its kernels from PTX text the driver compiles for
 * the GPU it finds, so that it runs on a node with nothing but the NVIDIA driver.
 *
 * It does known work and says what it did, one `key value...` line each, for check.sh
 * to compare with what `opscope record --cupti` recorded:
 *
 *   kernel NAME LAUNCHES        launched outside graphs
 *   kernel_ns NAME NS           their time by CUDA events around each launch
 *   kernel_min_ns NAME NS       the shortest of those (the least host delay in it)
 *   copy htod|dtoh|dtod BYTES   copies by direction
 *   memset BYTES
 *   graph_kernels NAME N        kernels launched by graph launches
 *   allocated BYTES             device memory it held for its last half second
 *   pid PID                     its process id (NVML lists its memory under it)
 *   monotonic START END         CLOCK_MONOTONIC at the start and the end
 *
 * A failed call prints `error CALL CODE NAME` and exits 1. `cuda_check --ptx` prints
 * the PTX (check.sh --stand-in assembles it with ptxas). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent, *CUgraph, *CUgraphExec;
typedef unsigned long long CUdeviceptr;

/* Two kernels over n floats: x *= a, and y += x. */
static const char PTX[] =
    ".version 7.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry scale(.param .u64 scale_x, .param .f32 scale_a, .param .u32 scale_n)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<6>;\n"
    "  .reg .f32 %f<4>;\n"
    "  .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [scale_x];\n"
    "  ld.param.f32 %f1, [scale_a];\n"
    "  ld.param.u32 %r1, [scale_n];\n"
    "  mov.u32 %r2, %ctaid.x;\n"
    "  mov.u32 %r3, %ntid.x;\n"
    "  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.s32 %r5, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %p1, %r5, %r1;\n"
    "  @%p1 bra DONE_SCALE;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mul.wide.u32 %rd3, %r5, 4;\n"
    "  add.s64 %rd4, %rd2, %rd3;\n"
    "  ld.global.f32 %f2, [%rd4];\n"
    "  mul.f32 %f3, %f2, %f1;\n"
    "  st.global.f32 [%rd4], %f3;\n"
    "DONE_SCALE:\n"
    "  ret;\n"
    "}\n"
    "\n"
    ".visible .entry add(.param .u64 add_y, .param .u64 add_x, .param .u32 add_n)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<6>;\n"
    "  .reg .f32 %f<4>;\n"
    "  .reg .b64 %rd<8>;\n"
    "  ld.param.u64 %rd1, [add_y];\n"
    "  ld.param.u64 %rd2, [add_x];\n"
    "  ld.param.u32 %r1, [add_n];\n"
    "  mov.u32 %r2, %ctaid.x;\n"
    "  mov.u32 %r3, %ntid.x;\n"
    "  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.s32 %r5, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %p1, %r5, %r1;\n"
    "  @%p1 bra DONE_ADD;\n"
    "  cvta.to.global.u64 %rd3, %rd1;\n"
    "  cvta.to.global.u64 %rd4, %rd2;\n"
    "  mul.wide.u32 %rd5, %r5, 4;\n"
    "  add.s64 %rd6, %rd3, %rd5;\n"
    "  add.s64 %rd7, %rd4, %rd5;\n"
    "  ld.global.f32 %f1, [%rd6];\n"
    "  ld.global.f32 %f2, [%rd7];\n"
    "  add.f32 %f3, %f1, %f2;\n"
    "  st.global.f32 [%rd6], %f3;\n"
    "DONE_ADD:\n"
    "  ret;\n"
    "}\n";

static void *cuda;

static void *need(const char *name) {
    void *f = dlsym(cuda, name);
    if (!f) {
        printf("error dlsym(%s) 0 missing\n", name);
        exit(1);
    }
    return f;
}

static void check(CUresult r, const char *call) {
    if (r == 0) return;
    const char *name = "?";
    CUresult (*error_name)(CUresult, const char **) = dlsym(cuda, "cuGetErrorName");
    if (error_name) error_name(r, &name);
    printf("error %s %d %s\n", call, r, name);
    exit(1);
}

#define CALL(type, name, ...) check(((type)need(#name))(__VA_ARGS__), #name)

static long long monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--ptx")) {
        fputs(PTX, stdout);
        return 0;
    }
    long long started = monotonic();
    cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        printf("error dlopen(libcuda.so.1) 0 %s\n", dlerror());
        return 1;
    }
    const unsigned n = 16u << 20; /* floats: 64 MiB per buffer */
    const size_t bytes = (size_t)n * 4;
    const unsigned threads = 256, blocks = (n + threads - 1) / threads;
    CUdevice device;
    CUcontext context;
    CUmodule module;
    CUfunction scale, add;
    CUstream s1, s2;
    CUdeviceptr x, y, z;
    CALL(CUresult(*)(unsigned), cuInit, 0);
    CALL(CUresult(*)(CUdevice *, int), cuDeviceGet, &device, 0);
    CALL(CUresult(*)(CUcontext *, CUdevice), cuDevicePrimaryCtxRetain, &context, device);
    CALL(CUresult(*)(CUcontext), cuCtxSetCurrent, context);
    CALL(CUresult(*)(CUmodule *, const void *), cuModuleLoadData, &module, PTX);
    CALL(CUresult(*)(CUfunction *, CUmodule, const char *), cuModuleGetFunction, &scale, module,
         "scale");
    CALL(CUresult(*)(CUfunction *, CUmodule, const char *), cuModuleGetFunction, &add, module,
         "add");
    CALL(CUresult(*)(CUstream *, unsigned), cuStreamCreate, &s1, 1);
    CALL(CUresult(*)(CUstream *, unsigned), cuStreamCreate, &s2, 1);
    CALL(CUresult(*)(CUdeviceptr *, size_t), cuMemAlloc_v2, &x, bytes);
    CALL(CUresult(*)(CUdeviceptr *, size_t), cuMemAlloc_v2, &y, bytes);
    CALL(CUresult(*)(CUdeviceptr *, size_t), cuMemAlloc_v2, &z, bytes);
    float *host = malloc(bytes);
    for (unsigned i = 0; i < n; i++) host[i] = (float)(i % 1000);
    CALL(CUresult(*)(CUdeviceptr, const void *, size_t), cuMemcpyHtoD_v2, x, host, bytes);
    CALL(CUresult(*)(CUdeviceptr, unsigned char, size_t), cuMemsetD8_v2, y, 0, bytes);

    typedef CUresult (*Launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);
    typedef CUresult (*Record)(CUevent, CUstream);
    CUevent before, after;
    CALL(CUresult(*)(CUevent *, unsigned), cuEventCreate, &before, 0);
    CALL(CUresult(*)(CUevent *, unsigned), cuEventCreate, &after, 0);
    float a = 1.0001f;
    void *scale_args[] = {&x, &a, (void *)&n};
    void *add_args[] = {&y, &x, (void *)&n};
    struct { const char *name; CUfunction f; void **args; CUstream s; int launches; } work[] = {
        {"scale", scale, scale_args, s1, 20},
        {"add", add, add_args, s2, 10},
    };
    for (int w = 0; w < 2; w++) {
        double total_ms = 0, min_ms = 1e30;
        for (int k = 0; k < work[w].launches; k++) {
            CALL(Record, cuEventRecord, before, work[w].s);
            CALL(Launch, cuLaunchKernel, work[w].f, blocks, 1, 1, threads, 1, 1, 0, work[w].s,
                 work[w].args, NULL);
            CALL(Record, cuEventRecord, after, work[w].s);
            CALL(CUresult(*)(CUevent), cuEventSynchronize, after);
            float ms = 0;
            CALL(CUresult(*)(float *, CUevent, CUevent), cuEventElapsedTime, &ms, before, after);
            total_ms += ms;
            if (ms < min_ms) min_ms = ms;
        }
        printf("kernel %s %d\n", work[w].name, work[w].launches);
        printf("kernel_ns %s %.0f\n", work[w].name, total_ms * 1e6);
        printf("kernel_min_ns %s %.0f\n", work[w].name, min_ms * 1e6);
    }
    CALL(CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, CUstream), cuMemcpyDtoDAsync_v2, z, x,
         bytes, s1);
    CALL(CUresult(*)(void *, CUdeviceptr, size_t, CUstream), cuMemcpyDtoHAsync_v2, host, y,
         bytes, s2);
    check(((CUresult(*)(void))need("cuCtxSynchronize"))(), "cuCtxSynchronize");
    printf("copy htod %zu\ncopy dtod %zu\ncopy dtoh %zu\nmemset %zu\n", bytes, bytes, bytes,
           bytes);

    /* A graph of three scale kernels, captured from s1, launched twice. */
    CUgraph graph;
    CUgraphExec exec;
    CALL(CUresult(*)(CUstream, int), cuStreamBeginCapture_v2, s1, 0);
    for (int k = 0; k < 3; k++)
        CALL(Launch, cuLaunchKernel, scale, blocks, 1, 1, threads, 1, 1, 0, s1, scale_args, NULL);
    CALL(CUresult(*)(CUstream, CUgraph *), cuStreamEndCapture, s1, &graph);
    CALL(CUresult(*)(CUgraphExec *, CUgraph, unsigned long long), cuGraphInstantiateWithFlags,
         &exec, graph, 0);
    for (int k = 0; k < 2; k++) CALL(CUresult(*)(CUgraphExec, CUstream), cuGraphLaunch, exec, s1);
    check(((CUresult(*)(void))need("cuCtxSynchronize"))(), "cuCtxSynchronize");
    printf("graph_kernels scale %d\n", 6);
    printf("graph_nodes %d\n", 3);
    /* Its memory held a while, so that NVML's samples (opscope's are 100 ms apart) see it. */
    struct timespec hold = {0, 500000000};
    nanosleep(&hold, NULL);
    printf("allocated %zu\n", 3 * bytes);
    printf("pid %d\n", (int)getpid());
    printf("monotonic %lld %lld\n", started, monotonic());
    free(host);
    return 0;
}
