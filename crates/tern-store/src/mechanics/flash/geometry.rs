//! Where an index entry points when its item is on flash: the flash bit, the address in
//! 8-byte units, the generation of its page when it was written, and the spare bits of the
//! key's hash beside them.

use crate::mechanics::error::StoreError;

/// Set in an index entry's location bits when the item is on flash.
pub(crate) const FLASH_BIT: u64 = 1 << 39;
/// Segments a heap may have when a flash tier is configured: their locations (segment + 1,
/// above 20 offset bits) must leave [`FLASH_BIT`] clear.
pub(crate) const MAX_RAM_SEGMENTS: usize = (1 << 19) - 2;
/// Flash addresses are kept in units of this many bytes.
pub(crate) const ALIGN: u64 = 8;
/// Bits of a page's generation an entry keeps: one tells an evicted page's entries from its
/// next life's, and the index is swept before the page is evicted a second time (about once
/// per lap of the flash, `Flash::must_sweep_before_evicting`). Each bit more would put the
/// sweeps a lap further apart, and take a check bit, which large pools need more.
const GENERATION_BITS: u32 = 1;
/// The location bits below [`FLASH_BIT`].
const LOCATION_BITS: u32 = 39;

#[inline(always)]
pub(crate) fn is_flash(location: u64) -> bool {
    location & FLASH_BIT != 0
}

/// How a flash address, its page's generation and check bits share an index entry's 39
/// location bits (from the bottom: address, generation, check).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlashGeometry {
    addr_bits: u32,
    generation_bits: u32,
    check_bits: u32,
}

impl FlashGeometry {
    pub(crate) fn of(total_bytes: u64) -> Result<FlashGeometry, StoreError> {
        let units = total_bytes.div_ceil(ALIGN).max(2);
        let addr_bits = 64 - (units - 1).leading_zeros();
        if addr_bits >= LOCATION_BITS {
            return Err(StoreError::Flash(format!(
                "ext_path: {total_bytes} bytes of flash is more than an index entry can address (2 TiB)"
            )));
        }
        let generation_bits = GENERATION_BITS.min(LOCATION_BITS - addr_bits);
        Ok(FlashGeometry {
            addr_bits,
            generation_bits,
            check_bits: LOCATION_BITS - addr_bits - generation_bits,
        })
    }

    /// The location bits of an item at flash address `addr`, in a page of generation
    /// `generation`, whose key hashed to `hash`.
    pub(crate) fn pack(&self, addr: u64, generation: u32, hash: u64) -> u64 {
        let generation = u64::from(generation) & ((1 << self.generation_bits) - 1);
        FLASH_BIT
            | ((self.check_of(hash) as u64) << (self.addr_bits + self.generation_bits))
            | (generation << self.addr_bits)
            | (addr / ALIGN)
    }

    pub(crate) fn addr_of(&self, location: u64) -> u64 {
        (location & ((1 << self.addr_bits) - 1)) * ALIGN
    }

    /// The generation bits the entry at `location` was written with.
    pub(crate) fn generation_of(&self, location: u64) -> u32 {
        ((location >> self.addr_bits) & ((1 << self.generation_bits) - 1)) as u32
    }

    /// A whole index slot (or location) with its generation bits cleared: how a warm
    /// restart saves an entry, its page restarting at generation 0.
    pub(crate) fn of_generation_zero(&self, slot: u64) -> u64 {
        slot & !(((1u64 << self.generation_bits) - 1) << self.addr_bits)
    }

    /// Whether two page generations look the same in an entry.
    pub(crate) fn same_generation(&self, a: u32, b: u32) -> bool {
        (a ^ b) & ((1 << self.generation_bits) - 1) == 0
    }

    /// How many generations of a page entries tell apart.
    pub(crate) fn generations(&self) -> u32 {
        1 << self.generation_bits
    }

    /// The check bits an entry for a key of this hash carries: bits 8 and up, clear of the
    /// shard (the low bits) and of the tag (the top 24).
    pub(crate) fn check_of(&self, hash: u64) -> u32 {
        ((hash >> 8) & ((1u64 << self.check_bits) - 1)) as u32
    }

    /// Whether the entry at `location` may be the key of this hash.
    pub(crate) fn may_be(&self, location: u64, hash: u64) -> bool {
        is_flash(location)
            && ((location >> (self.addr_bits + self.generation_bits))
                & ((1u64 << self.check_bits) - 1)) as u32
                == self.check_of(hash)
    }

    #[cfg(test)]
    fn check_bits(&self) -> u32 {
        self.check_bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_carry_the_address_the_generation_and_the_spare_bits_of_the_hash() {
        let g = FlashGeometry::of(4 << 30).unwrap();
        assert_eq!((g.check_bits(), g.generations()), (9, 2));
        let hash = 0x1234_5678_9abc_def0;
        let packed = g.pack(4096 * 77 + 24, 13, hash);
        assert!(is_flash(packed) && packed < 1 << 40);
        assert_eq!(g.addr_of(packed), 4096 * 77 + 24);
        assert_eq!(g.generation_of(packed), 1);
        assert!(g.same_generation(g.generation_of(packed), 13));
        assert!(!g.same_generation(g.generation_of(packed), 14));
        assert!(g.may_be(packed, hash));
        assert!(!g.may_be(packed, hash ^ (1 << 8)));
        // The largest flash keeps one generation bit and no check bits.
        let largest = FlashGeometry::of(2 << 40).unwrap();
        assert_eq!((largest.check_bits(), largest.generations()), (0, 2));
        assert!(FlashGeometry::of((2 << 40) + 8).is_err());
    }
}
