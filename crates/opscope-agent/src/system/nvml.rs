//! GPU utilisation and memory from NVML, for the sampler, when the machine has an NVIDIA
//! driver: `libnvidia-ml.so.1` is opened at run time (never a build dependency), and
//! without it there is simply nothing to sample.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

type Device = *mut c_void;

#[repr(C)]
#[derive(Default)]
struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// `nvmlProcessInfo_v2_t`, which the `_v2` and `_v3` process lists fill.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// The NVML functions the sampler and the agent call (names and signatures from
/// `nvml.h`).
pub struct Nvml {
    devices: Vec<Device>,
    utilization: UtilizationFn,
    memory: MemoryFn,
    /// The compute processes on a device, where the driver has the call.
    processes: Option<ProcessesFn>,
}

type UtilizationFn = unsafe extern "C" fn(Device, *mut Utilization) -> c_int;
type MemoryFn = unsafe extern "C" fn(Device, *mut Memory) -> c_int;
type ProcessesFn = unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfo) -> c_int;

// SAFETY: NVML handles are process-wide and NVML is thread-safe; the sampler uses it
// from its one thread.
unsafe impl Send for Nvml {}

/// One device's reading.
pub struct Reading {
    pub utilization_percent: f64,
    pub memory_used_bytes: f64,
}

/// A process using a device, as NVML lists it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceUser {
    pub pid: u32,
    /// Its memory on the device; `None` where the driver does not say (some
    /// virtualised and MIG setups).
    pub memory_bytes: Option<u64>,
}

const SUCCESS: c_int = 0;
const ERROR_INSUFFICIENT_SIZE: c_int = 7;
/// `NVML_VALUE_NOT_AVAILABLE` in a process's memory.
const NOT_AVAILABLE: u64 = u64::MAX;
/// The most processes listed per device.
const MAX_USERS: usize = 4096;

impl Nvml {
    /// NVML with its devices, or `None` where there is no NVIDIA driver.
    pub fn open() -> Option<Nvml> {
        // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol is cast to the
        // signature `nvml.h` declares for it; NVML is initialised before any other call.
        unsafe {
            let lib = libc::dlopen(
                c"libnvidia-ml.so.1".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            );
            if lib.is_null() {
                return None;
            }
            let symbol = |name: &CStr| {
                let f = libc::dlsym(lib, name.as_ptr() as *const c_char);
                (!f.is_null()).then_some(f)
            };
            let init: unsafe extern "C" fn() -> c_int =
                std::mem::transmute(symbol(c"nvmlInit_v2")?);
            let count: unsafe extern "C" fn(*mut c_uint) -> c_int =
                std::mem::transmute(symbol(c"nvmlDeviceGetCount_v2")?);
            let handle: unsafe extern "C" fn(c_uint, *mut Device) -> c_int =
                std::mem::transmute(symbol(c"nvmlDeviceGetHandleByIndex_v2")?);
            let nvml = Nvml {
                devices: Vec::new(),
                utilization: std::mem::transmute::<*mut c_void, UtilizationFn>(symbol(
                    c"nvmlDeviceGetUtilizationRates",
                )?),
                memory: std::mem::transmute::<*mut c_void, MemoryFn>(symbol(
                    c"nvmlDeviceGetMemoryInfo",
                )?),
                processes: symbol(c"nvmlDeviceGetComputeRunningProcesses_v3")
                    .or_else(|| symbol(c"nvmlDeviceGetComputeRunningProcesses_v2"))
                    .map(|f| std::mem::transmute::<*mut c_void, ProcessesFn>(f)),
            };
            if init() != SUCCESS {
                return None;
            }
            let mut n: c_uint = 0;
            if count(&mut n) != SUCCESS {
                return None;
            }
            let mut devices = Vec::new();
            for i in 0..n {
                let mut device: Device = std::ptr::null_mut();
                if handle(i, &mut device) == SUCCESS {
                    devices.push(device);
                }
            }
            Some(Nvml { devices, ..nvml })
        }
    }

    /// A reading per device, in index order (`None` for a device that did not answer).
    pub fn read(&self) -> Vec<Option<Reading>> {
        self.devices
            .iter()
            .map(|&device| {
                let mut u = Utilization::default();
                let mut m = Memory::default();
                // SAFETY: valid device handles from NVML and out-structs laid out as in
                // nvml.h.
                let ok = unsafe {
                    (self.utilization)(device, &mut u) == SUCCESS
                        && (self.memory)(device, &mut m) == SUCCESS
                };
                ok.then_some(Reading {
                    utilization_percent: u.gpu as f64,
                    memory_used_bytes: m.used as f64,
                })
            })
            .collect()
    }

    /// The compute processes on each device, in index order (empty where the driver
    /// lists none or has no such call).
    pub fn users(&self) -> Vec<Vec<DeviceUser>> {
        let Some(list) = self.processes else {
            return vec![Vec::new(); self.devices.len()];
        };
        self.devices
            .iter()
            .map(|&device| {
                let mut infos = vec![ProcessInfo::default(); 64];
                loop {
                    let mut count = infos.len() as c_uint;
                    // SAFETY: a valid device handle; `count` says how many entries
                    // `infos` holds, and NVML writes at most that many.
                    let status = unsafe { list(device, &mut count, infos.as_mut_ptr()) };
                    let count = count as usize;
                    if status == ERROR_INSUFFICIENT_SIZE
                        && count > infos.len()
                        && count <= MAX_USERS
                    {
                        // More processes than room: NVML said how many; once more.
                        infos.resize(count, ProcessInfo::default());
                        continue;
                    }
                    if status != SUCCESS {
                        return Vec::new();
                    }
                    return infos[..count.min(infos.len())]
                        .iter()
                        .map(|p| DeviceUser {
                            pid: p.pid,
                            memory_bytes: (p.used_gpu_memory != NOT_AVAILABLE)
                                .then_some(p.used_gpu_memory),
                        })
                        .collect();
                }
            })
            .collect()
    }
}
