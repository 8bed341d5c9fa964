//! Feeds arbitrary bytes to the meta command parser line by line, as the server will: split at
//! "\r\n", parse, take the `ms` data block, encode a reply with every return flag. Must never
//! panic; decoded keys stay within memcached's limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_proto::ascii;
use tern_proto::meta::{self, Code, Command, ItemInfo};

fuzz_target!(|data: &[u8]| {
    let mut buf = data;
    let mut out = Vec::new();
    while let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
        let line = &buf[..end];
        buf = &buf[end + 2..];
        match meta::parse(line) {
            Ok(req) => {
                assert!(req.key.bytes().len() <= meta::MAX_KEY_LEN);
                if let Command::Set { data_len, .. } = req.command {
                    match ascii::data_block(buf, data_len) {
                        None => return,
                        Some(Ok(value)) => {
                            assert_eq!(value.len(), data_len);
                            buf = &buf[data_len + 2..];
                        }
                        Some(Err(())) => {
                            meta::write_error(&mut out, meta::ErrorReply::BadDataChunk);
                            buf = &buf[data_len + 2..];
                            continue;
                        }
                    }
                }
                let item = ItemInfo {
                    cas: u64::MAX,
                    ttl: Some(u32::MAX),
                    won: true,
                    stale: true,
                    win_sent_before: true,
                    ..ItemInfo::default()
                };
                for code in [Code::Value, Code::Stored, Code::Miss, Code::NotFound] {
                    meta::write_reply(&mut out, &req, code, Some(&item), line);
                    meta::write_reply(&mut out, &req, code, None, b"");
                }
                if req.command == Command::Debug {
                    meta::write_debug(&mut out, &req, &meta::DebugInfo::default());
                }
            }
            Err(e) => {
                meta::write_error(&mut out, e.reply);
                buf = &buf[e.swallow.min(buf.len())..];
            }
        }
    }
});
