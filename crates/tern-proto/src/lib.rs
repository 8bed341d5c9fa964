//! memcached's wire protocols: parse requests and encode replies (server side), encode requests
//! and parse replies (client side, for `tern bench`). No I/O: callers own the sockets and buffers.

pub mod ascii;
pub mod binary;
pub mod client;
pub mod meta;
