//! Which job a process belongs to, by what its launcher set: read by the injected
//! library of its own process and by `opscope attach` of another's (its
//! `/proc/PID/environ` and cgroup), so both name a job alike.

use crate::env;

/// The job a process belongs to, by what its launcher says (`var` reads the process's
/// environment, `cgroup` its `/proc/PID/cgroup`): opscope's own setting, then SLURM,
/// torchelastic (torchrun), then a Kubernetes pod from the cgroup.
pub fn job_of(
    var: &dyn Fn(&str) -> Option<String>,
    cgroup: &dyn Fn() -> Option<String>,
) -> Option<(String, &'static str)> {
    for (name, source) in [
        (env::JOB, "--job"),
        ("SLURM_JOB_ID", "SLURM_JOB_ID"),
        ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RUN_ID"),
    ] {
        if let Some(v) = var(name).filter(|v| !v.trim().is_empty()) {
            return Some((v.trim().to_string(), source));
        }
    }
    pod_of_cgroup(&cgroup()?).map(|pod| (format!("pod-{pod}"), "kubernetes pod"))
}

/// The pod uid in a cgroup path as the kubelet names it: `/kubepods/burstable/pod<uid>/…`
/// (cgroupfs driver) or `kubepods-burstable-pod<uid with _>.slice` (systemd driver).
pub fn pod_of_cgroup(cgroup: &str) -> Option<String> {
    for part in cgroup.split(['/', '\n']) {
        let part = part.strip_suffix(".slice").unwrap_or(part);
        let Some(at) = part.rfind("pod") else {
            continue;
        };
        if !part.contains("kubepods") && !part.starts_with("pod") {
            continue;
        }
        let uid = &part[at + 3..];
        let looks_like_uid = uid.len() >= 8
            && uid
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_');
        if looks_like_uid {
            return Some(uid.replace('_', "-"));
        }
    }
    None
}
