//! A process's memory map (`/proc/PID/maps`): where each file is mapped, so that a
//! symbol's address in the file gives its address in the process.

use crate::{Error, Result};

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset in the file of the mapping's first byte.
    pub offset: u64,
    /// The file mapped, if any (`[heap]`, `[stack]` and anonymous mappings have none).
    pub path: Option<String>,
    /// Mapped executable (`x` in its permissions): code an unwinder must know.
    pub executable: bool,
}

pub fn read(pid: i32) -> Result<Vec<Mapping>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|source| Error::Proc { pid, source })?;
    Ok(parse(&text))
}

/// `start-end perms offset dev inode path`, one a line; lines that do not parse are
/// skipped.
pub fn parse(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let range = fields.next()?;
            let perms = fields.next()?;
            let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
            let _dev = fields.next()?;
            let _inode = fields.next()?;
            let path = fields
                .next()
                .map(str::trim)
                .filter(|p| p.starts_with('/'))
                .map(str::to_string);
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset,
                path,
                executable: perms.as_bytes().get(2) == Some(&b'x'),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_proc_maps_parse() {
        let text = "55d0c5a00000-55d0c5a01000 r--p 00000000 fd:01 1234 /usr/bin/python3.11\n\
                    7f00aa000000-7f00aa200000 r-xp 00100000 fd:01 99 /opt/lib/libpython3.12.so.1.0\n\
                    7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]\n\
                    garbage\n";
        let maps = parse(text);
        assert_eq!(maps.len(), 3);
        assert_eq!(maps[0].start, 0x55d0c5a00000);
        assert_eq!(maps[1].offset, 0x100000);
        assert_eq!(
            maps[1].path.as_deref(),
            Some("/opt/lib/libpython3.12.so.1.0")
        );
        assert_eq!(maps[2].path, None);
        assert_eq!(
            maps.iter().map(|m| m.executable).collect::<Vec<_>>(),
            [false, true, false]
        );
    }
}
