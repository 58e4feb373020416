//! A code object's line for a bytecode offset, from CPython 3.11+'s location table
//! (`co_linetable`, `Objects/locations.md`): entries of `1CCCCLLL` — C the form, L+1
//! the code units (2 bytes each) the entry covers — each moving the line by a delta;
//! and from the older tables of byte-pair deltas, 3.10's `co_linetable` and 3.9's
//! `co_lnotab` (`Objects/lnotab_notes.txt`).

/// The line of the instruction at byte offset `lasti`, or `None` where the table says
/// it has no location (or ends before it).
pub fn line_at(table: &[u8], first_line: i64, lasti: u64) -> Option<i64> {
    let mut at = 0usize;
    let mut line = first_line;
    let mut addr = 0u64;
    while at < table.len() {
        let head = table[at];
        at += 1;
        if head & 0x80 == 0 {
            // Not an entry's first byte: the table is not what we think it is.
            return None;
        }
        let code = (head >> 3) & 15;
        let end = addr + 2 * (u64::from(head & 7) + 1);
        let here = match code {
            15 => None,
            14 => {
                line = line.wrapping_add(svarint(table, &mut at)?);
                varint(table, &mut at)?; // end line delta
                varint(table, &mut at)?; // column
                varint(table, &mut at)?; // end column
                Some(line)
            }
            13 => {
                line = line.wrapping_add(svarint(table, &mut at)?);
                Some(line)
            }
            10..=12 => {
                line = line.wrapping_add(i64::from(code - 10));
                at += 2;
                Some(line)
            }
            _ => {
                at += 1;
                Some(line)
            }
        };
        if lasti < end {
            return here;
        }
        addr = end;
    }
    None
}

/// 3.10's `co_linetable` (`PyCode_Addr2Line`): pairs of a byte-range length and a
/// signed line delta (-128: the range has no line); the line of the range holding
/// byte offset `lasti`.
pub fn line_at_pairs(table: &[u8], first_line: i64, lasti: u64) -> Option<i64> {
    let (mut end, mut line, mut here) = (0u64, first_line, None);
    let mut pairs = table.chunks_exact(2);
    while end <= lasti {
        let pair = pairs.next()?;
        end += u64::from(pair[0]);
        let delta = pair[1] as i8;
        here = match delta {
            -128 => None,
            d => {
                line = line.wrapping_add(i64::from(d));
                Some(line)
            }
        };
    }
    here
}

/// 3.9's `co_lnotab`: pairs of a byte offset delta and a signed line delta; the line
/// of the last entry at or before byte offset `lasti`.
pub fn line_at_lnotab(table: &[u8], first_line: i64, lasti: u64) -> i64 {
    let (mut addr, mut line) = (0u64, first_line);
    for pair in table.chunks_exact(2) {
        addr += u64::from(pair[0]);
        if addr > lasti {
            break;
        }
        line = line.wrapping_add(i64::from(pair[1] as i8));
    }
    line
}

/// 6-bit chunks, least significant first; bit 6 says another follows.
fn varint(table: &[u8], at: &mut usize) -> Option<i64> {
    let mut value = 0i64;
    let mut shift = 0;
    loop {
        let b = *table.get(*at)?;
        *at += 1;
        value |= i64::from(b & 63) << shift;
        if b & 64 == 0 {
            return Some(value);
        }
        shift += 6;
        if shift > 60 {
            return None;
        }
    }
}

fn svarint(table: &[u8], at: &mut usize) -> Option<i64> {
    let v = varint(table, at)?;
    Some(if v & 1 == 1 { -(v >> 1) } else { v >> 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tables as CPython 3.9 and 3.10 write them for a function whose first line is 10:
    /// bytes 0-3 on line 11, 4-7 on line 13, 8-9 with no line (3.10), 10- on line 12.
    #[test]
    fn older_tables_of_pairs() {
        let pairs = [4, 1, 4, 2, 2, 0x80, 6, 0xff];
        // 3.10: the 0x80 range has no line, and the -1 after it counts from 13.
        assert_eq!(line_at_pairs(&pairs, 10, 0), Some(11));
        assert_eq!(line_at_pairs(&pairs, 10, 3), Some(11));
        assert_eq!(line_at_pairs(&pairs, 10, 4), Some(13));
        assert_eq!(line_at_pairs(&pairs, 10, 8), None);
        assert_eq!(line_at_pairs(&pairs, 10, 10), Some(12));
        assert_eq!(line_at_pairs(&pairs, 10, 16), None, "past the table");
        // 3.9: each delta applies from its offset on.
        let lnotab = [0, 1, 4, 2, 6, 0xff];
        assert_eq!(line_at_lnotab(&lnotab, 10, 0), 11);
        assert_eq!(line_at_lnotab(&lnotab, 10, 3), 11);
        assert_eq!(line_at_lnotab(&lnotab, 10, 4), 13);
        assert_eq!(line_at_lnotab(&lnotab, 10, 10), 12);
        assert_eq!(line_at_lnotab(&[1], 10, 10), 10, "an odd byte is no pair");
    }

    /// Entries as CPython writes them: byte = 0x80 | code << 3 | (units - 1).
    fn entry(code: u8, units: u8) -> u8 {
        0x80 | code << 3 | (units - 1)
    }

    #[test]
    fn each_form_moves_the_line_as_cpython_does() {
        let table = [
            entry(13, 1),
            0, // no column, delta 0: first line (RESUME)
            entry(11, 2),
            4,
            9, // one-line form, +1
            entry(0, 3),
            5, // short form: same line
            entry(13, 1),
            3, // svarint 3 = -1
            entry(14, 1),
            8,
            0,
            1,
            2,            // long form, +4
            entry(15, 1), // no location
        ];
        let line = |lasti| line_at(&table, 10, lasti);
        assert_eq!(line(0), Some(10));
        assert_eq!(line(2), Some(11));
        assert_eq!(line(4), Some(11));
        assert_eq!(line(6), Some(11));
        assert_eq!(line(11), Some(11));
        assert_eq!(line(12), Some(10));
        assert_eq!(line(14), Some(14));
        assert_eq!(line(16), None);
        assert_eq!(line(18), None);
    }

    #[test]
    fn a_table_that_is_not_one_gives_no_line() {
        assert_eq!(line_at(&[0x01, 0x02], 1, 0), None);
        assert_eq!(line_at(&[entry(14, 1), 0xff], 1, 0), None);
    }
}
