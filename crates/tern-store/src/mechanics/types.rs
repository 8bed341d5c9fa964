//! The values the API takes and gives: expiry, item views, outcomes and errors.

use super::clock::{UnixSecs, MAX_RELATIVE_EXPTIME};
use super::segments::{Loc, Segments};

/// When an item stops being served: never, or at a deadline in unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Expiry(pub(crate) UnixSecs);

impl Expiry {
    pub const NEVER: Expiry = Expiry(0);
    /// A deadline already past: the item is stored and never served (memcached's negative exptime).
    pub const EXPIRED: Expiry = Expiry(1);

    /// memcached's rule for an `exptime` field: 0 never expires, a negative value is already
    /// expired, up to 30 days is relative to `now`, anything larger is an absolute unix time.
    pub fn from_exptime(exptime: i64, now: UnixSecs) -> Expiry {
        if exptime == 0 {
            Expiry::NEVER
        } else if exptime < 0 {
            Expiry::EXPIRED
        } else if exptime > MAX_RELATIVE_EXPTIME {
            Expiry(exptime.min(UnixSecs::MAX as i64) as UnixSecs).max_past()
        } else {
            Expiry((now as i64 + exptime).min(UnixSecs::MAX as i64) as UnixSecs)
        }
    }

    /// Keeps 0 meaning "never" even for an absolute time of 0.
    fn max_past(self) -> Expiry {
        if self.0 == 0 {
            Expiry::EXPIRED
        } else {
            self
        }
    }

    /// The deadline, or `None` for never.
    pub fn deadline(self) -> Option<UnixSecs> {
        (self.0 != 0).then_some(self.0)
    }

    pub fn is_expired_at(self, now: UnixSecs) -> bool {
        self.0 != 0 && self.0 <= now
    }

    /// Seconds left at `now` (0 once expired), or `None` for never: meta's `t` flag.
    pub fn remaining(self, now: UnixSecs) -> Option<u32> {
        self.deadline().map(|d| d.saturating_sub(now))
    }
}

/// A stored item as a reader sees it, borrowed for the duration of the read.
#[derive(Clone, Copy, Debug)]
pub struct ItemView<'a> {
    pub value: &'a [u8],
    pub flags: u32,
    /// Read by [`ItemView::cas`] only when asked: a plain get never needs it.
    pub(crate) cas: CasSource<'a>,
    pub expiry: Expiry,
    /// Fetched before this read since it was stored (meta's `h`).
    pub fetched: bool,
    /// Last access before this read, in unix seconds; coarse: exact for 32 s after the
    /// item's segment was opened, then within 25% of the segment's age, and a plain get renews
    /// it only once it is a minute old, as memcached does (meta's `l`).
    pub last_access: UnixSecs,
    /// Marked stale by `Store::invalidate` (meta's `X`).
    pub stale: bool,
    /// A win token was already handed out for this item (meta's `Z`).
    pub win_sent: bool,
}

impl ItemView<'_> {
    /// The item's CAS unique.
    #[inline]
    pub fn cas(&self) -> u64 {
        self.cas.segs.cas_of(self.cas.loc, self.cas.kept)
    }
}

/// Where an [`ItemView`]'s CAS unique comes from: the one the item kept through a rewrite, else
/// its place's (a load from its segment's metadata, ~30 instructions a get without it saves).
#[derive(Clone, Copy)]
pub(crate) struct CasSource<'a> {
    pub(crate) segs: &'a Segments,
    pub(crate) loc: Loc,
    pub(crate) kept: Option<u64>,
}

impl std::fmt::Debug for CasSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.segs.cas_of(self.loc, self.kept))
    }
}

/// The per-item marks the meta protocol sets for invalidation and anti-stampede; a
/// `Store::get_marked` reader may change them and they are written
/// back with the read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    pub stale: bool,
    pub win_sent: bool,
}

/// Why a lookup found nothing; the server counts each kind (`get_misses`, `get_expired`,
/// `get_flushed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    NotFound,
    Expired,
    /// Invalidated by a `flush_all` (reported by the first lookup of the key's shard after the
    /// flush took effect; the shard is emptied then, so later lookups say `NotFound`).
    Flushed,
    /// Its index entry named flash that no longer holds it (its page evicted since, or the
    /// read failed). memcached counts such a get a hit and a read from extstore
    /// (`get_extstore`), then a miss from extstore; the client gets a miss.
    GoneFromFlash,
}

/// The write commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOp {
    Set,
    Add,
    Replace,
    /// Append to the item; with a CAS, only if the item's CAS is still that one (checked in
    /// the same locked step as the write, as memcached checks under its item lock).
    Append(Option<u64>),
    /// Prepend to the item; the CAS as for `Append`.
    Prepend(Option<u64>),
    /// Store only if the item's CAS is still this one.
    Cas(u64),
}

/// The outcome of a write, one per memcached reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// `STORED`, with the new version's CAS.
    Stored { cas: u64 },
    /// `NOT_STORED`: add on an existing key, replace/append/prepend on a missing one.
    NotStored,
    /// `EXISTS`: cas (or a CAS-conditioned append/prepend) with a stale unique.
    Exists,
    /// `NOT_FOUND`: cas on a missing key.
    NotFound,
    /// `SERVER_ERROR object too large for cache` (also a key longer than 250 bytes).
    TooLarge,
    /// `SERVER_ERROR out of memory storing object` (eviction off and the heap full).
    OutOfMemory,
}

/// incr/decr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    Incr,
    Decr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArithError {
    #[error("NOT_FOUND")]
    NotFound,
    /// The item's CAS is not the one the request expected.
    #[error("EXISTS")]
    Exists,
    #[error("CLIENT_ERROR cannot increment or decrement non-numeric value")]
    NonNumeric,
    #[error("SERVER_ERROR out of memory")]
    OutOfMemory,
}

/// A counter after incr/decr: the new number and the new version's CAS and expiry, so a reply
/// that shows them needs no second read (which another writer could overtake).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    pub value: u64,
    pub cas: u64,
    pub expiry: Expiry,
}

/// Why a delete or invalidate left the item alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No live item for the key.
    NotFound,
    /// The item's CAS is not the one the request expected.
    Exists,
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: UnixSecs = 1_700_000_000;

    #[test]
    fn expiry_relative_absolute_negative() {
        assert_eq!(Expiry::from_exptime(0, T0), Expiry::NEVER);
        assert!(Expiry::from_exptime(-1, T0).is_expired_at(T0));
        assert_eq!(Expiry::from_exptime(10, T0).deadline(), Some(T0 + 10));
        assert_eq!(
            Expiry::from_exptime(T0 as i64 + 99, T0).deadline(),
            Some(T0 + 99)
        );
    }
}

/// An item the store evicted to make room, as `Store::observe_evictions` reports it.
#[derive(Clone, Copy, Debug)]
pub struct EvictedItem<'a> {
    pub key: &'a [u8],
    /// Read since it was written.
    pub fetched: bool,
    pub expiry: Expiry,
    /// Unix seconds.
    pub last_access: UnixSecs,
}
