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

/// The NVML functions the sampler calls (names and signatures from `nvml.h`).
pub struct Nvml {
    devices: Vec<Device>,
    utilization: UtilizationFn,
    memory: MemoryFn,
}

type UtilizationFn = unsafe extern "C" fn(Device, *mut Utilization) -> c_int;
type MemoryFn = unsafe extern "C" fn(Device, *mut Memory) -> c_int;

// SAFETY: NVML handles are process-wide and NVML is thread-safe; the sampler uses it
// from its one thread.
unsafe impl Send for Nvml {}

/// One device's reading.
pub struct Reading {
    pub utilization_percent: f64,
    pub memory_used_bytes: f64,
}

const SUCCESS: c_int = 0;

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
}
