/* A stand-in for NVIDIA's libnvidia-ml.so.1, for the sampler's test on machines with no
 * GPU: two devices with fixed readings. The types are laid out as nvml.h declares them
 * (nvmlUtilization_t: two unsigned ints; nvmlMemory_t: total, free, used as unsigned
 * long long), independently of opscope's Rust declarations; 0 is NVML_SUCCESS and 2
 * NVML_ERROR_INVALID_ARGUMENT. The compute processes on each device come from a file
 * (see nvmlDeviceGetComputeRunningProcesses_v3). */
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct device {
    unsigned int index;
} *nvmlDevice_t;

static struct device devices[2] = {{0}, {1}};

int nvmlInit_v2(void) { return 0; }

int nvmlDeviceGetCount_v2(unsigned int *count) {
    *count = 2;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (index >= 2)
        return 2;
    *device = &devices[index];
    return 0;
}

int nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *rates) {
    rates->gpu = device->index ? 81 : 37;
    rates->memory = 5;
    return 0;
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    memory->total = 1ULL << 34;
    memory->used = device->index ? 987654321ULL : 123456789ULL;
    memory->free = memory->total - memory->used;
    return 0;
}

/* nvmlProcessInfo_v2_t, which nvmlDeviceGetComputeRunningProcesses_v3 fills. */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* The compute processes of a device: the lines "DEVICE PID BYTES" (BYTES "-" for
 * NVML_VALUE_NOT_AVAILABLE) of the file FAKE_NVML_PROCESSES names, read at each call;
 * none without it. As NVML does, a count too small for the list gets
 * NVML_ERROR_INSUFFICIENT_SIZE (7) with the count needed. */
int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                            nvmlProcessInfo_t *infos) {
    const char *path = getenv("FAKE_NVML_PROCESSES");
    nvmlProcessInfo_t found[1024];
    unsigned int n = 0;
    FILE *f = path ? fopen(path, "r") : NULL;
    if (f) {
        unsigned int index, pid;
        char bytes[32];
        while (n < 1024 && fscanf(f, "%u %u %31s", &index, &pid, bytes) == 3) {
            if (index != device->index)
                continue;
            found[n].pid = pid;
            found[n].usedGpuMemory = bytes[0] == '-' ? ~0ULL : strtoull(bytes, NULL, 10);
            found[n].gpuInstanceId = ~0U;
            found[n].computeInstanceId = ~0U;
            n++;
        }
        fclose(f);
    }
    if (*count < n) {
        *count = n;
        return 7;
    }
    for (unsigned int i = 0; i < n; i++)
        infos[i] = found[i];
    *count = n;
    return 0;
}
