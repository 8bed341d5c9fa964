//! Feeds arbitrary bytes to the binary protocol parser as a connection would: parse, act on
//! the result, parse again from where it said, and encode a reply for every request. The
//! parser must never panic, never claim more bytes than it was given, and always make
//! progress or ask for more.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_proto::binary::{self, Command, Parsed, Status, Then};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the value limit so the too-large path is reached with small inputs.
    let Some((&limit, mut buf)) = data.split_first() else {
        return;
    };
    let max_value = limit as usize * 4;
    let mut out = Vec::new();
    loop {
        match binary::parse_request(buf, max_value) {
            Parsed::Incomplete(need) => {
                assert!(need > buf.len(), "incomplete must ask for more than it has");
                break;
            }
            Parsed::Request(req, used) => {
                assert!(used >= binary::HEADER_LEN && used <= buf.len());
                reply(&mut out, &req);
                buf = &buf[used..];
            }
            Parsed::Reject(rej) => {
                if let Some(status) = rej.status {
                    binary::write_error(&mut out, rej.opcode, rej.opaque, status);
                }
                match rej.then {
                    Then::Close => break,
                    Then::Skip(n) => {
                        assert!(n >= binary::HEADER_LEN);
                        buf = &buf[n.min(buf.len())..];
                    }
                }
            }
        }
    }
});

fn reply(out: &mut Vec<u8>, req: &binary::Request<'_>) {
    let op = req.opcode;
    match req.command {
        Command::Get { key, with_key } | Command::GetAndTouch { key, with_key, .. } => {
            binary::write_value(
                out,
                op,
                req.opaque,
                req.cas,
                0,
                with_key.then_some(key),
                key,
            );
            binary::write_miss(out, op, req.opaque, with_key.then_some(key));
        }
        Command::Arithmetic { initial, .. } => {
            binary::write_counter(out, op, req.opaque, req.cas, initial)
        }
        Command::Stat { key } => {
            binary::write_stat(out, req.opaque, &String::from_utf8_lossy(key), key.len());
            binary::write_stat_end(out, req.opaque);
        }
        Command::Version => binary::write_version(out, req.opaque, "fuzz"),
        _ => {
            if !binary::reply_suppressed(op, Status::Success) {
                binary::write_ok(out, op, req.opaque, req.cas);
            }
        }
    }
}
