//! A record: how an item lies on flash (CRC-32, length, page version, the item), checked when
//! read and when a page is read back.

use super::buf::{AlignedBuf, BLOCK};
use super::geometry::ALIGN;

pub(crate) const RECORD_HEADER: usize = 12;

/// A record read back from flash: the item's bytes.
pub(crate) struct Record {
    buf: AlignedBuf,
    start: usize,
    len: usize,
}

impl Record {
    pub(crate) fn item(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    /// Bytes of memory it holds: the blocks read.
    pub(crate) fn held(&self) -> usize {
        self.buf.len()
    }
}

/// What reading a record found.
pub(crate) enum ReadOutcome {
    Record(Record),
    /// The CRC did not match: damaged.
    Bad,
    /// The page's version did not match: a record from an earlier life of the page, whose
    /// entry the page's live count no longer counts.
    Stale,
}

/// The item length a record's header at `at` in `bytes` gives (0 marks padding).
pub(crate) fn record_len(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes")) as usize
}

/// The record at `skip` in `buf`, if its CRC and version hold.
pub(crate) fn check_record(buf: AlignedBuf, skip: usize, version: u32) -> ReadOutcome {
    let header = &buf[skip..skip + RECORD_HEADER];
    let crc = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")) as usize;
    let stored_version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    let end = skip + RECORD_HEADER + len;
    if end > buf.len() || crc32fast::hash(&buf[skip + 4..end]) != crc {
        return ReadOutcome::Bad;
    }
    if stored_version != version {
        return ReadOutcome::Stale;
    }
    ReadOutcome::Record(Record {
        buf,
        start: skip + RECORD_HEADER,
        len,
    })
}

/// The records of a page's chunk read back: `(offset in chunk, item bytes)` of each whose
/// CRC and version hold.
pub(crate) fn records_in(chunk: &[u8], version: u32) -> impl Iterator<Item = (usize, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || loop {
        if at + RECORD_HEADER > chunk.len() {
            return None;
        }
        let len = record_len(chunk, at);
        if len == 0 {
            at = (at + 1).next_multiple_of(BLOCK);
            continue;
        }
        let start = at;
        let end = at + RECORD_HEADER + len;
        if end > chunk.len() {
            return None;
        }
        at = end.next_multiple_of(ALIGN as usize);
        let crc = u32::from_le_bytes(chunk[start..start + 4].try_into().expect("4 bytes"));
        let stored_version =
            u32::from_le_bytes(chunk[start + 8..start + 12].try_into().expect("4 bytes"));
        if stored_version == version && crc32fast::hash(&chunk[start + 4..end]) == crc {
            return Some((start, &chunk[start + RECORD_HEADER..end]));
        }
    })
}
