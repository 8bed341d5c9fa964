//! Wire formats: the text, meta and binary protocols, translating each request into a call of
//! the operations layer and encoding its answer, and the framing their serve loops share. No
//! sockets here: it must not import `transport` or `startup`.

pub mod binary;
pub mod framing;
pub mod meta;
pub mod text;
