/* A stand-in for NVIDIA's libnvidia-ml.so.1, for the sampler's test on machines with no
 * GPU: two devices with fixed readings. The types are laid out as nvml.h declares them
 * (nvmlUtilization_t: two unsigned ints; nvmlMemory_t: total, free, used as unsigned
 * long long), independently of opscope's Rust declarations; 0 is NVML_SUCCESS and 2
 * NVML_ERROR_INVALID_ARGUMENT. */
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
