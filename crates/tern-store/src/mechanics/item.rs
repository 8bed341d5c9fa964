//! An item as laid out in a segment: a 4-to-23-byte header, the key, the value. No padding and
//! no per-item CAS, time stamp or pointers: the CAS comes from where the item lives (see
//! `Segments::cas_of`), the TTL group from the segment, and the hash index points at the item.
//!
//! ```text
//! byte 0      key length (1..=250)
//! byte 1      bits: value-length width (2 bits), has-flags, has-expiry, fetched, stale,
//!             win-token-sent, referenced (read since written or last merged)
//! byte 2      top bit: has an explicit CAS; low 7 bits: last access, as a coarse age relative
//!             to the segment's creation (`encode_age`)
//! 3..         value length, 1-4 bytes little-endian
//!             client flags, 4 bytes, only when non-zero
//!             CAS, 8 bytes, only for an item rewritten by a touch (it keeps its unique),
//!                 one whose CAS the client set (meta's `E`), and a large item
//!             expiry (unix seconds), 4 bytes, only when the item has a deadline
//!             key, value
//! ```

use super::types::Expiry;

/// memcached's KEY_MAX_LENGTH: the longest key an item holds (its length is one byte).
pub(crate) const MAX_KEY: usize = 250;

pub(crate) const VLEN_WIDTH: u8 = 0b11;
pub(crate) const HAS_FLAGS: u8 = 1 << 2;
pub(crate) const HAS_EXPIRY: u8 = 1 << 3;
pub(crate) const FETCHED: u8 = 1 << 4;
pub(crate) const STALE: u8 = 1 << 5;
pub(crate) const WIN_SENT: u8 = 1 << 6;
pub(crate) const REFERENCED: u8 = 1 << 7;
/// The bits that say what happened to the item rather than how it is laid out.
pub(crate) const STATE_BITS: u8 = FETCHED | STALE | WIN_SENT | REFERENCED;

/// In the access byte: the item carries its CAS (see the layout above).
const HAS_CAS: u8 = 0x80;
const AGE_MASK: u8 = 0x7f;
const BITS: usize = 1;
const ACCESS: usize = 2;
const VLEN: usize = 3;

/// A parsed item header.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub(crate) bits: u8,
    pub(crate) access: u8,
    pub(crate) key_len: usize,
    pub(crate) value_len: usize,
    pub(crate) flags: u32,
    /// 0 = never.
    pub(crate) expiry: u32,
    /// The CAS kept from before a rewrite; otherwise the item's place gives it.
    pub(crate) cas: Option<u64>,
    pub(crate) len: usize,
}

impl Header {
    pub(crate) fn size(&self) -> usize {
        self.len + self.key_len + self.value_len
    }

    pub(crate) fn key<'a>(&self, item: &'a [u8]) -> &'a [u8] {
        &item[self.len..self.len + self.key_len]
    }

    pub(crate) fn value_range(&self) -> std::ops::Range<usize> {
        self.len + self.key_len..self.size()
    }

    /// Where the CAS field is, when the item has one.
    pub(crate) fn cas_at(&self) -> Option<usize> {
        let expiry = if self.bits & HAS_EXPIRY != 0 { 4 } else { 0 };
        self.cas.map(|_| self.len - expiry - 8)
    }

    /// Where the expiry field is, when the item has one.
    pub(crate) fn expiry_at(&self) -> Option<usize> {
        (self.bits & HAS_EXPIRY != 0).then(|| self.len - 4)
    }

    pub(crate) fn is_expired_at(&self, now: u32) -> bool {
        Expiry(self.expiry).is_expired_at(now)
    }

    pub(crate) fn has(&self, bit: u8) -> bool {
        self.bits & bit != 0
    }
}

fn vlen_width(value_len: usize) -> usize {
    match value_len {
        0..=0xff => 1,
        0x100..=0xffff => 2,
        0x1_0000..=0xff_ffff => 3,
        _ => 4,
    }
}

/// Header bytes for an item with these fields; `expiry_field` keeps room for a deadline even
/// when there is none yet (large items, so a touch can set one in place).
pub(crate) fn header_len(value_len: usize, flags: u32, expiry_field: bool, cas: bool) -> usize {
    VLEN + vlen_width(value_len)
        + if flags != 0 { 4 } else { 0 }
        + if cas { 8 } else { 0 }
        + if expiry_field { 4 } else { 0 }
}

/// Bytes of a large item (one taking a run of segments): it always has room for a deadline (so
/// a touch never moves it) and a CAS (so a change made in place can take a given one, meta's
/// `E`; 8 bytes on an item larger than a segment).
pub(crate) fn large_item_size(key_len: usize, value_len: usize, flags: u32) -> usize {
    item_size(key_len, value_len, flags, true, true)
}

pub(crate) fn item_size(
    key_len: usize,
    value_len: usize,
    flags: u32,
    expiry_field: bool,
    cas: bool,
) -> usize {
    header_len(value_len, flags, expiry_field, cas) + key_len + value_len
}

/// Writes header, key and the value (given in up to two parts, for append/prepend) at the
/// start of `buf`; `keep_bits` carries state bits over from an older version. An `expiry` of
/// 0 (never) is written as a field only when `expiry_field` is set. Returns nothing: the caller
/// knows the sizes it reserved (returning the header went through memory, ~30 instructions).
#[allow(clippy::too_many_arguments)]
pub(crate) fn write(
    buf: &mut [u8],
    key: &[u8],
    flags: u32,
    expiry: u32,
    expiry_field: bool,
    cas: Option<u64>,
    parts: [&[u8]; 2],
    keep_bits: u8,
    access: u8,
) {
    debug_assert!(expiry == 0 || expiry_field);
    let value_len = parts[0].len() + parts[1].len();
    let width = vlen_width(value_len);
    let mut bits = (width as u8 - 1) | (keep_bits & STATE_BITS);
    buf[0] = key.len() as u8;
    buf[ACCESS] = (access & AGE_MASK) | if cas.is_some() { HAS_CAS } else { 0 };
    let vlen = (value_len as u32).to_le_bytes();
    if key.len() + value_len >= vlen.len() {
        // All four bytes in one store, not a `memcpy` call of 1-4: those past the field lie
        // within the item, and the fields, key and value written next cover them.
        buf[VLEN..VLEN + 4].copy_from_slice(&vlen);
    } else {
        buf[VLEN..VLEN + width].copy_from_slice(&vlen[..width]);
    }
    let mut at = VLEN + width;
    if flags != 0 {
        bits |= HAS_FLAGS;
        buf[at..at + 4].copy_from_slice(&flags.to_le_bytes());
        at += 4;
    }
    if let Some(cas) = cas {
        buf[at..at + 8].copy_from_slice(&cas.to_le_bytes());
        at += 8;
    }
    if expiry_field {
        bits |= HAS_EXPIRY;
        buf[at..at + 4].copy_from_slice(&expiry.to_le_bytes());
        at += 4;
    }
    buf[BITS] = bits;
    buf[at..at + key.len()].copy_from_slice(key);
    at += key.len();
    buf[at..at + parts[0].len()].copy_from_slice(parts[0]);
    at += parts[0].len();
    // Empty but for append and prepend: no `memcpy` call for nothing.
    if !parts[1].is_empty() {
        buf[at..at + parts[1].len()].copy_from_slice(parts[1]);
    }
}

/// Header bytes of the item at the start of `item`, from its first three bytes: where its key
/// starts, all a lookup needs to compare keys before the rest of the header is decoded.
#[inline(always)]
pub(crate) fn parsed_len(item: &[u8]) -> usize {
    let [_, bits, access] = *item.first_chunk().expect("an item's first three bytes");
    VLEN + (bits & VLEN_WIDTH) as usize
        + 1
        + if bits & HAS_FLAGS != 0 { 4 } else { 0 }
        + if access & HAS_CAS != 0 { 8 } else { 0 }
        + if bits & HAS_EXPIRY != 0 { 4 } else { 0 }
}

/// Whether the item at the start of `item` has the key `key`.
#[inline(always)]
pub(crate) fn has_key(item: &[u8], key: &[u8]) -> bool {
    // One bounds check for the three bytes `parsed_len` reads too.
    let Some(&[key_len, _, _]) = item.first_chunk() else {
        return false;
    };
    if key_len as usize != key.len() {
        return false;
    }
    let at = parsed_len(item);
    item.get(at..at + key.len())
        .is_some_and(|stored| same_bytes(stored, key))
}

/// `a == b`, in 8-byte words: keys are short, and comparing them here costs less than a
/// call to memcmp (a get's key of 12 bytes: two words).
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    // The last word overlaps the one before when `n` is not a multiple of 8.
    if n <= 16 {
        return (word(a, 0) ^ word(b, 0)) | (word(a, n - 8) ^ word(b, n - 8)) == 0;
    }
    let mut at = 0;
    while at + 8 < n {
        if word(a, at) != word(b, at) {
            return false;
        }
        at += 8;
    }
    word(a, n - 8) == word(b, n - 8)
}

/// The header of the item at the start of `item`. Inlined: a read decodes only the fields
/// it uses (a get never the kept CAS).
#[inline(always)]
pub(crate) fn parse(item: &[u8]) -> Header {
    let bits = item[BITS];
    let access = item[ACCESS];
    let width = (bits & VLEN_WIDTH) as usize + 1;
    let value_len = match item.get(VLEN..VLEN + 4) {
        // Four bytes at once, the ones past the field masked off: no copy of 1-4 bytes.
        Some(raw) => {
            u32::from_le_bytes(raw.try_into().expect("4 bytes")) & (u32::MAX >> (32 - 8 * width))
        }
        // A short item at the very end of its segment.
        None => {
            let mut raw = [0u8; 4];
            raw[..width].copy_from_slice(&item[VLEN..VLEN + width]);
            u32::from_le_bytes(raw)
        }
    };
    let field = |at: usize, bytes: usize| &item[at..at + bytes];
    let mut at = VLEN + width;
    let mut flags = 0;
    if bits & HAS_FLAGS != 0 {
        flags = u32::from_le_bytes(field(at, 4).try_into().expect("4 bytes"));
        at += 4;
    }
    let mut cas = None;
    if access & HAS_CAS != 0 {
        cas = Some(u64::from_le_bytes(
            field(at, 8).try_into().expect("8 bytes"),
        ));
        at += 8;
    }
    let mut expiry = 0;
    if bits & HAS_EXPIRY != 0 {
        expiry = u32::from_le_bytes(field(at, 4).try_into().expect("4 bytes"));
        at += 4;
    }
    Header {
        bits,
        access: access & AGE_MASK,
        key_len: item[0] as usize,
        value_len: value_len as usize,
        flags,
        expiry,
        cas,
        len: at,
    }
}

/// `parse`, for bytes not known to hold an item (a restore): `None` unless the header and
/// the key and value it announces lie within `item`, with a key of 1 to 250 bytes.
pub(crate) fn parse_checked(item: &[u8]) -> Option<Header> {
    if item.len() < VLEN + 1 || item.len() < parsed_len(item) {
        return None;
    }
    let h = parse(item);
    (h.key_len > 0 && h.key_len <= MAX_KEY && h.size() <= item.len()).then_some(h)
}

pub(crate) fn set_bits(item: &mut [u8], set: u8, clear: u8) {
    item[BITS] = (item[BITS] & !clear) | set;
}

pub(crate) fn set_access(item: &mut [u8], access: u8) {
    item[ACCESS] = (item[ACCESS] & HAS_CAS) | (access & AGE_MASK);
}

/// Seconds of age in 7 bits: exact below 32 s, then 4 steps per doubling (within 25%),
/// saturating after about 8 years. Used for "last access", which memcached's meta `l` flag
/// reports in seconds and which may be coarse.
pub(crate) fn encode_age(secs: u32) -> u8 {
    if secs < 32 {
        return secs as u8;
    }
    let exp = 31 - secs.leading_zeros(); // >= 5
    let mantissa = (secs >> (exp - 2)) & 3;
    (32 + (exp - 5) * 4 + mantissa).min(AGE_MASK as u32) as u8
}

pub(crate) fn decode_age(code: u8) -> u32 {
    if code < 32 {
        return code as u32;
    }
    let exp = (code as u32 - 32) / 4 + 5;
    let mantissa = (code as u32 - 32) % 4;
    (4 + mantissa) << (exp - 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_header_shape() {
        for (value_len, flags, expiry) in [
            (0, 0, 0),
            (32, 0, 0),
            (300, 7, 0),
            (70_000, 0, 99),
            (20_000_000, u32::MAX, u32::MAX),
        ] {
            let key = b"some-key";
            let value = vec![b'v'; value_len];
            let cas = (flags == 7).then_some(u64::MAX - 3);
            let size = item_size(key.len(), value_len, flags, expiry != 0, cas.is_some());
            let mut buf = vec![0; size + 3];
            write(
                &mut buf,
                key,
                flags,
                expiry,
                expiry != 0,
                cas,
                [&value, &[]],
                FETCHED,
                9,
            );
            let h = parse(&buf);
            assert_eq!(h.size(), size);
            assert_eq!((h.key_len, h.value_len), (key.len(), value_len));
            assert_eq!(h.key(&buf), key);
            assert_eq!(&buf[h.value_range()], &value[..]);
            assert_eq!(
                (h.flags, h.expiry, h.access, h.cas),
                (flags, expiry, 9, cas)
            );
            set_access(&mut buf, 100);
            assert_eq!((parse(&buf).access, parse(&buf).cas), (100, cas));
            assert!(h.has(FETCHED));
        }
        // Items too short for the value length's four-byte store, at the very end of a buffer.
        for value in [&b""[..], b"v", b"vv", b"vvv"] {
            let size = item_size(1, value.len(), 0, false, false);
            let mut buf = vec![0xee; size];
            write(&mut buf, b"k", 0, 0, false, None, [value, &[]], 0, 0);
            let h = parse(&buf);
            assert_eq!((h.key(&buf), &buf[h.value_range()]), (&b"k"[..], value));
        }
        assert_eq!(item_size(10, 32, 0, false, false), 10 + 32 + 4);
        assert_eq!(encode_age(u32::MAX), 127);
    }

    #[test]
    fn keys_compare_equal_only_when_every_byte_is() {
        for len in 1..=40 {
            let key: Vec<u8> = (0..len as u8).map(|i| b'a' + i % 26).collect();
            // Every header shape, so the key is found after each.
            let (flags, with_expiry, cas) = (len as u32 % 2 * 7, len % 3 == 0, len % 5 == 0);
            let size = item_size(len, 3, flags, with_expiry, cas);
            let mut buf = vec![0; size];
            let expiry = if with_expiry { 99 } else { 0 };
            let cas = cas.then_some(5);
            write(
                &mut buf,
                &key,
                flags,
                expiry,
                with_expiry,
                cas,
                [b"val", &[]],
                0,
                0,
            );
            assert!(has_key(&buf, &key));
            assert!(!has_key(&buf, &key[..len - 1]));
            for at in 0..len {
                let mut other = key.clone();
                other[at] ^= 0x20;
                assert!(!has_key(&buf, &other), "{len} {at}");
            }
        }
    }

    #[test]
    fn age_codes_are_monotonic_and_close() {
        let mut last = 0;
        for secs in (0..100_000u32).chain([1 << 20, 1 << 28]) {
            let code = encode_age(secs);
            assert!(code >= last);
            last = code;
            let back = decode_age(code);
            assert!(back <= secs && (secs - back) as u64 * 4 <= secs as u64 + 4);
        }
    }
}
