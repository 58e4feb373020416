//! A process's `/proc/PID/stat`: its state, parent, CPU ticks, threads and resident
//! pages, as the agent's and the recorder's samplers read them.

/// The fields of `/proc/PID/stat` the samplers use.
pub struct Stat {
    /// `Z`: exited, not yet reaped (its memory gone: no sample); `R`, `S`, `D`, …
    pub state: u8,
    pub ppid: i32,
    pub ticks: u64,
    pub threads: u64,
    pub rss_pages: u64,
}

pub fn read_stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields resume after
    // the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    // `rest` starts at field 3 (state); field n is f[n - 3].
    let num = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        state: f.first()?.bytes().next()?,
        ppid: num(4)? as i32,
        ticks: num(14)? + num(15)?,
        threads: num(20)?,
        rss_pages: num(24)?,
    })
}
