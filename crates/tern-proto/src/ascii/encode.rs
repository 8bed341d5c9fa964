//! Replies of the text protocol: `VALUE` lines with their data, numbers, `STAT` lines.

use super::scan::ONES;

/// The most bytes [`encode_value`] writes besides the key and the value: `VALUE ` as a word (8),
/// ` ` and the flags (11), ` ` and the length (21), ` ` and the CAS (21), and two `\r\n`.
const VALUE_HEADER_ROOM: usize = 8 + 11 + 21 + 21 + 2 + 2;

/// Appends `VALUE <key> <flags> <bytes>[ <cas>]\r\n<value>\r\n`.
///
/// The hottest encoder (once per hit of a get), so it writes each piece straight into the spare
/// capacity with fixed-size stores instead of a `memcpy` call per piece, and its common path
/// calls nothing but the value's copy (growing the buffer and numbers of nine digits or more are
/// out of line); docs/performance.md has the counts.
#[inline]
pub fn encode_value(out: &mut Vec<u8>, key: &[u8], flags: u32, value: &[u8], cas: Option<u64>) {
    encode_value_then::<false>(out, key, flags, value, cas);
}

/// [`encode_value`] then `END\r\n`: the whole reply to a get of one key that was found, in
/// one step. Not inlined: inlined into a store's read closure it keeps that closure apart.
#[inline(never)]
pub fn encode_only_value(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: u32,
    value: &[u8],
    cas: Option<u64>,
) {
    encode_value_then::<true>(out, key, flags, value, cas);
}

/// The most bytes [`encode_value_then`] writes for `key` and `value`.
#[inline(always)]
fn value_room<const WITH_END: bool>(key: &[u8], value: &[u8]) -> usize {
    VALUE_HEADER_ROOM + key.len() + value.len() + if WITH_END { 8 } else { 0 }
}

/// [`encode_value`], and `END\r\n` after it when `WITH_END`.
#[inline(always)]
fn encode_value_then<const WITH_END: bool>(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: u32,
    value: &[u8],
    cas: Option<u64>,
) {
    let room = value_room::<WITH_END>(key, value);
    if out.capacity() - out.len() < room {
        return encode_value_after_growing::<WITH_END>(out, key, flags, value, cas);
    }
    let len = out.len();
    // SAFETY: `out` has room for `room` bytes past `len`, and the pieces below write within it:
    // each writes at the cursor at most its width (the word stores included) and moves the cursor
    // by no more, and the widths (8, the key, 11, 21, 21, 2, the value, 2, and 8 with `END`)
    // sum to `room`. Every byte up to the final cursor is written before `set_len` exposes it.
    unsafe {
        let start = out.as_mut_ptr().add(len);
        let mut at = put_word(start, u64::from_le_bytes(*b"VALUE \0\0"), 6);
        at = put_bytes(at, key);
        *at = b' ';
        at = put_decimal(at.add(1), u64::from(flags));
        *at = b' ';
        at = put_decimal(at.add(1), value.len() as u64);
        if let Some(cas) = cas {
            *at = b' ';
            at = put_decimal(at.add(1), cas);
        }
        at = put_crlf(at);
        let mut end = put_crlf(at.add(value.len()));
        if WITH_END {
            end = put_word(end, u64::from_le_bytes(*b"END\r\n\0\0\0"), 5);
        }
        let new_len = len + end.offset_from(start) as usize;
        if value.len() > 32 {
            std::ptr::copy_nonoverlapping(value.as_ptr(), at, value.len());
        } else {
            put_bytes(at, value);
        }
        out.set_len(new_len);
    }
}

/// [`encode_value`] into a buffer that must grow first: out of line, so that the common path
/// keeps no registers for a call to the allocator.
#[cold]
#[inline(never)]
fn encode_value_after_growing<const WITH_END: bool>(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: u32,
    value: &[u8],
    cas: Option<u64>,
) {
    out.reserve(value_room::<WITH_END>(key, value));
    encode_value_then::<WITH_END>(out, key, flags, value, cas);
}

/// Stores the eight bytes of `word` (little-endian) at `at` and moves on by `advance` of them.
///
/// # Safety
/// `at` must be valid for 8 bytes of writes.
#[inline(always)]
unsafe fn put_word(at: *mut u8, word: u64, advance: usize) -> *mut u8 {
    // SAFETY: the caller's.
    unsafe {
        at.cast::<u64>().write_unaligned(word.to_le());
        at.add(advance)
    }
}

/// # Safety
/// `at` must be valid for 2 bytes of writes.
#[inline(always)]
unsafe fn put_crlf(at: *mut u8) -> *mut u8 {
    // SAFETY: the caller's.
    unsafe {
        at.cast::<[u8; 2]>().write_unaligned(*b"\r\n");
        at.add(2)
    }
}

/// Copies `src` (a key, digits, a small value) to `at` and moves past it, without a call: two
/// overlapping loads and stores of one width cover any length from that width to twice it, and
/// longer ones go 16 bytes at a time.
///
/// # Safety
/// `at` must be valid for `src.len()` bytes of writes, not overlapping `src`.
#[inline(always)]
unsafe fn put_bytes(at: *mut u8, src: &[u8]) -> *mut u8 {
    /// Copies `T` at `from` in `src` to the same place at `at`.
    ///
    /// # Safety
    /// As `put_bytes`'s, and `from + size_of::<T>() <= src.len()`.
    #[inline(always)]
    unsafe fn copy_at<T: Copy>(at: *mut u8, src: &[u8], from: usize) {
        // SAFETY: the read lies in `src`, the write in `at..at + src.len()`.
        unsafe {
            let word = src.as_ptr().add(from).cast::<T>().read_unaligned();
            at.add(from).cast::<T>().write_unaligned(word);
        }
    }
    let n = src.len();
    // SAFETY: the caller's; every offset below leaves room for its width in `src`.
    unsafe {
        // Typical keys first.
        if n >= 8 {
            if n <= 16 {
                copy_at::<u64>(at, src, 0);
                copy_at::<u64>(at, src, n - 8);
            } else {
                let mut from = 0;
                while from + 16 < n {
                    copy_at::<u128>(at, src, from);
                    from += 16;
                }
                copy_at::<u128>(at, src, n - 16);
            }
        } else if n >= 4 {
            copy_at::<u32>(at, src, 0);
            copy_at::<u32>(at, src, n - 4);
        } else if n > 0 {
            copy_at::<u8>(at, src, 0);
            copy_at::<u8>(at, src, n / 2);
            copy_at::<u8>(at, src, n - 1);
        }
        at.add(n)
    }
}

/// Writes `n` in decimal at `at` and moves past it.
///
/// # Safety
/// `at` must be valid for 20 bytes of writes.
#[inline(always)]
unsafe fn put_decimal(at: *mut u8, n: u64) -> *mut u8 {
    // SAFETY (all of it): the caller's.
    unsafe {
        if n < 100 {
            let n = n as usize;
            if n < 10 {
                *at = b'0' + n as u8;
                return at.add(1);
            }
            return put_pair(at, n);
        }
        if n < 10_000 {
            let (high, low) = (n as usize / 100, n as usize % 100);
            if high < 10 {
                *at = b'0' + high as u8;
                return put_pair(at.add(1), low);
            }
            return put_pair(put_pair(at, high), low);
        }
    }
    if n < E8 {
        return unsafe { put_eight_digits(at, n) };
    }
    unsafe { put_long_decimal(at, n) }
}

const E8: u64 = 100_000_000;

/// "00" to "99", padded to 128 pairs so that an index masked to 7 bits needs no bounds check.
const DIGIT_PAIRS: [[u8; 2]; 128] = {
    let mut pairs = [[0; 2]; 128];
    let mut i = 0;
    while i < 100 {
        pairs[i] = [b'0' + (i / 10) as u8, b'0' + (i % 10) as u8];
        i += 1;
    }
    pairs
};

/// Writes the two digits of `n` (below 100) at `at` and moves past them.
///
/// # Safety
/// `at` must be valid for 2 bytes of writes.
#[inline(always)]
unsafe fn put_pair(at: *mut u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's.
    unsafe {
        at.cast::<[u8; 2]>().write_unaligned(DIGIT_PAIRS[n & 127]);
        at.add(2)
    }
}

/// [`put_decimal`] of `n` below 10^8 (and not 0), eight digits at once.
///
/// # Safety
/// `at` must be valid for 8 bytes of writes.
#[inline(always)]
unsafe fn put_eight_digits(at: *mut u8, n: u64) -> *mut u8 {
    let digits = eight_digits(n as u32);
    let zeros = digits.trailing_zeros() / 8;
    let ascii = (digits + ONES * u64::from(b'0')) >> (8 * zeros);
    // SAFETY: the caller's.
    unsafe { put_word(at, ascii, 8 - zeros as usize) }
}

/// [`put_decimal`] of `n` of nine digits or more (a CAS, a huge length): a head of up to 12
/// digits, then eight zero-padded. Out of line, for the common path's registers.
///
/// # Safety
/// `at` must be valid for 20 bytes of writes.
#[cold]
#[inline(never)]
unsafe fn put_long_decimal(at: *mut u8, n: u64) -> *mut u8 {
    let padded = |n: u64| eight_digits((n % E8) as u32) + ONES * u64::from(b'0');
    let high = n / E8;
    // SAFETY: the caller's; 20 digits at most in all.
    unsafe {
        let at = if high < E8 {
            put_eight_digits(at, high)
        } else {
            put_word(put_eight_digits(at, high / E8), padded(high), 8)
        };
        put_word(at, padded(n), 8)
    }
}

/// The eight decimal digits of `n` (below 10^8, zero-padded), one value 0..=9 per byte, the most
/// significant in the lowest byte (first in memory). Lanes of one `u64` are split three times,
/// by 10^4, 100 and 10, with multiply-and-shift divisions exact for these ranges.
#[inline(always)]
fn eight_digits(n: u32) -> u64 {
    let (high, low) = (u64::from(n / 10_000), u64::from(n % 10_000));
    // Two 32-bit lanes below 10^4: x * 10486 >> 20 is x / 100 there, and stays in its lane.
    let fours = high | low << 32;
    let hundreds = ((fours * 10_486) >> 20) & 0x0000_007F_0000_007F;
    let pairs = hundreds | (fours - hundreds * 100) << 16;
    // Four 16-bit lanes below 100: x * 103 >> 10 is x / 10 there.
    let tens = ((pairs * 103) >> 10) & 0x000F_000F_000F_000F;
    tens | (pairs - tens * 10) << 8
}

/// Appends a number and `\r\n` (the reply to incr/decr).
pub fn encode_number(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `STAT <name> <value>\r\n`.
pub fn encode_stat(out: &mut Vec<u8>, name: &str, value: impl std::fmt::Display) {
    use std::io::Write;
    // Writing into a Vec cannot fail.
    let _ = write!(out, "STAT {name} {value}\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoders() {
        let mut out = Vec::new();
        encode_value(&mut out, b"k", 3, b"xy", Some(9));
        encode_value(&mut out, b"k", 0, b"", None);
        encode_number(&mut out, 42);
        encode_stat(&mut out, "pid", 7);
        assert_eq!(
            out,
            b"VALUE k 3 2 9\r\nxy\r\nVALUE k 0 0\r\n\r\n42\r\nSTAT pid 7\r\n"
        );
    }

    /// `encode_value` appended to `out` against the same reply written with `format!`; and
    /// `encode_only_value` (into a copy of `out` with 8 more bytes of spare room) against that
    /// and `END`.
    fn check_value(out: &mut Vec<u8>, key: &[u8], flags: u32, value: &[u8], cas: Option<u64>) {
        let before = out.clone();
        let mut with_end = Vec::with_capacity(out.capacity() + 8);
        with_end.extend_from_slice(out);
        encode_value(out, key, flags, value, cas);
        encode_only_value(&mut with_end, key, flags, value, cas);
        let mut want = before;
        want.extend_from_slice(b"VALUE ");
        want.extend_from_slice(key);
        want.extend_from_slice(format!(" {flags} {}", value.len()).as_bytes());
        if let Some(cas) = cas {
            want.extend_from_slice(format!(" {cas}").as_bytes());
        }
        want.extend_from_slice(b"\r\n");
        want.extend_from_slice(value);
        want.extend_from_slice(b"\r\n");
        assert!(*out == want, "key {} flags {flags} cas {cas:?}", key.len());
        want.extend_from_slice(b"END\r\n");
        assert!(
            with_end == want,
            "with END: key {} flags {flags}",
            key.len()
        );
    }

    #[test]
    fn values_encode_byte_for_byte() {
        // Every key length a key copy distinguishes, with distinct bytes so a misplaced one shows.
        let long: Vec<u8> = (0..400u32).map(|i| b'!' + (i % 90) as u8).collect();
        let mut out = Vec::new();
        for len in 0..=300 {
            check_value(&mut out, &long[..len], 0, b"v", None);
            check_value(&mut out, b"k", 1, &long[7..7 + len], Some(len as u64));
            out.clear();
        }
        let big = vec![b'v'; 100_001];
        for value_len in [999, 1000, 9999, 10_000, 65_536, 100_001] {
            check_value(&mut out, b"key", 7, &big[..value_len], None);
        }
        // Numbers at every width and its edges, through flags (u32) and CAS (u64).
        let mut edges = vec![0, u64::from(u32::MAX), u64::MAX, u64::MAX - 1];
        for digits in 1..=19 {
            let power = 10u64.pow(digits);
            edges.extend([power - 1, power, power + 1, power / 2 * 3]);
        }
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            edges.push(state >> (state % 64));
        }
        for &n in &edges {
            check_value(&mut out, b"key:1", n as u32, b"xy", Some(n));
            // From an empty buffer, so that every size grows it first.
            check_value(&mut Vec::new(), b"k", n as u32, b"", Some(n));
            if out.len() > 1 << 16 {
                out.clear();
            }
        }
        for n in 0..100_000u32 {
            check_value(&mut out, b"k", n, b"", Some(u64::from(n) * 1001));
            if out.len() > 1 << 16 {
                out.clear();
            }
        }
    }

    #[test]
    fn values_fit_the_room_reserved_for_them() {
        // Spare capacity of exactly the reservation, so no growth: the widest numbers, and keys
        // and values around the copy widths. Run under valgrind a write past it is an error.
        for len in [0, 1, 3, 4, 8, 16, 17, 32, 33, 250] {
            let bytes = vec![b'b'; len];
            for spare in [0, 1, 7] {
                let mut out = Vec::with_capacity(spare + VALUE_HEADER_ROOM + 2 * len);
                out.resize(spare, b'x');
                check_value(&mut out, &bytes, u32::MAX, &bytes, Some(u64::MAX));
            }
        }
    }
}
