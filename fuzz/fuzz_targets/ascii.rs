//! Feeds arbitrary bytes to the ASCII parser as a connection does: find a line, parse it, take
//! a storage command's data block, go on after it. Must never panic and always make progress.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_proto::ascii::{self, Command, Frame};

fuzz_target!(|data: &[u8]| {
    let mut buf = data;
    // A get line may run long; the server bounds it by its read buffer.
    let max_line = 4096;
    loop {
        match ascii::parse(buf, max_line) {
            Frame::Incomplete | Frame::LineTooLong => break,
            Frame::Line { consumed, parsed } => {
                assert!(consumed > 0 && consumed <= buf.len());
                buf = &buf[consumed..];
                match parsed {
                    Ok(Command::Store { bytes, .. }) => match ascii::data_block(buf, bytes) {
                        None => break,
                        Some(block) => {
                            if let Ok(value) = block {
                                assert_eq!(value.len(), bytes);
                            }
                            buf = &buf[bytes + 2..];
                        }
                    },
                    Ok(Command::Get { keys, .. }) => {
                        for key in keys {
                            assert!(!key.is_empty());
                        }
                    }
                    Ok(_) => {}
                    Err(rejection) => assert!(rejection.reply.ends_with(b"\r\n")),
                }
            }
        }
    }
});
