//! Where an index entry points when its item is on flash: the flash bit, the address in
//! 8-byte units, and the spare bits of the key's hash beside it.

use crate::mechanics::error::StoreError;

/// Set in an index entry's location bits when the item is on flash.
pub(crate) const FLASH_BIT: u64 = 1 << 39;
/// Segments a heap may have when a flash tier is configured: their locations (segment + 1,
/// above 20 offset bits) must leave [`FLASH_BIT`] clear.
pub(crate) const MAX_RAM_SEGMENTS: usize = (1 << 19) - 2;
/// Flash addresses are kept in units of this many bytes.
pub(crate) const ALIGN: u64 = 8;

#[inline(always)]
pub(crate) fn is_flash(location: u64) -> bool {
    location & FLASH_BIT != 0
}

/// How a flash address and check bits share an index entry's 39 location bits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlashGeometry {
    addr_bits: u32,
    check_bits: u32,
}

impl FlashGeometry {
    pub(crate) fn of(total_bytes: u64) -> Result<FlashGeometry, StoreError> {
        let units = total_bytes.div_ceil(ALIGN).max(2);
        let addr_bits = 64 - (units - 1).leading_zeros();
        if addr_bits > 39 {
            return Err(StoreError::Flash(format!(
                "ext_path: {total_bytes} bytes of flash is more than an index entry can address (4 TiB)"
            )));
        }
        Ok(FlashGeometry {
            addr_bits,
            check_bits: 39 - addr_bits,
        })
    }

    /// The location bits of an item at flash address `addr` whose key hashed to `hash`.
    pub(crate) fn pack(&self, addr: u64, hash: u64) -> u64 {
        FLASH_BIT | ((self.check_of(hash) as u64) << self.addr_bits) | (addr / ALIGN)
    }

    pub(crate) fn addr_of(&self, location: u64) -> u64 {
        (location & ((1 << self.addr_bits) - 1)) * ALIGN
    }

    /// The check bits an entry for a key of this hash carries: bits 8 and up, clear of the
    /// shard (the low bits) and of the tag (the top 24).
    pub(crate) fn check_of(&self, hash: u64) -> u32 {
        ((hash >> 8) & ((1u64 << self.check_bits) - 1)) as u32
    }

    /// Whether the entry at `location` may be the key of this hash.
    pub(crate) fn may_be(&self, location: u64, hash: u64) -> bool {
        is_flash(location)
            && ((location >> self.addr_bits) & ((1u64 << self.check_bits) - 1)) as u32
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
    fn entries_carry_the_address_and_the_spare_bits_of_the_hash() {
        let g = FlashGeometry::of(4 << 30).unwrap();
        assert_eq!(g.check_bits(), 10);
        let hash = 0x1234_5678_9abc_def0;
        let packed = g.pack(4096 * 77 + 24, hash);
        assert!(is_flash(packed) && packed < 1 << 40);
        assert_eq!(g.addr_of(packed), 4096 * 77 + 24);
        assert!(g.may_be(packed, hash));
        assert!(!g.may_be(packed, hash ^ (1 << 8)));
        assert!(FlashGeometry::of(8 << 40).is_err());
    }
}
