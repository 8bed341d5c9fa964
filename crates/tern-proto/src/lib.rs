//! memcached's wire protocols: parse requests and encode replies (server side), encode requests
//! and parse replies (client side, for `tern bench`). No I/O: callers own the sockets and buffers.

/// The longest key memcached accepts (its KEY_MAX_LENGTH), in every wire format.
pub const KEY_MAX_LENGTH: usize = 250;

pub mod ascii;
pub mod binary;
pub mod client;
pub mod lookahead;
pub mod meta;

/// A fixed-seed xorshift generator for tests: reproducible inputs, no dependency.
#[cfg(test)]
pub(crate) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
