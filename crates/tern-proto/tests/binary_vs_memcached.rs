//! Differential test of the binary parser against Debian's memcached (1.6.18): generated
//! frames, well-formed and not, go to a real memcached, each on a fresh connection followed by
//! a Noop. Where tern's parser rejects a frame, memcached must answer the same status (and
//! close the connection when tern says so); where tern accepts it, memcached must not answer
//! `Invalid arguments` or `Unknown command`.
//!
//! Left out of the generator, as deliberate differences: Verbosity (memcached 1.6 dropped it),
//! Touch/GAT/Stat frames with bytes beyond their key and extras (memcached reads those bytes as
//! the next request; tern refuses the frame), and unknown opcodes with a body (memcached skips
//! `body_len` bytes *after* the key and extras, eating into the next request; tern skips the
//! frame).

use tern_proto::binary::{self, Opcode, Parsed, Status, Then};
use tern_testkit::binary::{frame, Reply};
use tern_testkit::{Conn, Rng, ServerProcess};

const OPCODES: &[u8] = &[
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1c, 0x1d, 0x1e, 0x23, 0x24,
    0x40, 0x99,
];

/// Opaque of the Noop that ends each exchange, unlike the generated frames'.
const END_OPAQUE: u32 = 0xfeed_face;

fn random_frame(rng: &mut Rng) -> Vec<u8> {
    let opcode = OPCODES[rng.below(OPCODES.len() as u64) as usize];
    // Mostly the lengths each opcode wants, sometimes others.
    let extras_len = match rng.below(4) {
        0 => [0, 4, 8, 20][rng.below(4) as usize],
        _ => match opcode {
            0x01..=0x03 | 0x11..=0x13 => 8,
            0x05 | 0x06 | 0x15 | 0x16 => 20,
            0x08 | 0x18 | 0x1c..=0x1e | 0x23 | 0x24 => 4,
            _ => 0,
        },
    };
    let key_len = match rng.below(12) {
        0 => 0,
        1 => 250,
        2 => 251,
        _ => 1 + rng.below(10) as usize,
    };
    let value_len = match rng.below(3) {
        0 => rng.below(20) as usize,
        _ => 0,
    };
    let extras: Vec<u8> = (0..extras_len).map(|_| rng.next_u64() as u8).collect();
    let key = vec![b'k'; key_len];
    let value = vec![b'1'; value_len];
    frame(opcode, &extras, &key, &value, 0x1234_5678)
}

/// Reads response packets until the Noop's (or EOF). Returns the statuses and whether the
/// server closed the connection.
fn responses(conn: &mut Conn) -> (Vec<(u8, u16)>, bool) {
    let mut got = Vec::new();
    loop {
        let Ok(reply) = Reply::read(&mut conn.stream) else {
            return (got, true);
        };
        if reply.opaque == END_OPAQUE {
            return (got, false);
        }
        got.push((reply.opcode, reply.status));
        if reply.opcode == Opcode::Quit as u8 || reply.opcode == Opcode::QuitQ as u8 {
            return (got, true);
        }
    }
}

fn skipped(opcode: u8, f: &[u8]) -> bool {
    let key = u16::from_be_bytes([f[2], f[3]]) as usize;
    let extras = f[4] as usize;
    let body = f.len() - 24;
    let touch_like = matches!(opcode, 0x1c | 0x1d | 0x1e | 0x23 | 0x24);
    let unknown = Opcode::from_u8(opcode).is_none();
    // memcached swallows an unknown command's body_len bytes *after* its key and extras,
    // eating the next request: compare only bodiless unknown commands.
    (unknown && body != 0)
        || (touch_like && extras == 4 && key != 0 && body != key + 4)
        || (opcode == 0x10 && extras == 0 && body != key)
}

#[test]
fn binary_parser_agrees_with_memcached_on_generated_frames() {
    let server = ServerProcess::memcached(&[]);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let noop = frame(Opcode::Noop as u8, &[], &[], &[], END_OPAQUE);
    let (mut accepted, mut rejected) = (0, 0);
    for _ in 0..3000 {
        let f = random_frame(&mut rng);
        let opcode = f[1];
        if skipped(opcode, &f) {
            continue;
        }
        let mut conn = server.connect();
        let mut request = f.clone();
        request.extend_from_slice(&noop);
        conn.send(&request);
        let (got, closed) = responses(&mut conn);
        match binary::parse_request(&f, 1024 * 1024) {
            Parsed::Reject(r) => {
                rejected += 1;
                let status = r.status.expect("frames start with the request magic") as u16;
                assert_eq!(got.first(), Some(&(opcode, status)), "frame {f:?}");
                if r.then == Then::Close {
                    assert!(closed, "memcached kept the connection open after {f:?}");
                }
            }
            Parsed::Request(req, used) => {
                accepted += 1;
                assert_eq!(used, f.len());
                for (_, status) in &got {
                    assert!(
                        *status != Status::InvalidArguments as u16
                            && *status != Status::UnknownCommand as u16,
                        "tern accepts {req:?}, memcached says {got:?}"
                    );
                }
                if !matches!(req.opcode, Opcode::Quit | Opcode::QuitQ) {
                    assert!(!closed, "memcached closed after {f:?}");
                }
            }
            Parsed::Incomplete(n) => panic!("whole frame {f:?} reported incomplete ({n})"),
        }
    }
    assert!(
        accepted > 300 && rejected > 300,
        "accepted {accepted}, rejected {rejected}"
    );
}
