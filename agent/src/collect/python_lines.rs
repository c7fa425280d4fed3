//! Lines from a code object's line table: the 3.11+ location table
//! (`Objects/locations.md`) and 3.10's `co_linetable` (`Objects/lnotab_notes.txt`). Pure.

fn varint(it: &mut impl Iterator<Item = u8>) -> Option<u32> {
    let mut v = 0u32;
    let mut shift = 0;
    loop {
        let b = it.next()?;
        v |= u32::from(b & 63) << shift;
        if b & 64 == 0 {
            return Some(v);
        }
        shift += 6;
        if shift > 30 {
            return None;
        }
    }
}

fn svarint(it: &mut impl Iterator<Item = u8>) -> Option<i64> {
    let v = varint(it)?;
    Some(if v & 1 != 0 { -i64::from(v >> 1) } else { i64::from(v >> 1) })
}

/// The line of code unit `index` from a 3.11+ location table (`Objects/locations.md`), `None`
/// when the table gives it no line. Pure.
pub fn line_of(linetable: &[u8], first_line: u32, index: u64) -> Option<u32> {
    let mut it = linetable.iter().copied().peekable();
    let mut line = i64::from(first_line);
    let mut at = 0u64;
    while let Some(b) = it.next() {
        if b & 0x80 == 0 {
            return None;
        }
        let code = (b >> 3) & 15;
        let units = u64::from(b & 7) + 1;
        let here = match code {
            15 => None,
            14 => {
                line += svarint(&mut it)?;
                varint(&mut it)?;
                varint(&mut it)?;
                varint(&mut it)?;
                Some(line)
            }
            13 => {
                line += svarint(&mut it)?;
                Some(line)
            }
            10..=12 => {
                line += i64::from(code - 10);
                it.next()?;
                it.next()?;
                Some(line)
            }
            _ => {
                it.next()?;
                Some(line)
            }
        };
        if index < at + units {
            return here.and_then(|l| u32::try_from(l).ok());
        }
        at += units;
    }
    None
}

/// The line of byte offset `addr` (`f_lasti * 2`) from a 3.10 `co_linetable`: pairs of (bytes
/// covered, unsigned; line delta, signed, -128 for "no line"), from `co_firstlineno` at offset 0.
/// `None` when the table gives the offset no line. Pure.
pub fn line_of_310(linetable: &[u8], first_line: u32, addr: u64) -> Option<u32> {
    let mut line = i64::from(first_line);
    let mut at = 0u64;
    for pair in linetable.chunks_exact(2) {
        let (bytes, delta) = (u64::from(pair[0]), pair[1] as i8);
        let here = if delta == -128 {
            None
        } else {
            line += i64::from(delta);
            Some(line)
        };
        if bytes > 0 && addr < at + bytes {
            return here.and_then(|l| u32::try_from(l).ok());
        }
        at += bytes;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_location_table_gives_lines() {
        // def f():        # line 10
        //     x = 1       # 11: two code units, one-line form (+1)
        //     y = 2       # 12: one unit, one-line form (+1)
        //     return 3    # 14: long form (+2), then a no-location entry
        let table = [
            0x80 | (10 << 3) | 1,
            0,
            0, // RESUME on line 10 (delta 0), 2 units
            0x80 | (11 << 3) | 1,
            4,
            5, // +1 -> 11, 2 units
            0x80 | (11 << 3),
            4,
            5, // +1 -> 12, 1 unit
            0x80 | (14 << 3),
            4,
            0,
            5,
            6,                // +2 (svarint 4) -> 14, 1 unit
            0x80 | (15 << 3), // no location, 1 unit
        ];
        let l = |i| line_of(&table, 10, i);
        assert_eq!(
            (l(0), l(1), l(2), l(3), l(4), l(5), l(6)),
            (Some(10), Some(10), Some(11), Some(11), Some(12), Some(14), None)
        );
        assert_eq!(l(99), None);
    }

    #[test]
    fn the_310_line_table_gives_lines() {
        // def f():          # line 20
        //     x = 1         # 21: bytes 0..4
        //     ...           # a jump of 300 lines in three entries, two covering nothing
        //     y = 2         # 321: bytes 4..8
        //                   # no line for bytes 8..10 (-128)
        //     return x      # 322: bytes 10..14
        let table = [4, 1, 0, 127, 0, 127, 4, 46, 2, 0x80, 4, 1];
        let l = |a| line_of_310(&table, 20, a);
        assert_eq!(
            (l(0), l(3), l(4), l(7), l(8), l(9), l(10), l(13)),
            (Some(21), Some(21), Some(321), Some(321), None, None, Some(322), Some(322))
        );
        assert_eq!(l(14), None);
        // An odd trailing byte or an empty table gives no line, not a panic.
        assert_eq!(line_of_310(&[4], 1, 0), None);
        assert_eq!(line_of_310(&[], 1, 0), None);
    }
}
