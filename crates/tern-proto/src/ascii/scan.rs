//! Searches in request bytes, eight at a time in a `u64`: request lines and keys are short, and
//! a word needs no set-up, unlike a SIMD search (measured with callgrind).

/// The index of the first `\n` or NUL in `buf`.
#[inline]
pub(super) fn newline_or_nul(buf: &[u8]) -> Option<usize> {
    first_of(b'\n', 0, buf)
}

pub(super) const ONES: u64 = 0x0101_0101_0101_0101;
pub(super) const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Request lines and keys are short: the searches below go eight bytes at a time in a `u64` (no
/// set-up, unlike a SIMD search; measured with callgrind) over the first `SHORT` bytes.
pub(super) const SHORT: usize = 128;

/// Sets the high bit of each byte of `word` below `limit` (at most 0x80). Bits above the first
/// such byte may be set wrongly (borrows), so only the lowest set bit is trusted.
#[inline(always)]
pub(super) fn bytes_below(word: u64, limit: u8) -> u64 {
    word.wrapping_sub(ONES * u64::from(limit)) & !word & HIGHS
}

/// The index of the first byte of `haystack` that `marks` (a [`bytes_below`] of the word) flags,
/// among its first `SHORT` bytes; `Err` with how many bytes were searched when none is.
#[inline(always)]
pub(super) fn search_head(haystack: &[u8], marks: impl Fn(u64) -> u64) -> Result<usize, usize> {
    let head = &haystack[..haystack.len().min(SHORT)];
    let mut chunks = head.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let found = marks(u64::from_le_bytes(chunk.try_into().expect("8-byte chunk")));
        if found != 0 {
            return Ok(offset + (found.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    let left = chunks.remainder().len();
    if left != 0 {
        if head.len() >= 8 {
            // The last eight bytes again instead of a byte loop: the marks of those already
            // searched (none of them a match, so they lend no borrow) are dropped.
            let last = &head[head.len() - 8..];
            let found = marks(u64::from_le_bytes(last.try_into().expect("8 bytes")))
                & (u64::MAX << (8 * (8 - left)));
            if found != 0 {
                return Ok(head.len() - 8 + (found.trailing_zeros() / 8) as usize);
            }
        } else if let Some(i) = head.iter().position(|&b| marks(u64::from(b)) & 0x80 != 0) {
            return Ok(i);
        }
    }
    Err(head.len())
}

/// The index of the first `a` or `b` in `haystack`: words over the head, then `memchr2` for long
/// lines (big multi-gets).
#[inline]
pub(super) fn first_of(a: u8, b: u8, haystack: &[u8]) -> Option<usize> {
    let searched = match search_head(haystack, |w| {
        bytes_below(w ^ (ONES * u64::from(a)), 1) | bytes_below(w ^ (ONES * u64::from(b)), 1)
    }) {
        Ok(i) => return Some(i),
        Err(searched) => searched,
    };
    if searched == haystack.len() {
        return None;
    }
    memchr::memchr2(a, b, &haystack[searched..]).map(|i| i + searched)
}

/// The index of the first byte below `limit` in the first `SHORT` bytes of `haystack`.
#[inline(always)]
pub(crate) fn first_below(limit: u8, haystack: &[u8]) -> Option<usize> {
    search_head(haystack, |w| bytes_below(w, limit)).ok()
}

#[inline]
pub(crate) fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    first_of(needle, needle, haystack)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_end_search_finds_the_first_newline_or_nul_anywhere() {
        for len in 0..300 {
            let mut buf = vec![b'k'; len];
            assert_eq!(newline_or_nul(&buf), None);
            assert_eq!(memchr(b' ', &buf), None);
            for at in 0..len {
                buf.fill(b'k');
                buf[at] = b' ';
                assert_eq!(memchr(b' ', &buf), Some(at), "len {len} at {at}");
            }
            for at in 0..len {
                for (byte, later) in [(b'\n', 0u8), (0, b'\n'), (b'\n', b'\n')] {
                    buf.fill(b'k');
                    buf[at] = byte;
                    if at + 1 < len {
                        buf[at + 1..].fill(later);
                    }
                    assert_eq!(newline_or_nul(&buf), Some(at), "len {len} at {at}");
                }
            }
        }
        // Bytes just above and below the searched ones (borrows between bytes).
        assert_eq!(newline_or_nul(b"\x01\x0b\x09\x0a\x00"), Some(3));
        assert_eq!(
            newline_or_nul(b"\x80\xff\x0b\x01\x09\x8a\x81\x01\x00"),
            Some(8)
        );
    }

    #[test]
    fn control_byte_search_finds_the_first_within_its_head() {
        // Bytes at and around the limit (`!`, 0x80 and above) are not below it.
        let fillers = [b'!', b'k', 0x7f, 0x80, 0xa1, 0xff];
        for len in 0..=SHORT + 9 {
            for &filler in &fillers {
                let mut buf = vec![filler; len];
                assert_eq!(first_below(b'!', &buf), None, "len {len}");
                for at in 0..len {
                    for (byte, later) in [(b' ', b'\n'), (0, 0), (b'\x1f', b' '), (b'\r', 0x80)] {
                        buf.fill(filler);
                        buf[at] = byte;
                        buf[at + 1..].fill(later);
                        let want = (at < SHORT).then_some(at);
                        assert_eq!(first_below(b'!', &buf), want, "len {len} at {at}");
                    }
                }
            }
        }
    }
}
