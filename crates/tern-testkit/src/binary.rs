//! memcached's binary protocol as a test client writes and reads it, independent of
//! `tern_proto::binary` (the code under test).

use std::io::{self, Read};

/// A request frame: the 24-byte header (magic 0x80, no data type, vbucket 0, CAS 0), then
/// extras, key and value.
pub fn frame(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], opaque: u32) -> Vec<u8> {
    let mut f = vec![0x80, opcode];
    f.extend_from_slice(&(key.len() as u16).to_be_bytes());
    f.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    f.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    f.extend_from_slice(&opaque.to_be_bytes());
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(extras);
    f.extend_from_slice(key);
    f.extend_from_slice(value);
    f
}

/// One response packet, its header fields decoded.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    pub magic: u8,
    pub opcode: u8,
    pub status: u16,
    pub opaque: u32,
    pub cas: u64,
    pub extras: Vec<u8>,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

impl Reply {
    /// Reads one packet: its header, then the body the header announces. An error means no
    /// header came (closed or timed out); a header without its body, or with lengths that do
    /// not fit it, panics.
    pub fn read(from: &mut impl Read) -> io::Result<Reply> {
        let mut h = [0u8; 24];
        from.read_exact(&mut h)?;
        let key_len = u16::from_be_bytes([h[2], h[3]]) as usize;
        let extras_len = h[4] as usize;
        let body_len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        let mut body = vec![0u8; body_len];
        from.read_exact(&mut body)
            .unwrap_or_else(|e| panic!("no body after response header {h:?}: {e}"));
        let value_start = extras_len + key_len;
        assert!(value_start <= body_len, "lengths beyond the body in {h:?}");
        Ok(Reply {
            magic: h[0],
            opcode: h[1],
            status: u16::from_be_bytes([h[6], h[7]]),
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
            cas: u64::from_be_bytes(h[16..24].try_into().unwrap()),
            extras: body[..extras_len].to_vec(),
            key: body[extras_len..value_start].to_vec(),
            value: body[value_start..].to_vec(),
        })
    }
}
