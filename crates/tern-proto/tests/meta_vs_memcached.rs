//! Differential test of the meta parser against Debian's memcached (1.6.18), the reference
//! peer: thousands of generated command lines, valid and broken, go to a real memcached; for
//! each, tern's parser must reject exactly the lines memcached rejects, with the same error
//! line, and swallow the same data block (what memcached does next with the block shows it).
//!
//! Flags where tern deliberately follows newer memcached (`E`, `md x`) are left out of the
//! generator, and the error lines 1.6.45 (which tern follows) changed are mapped back to
//! 1.6.18's (`as_1_6_18`).

use tern_proto::meta::{self, Command};
use tern_testkit::{Rng, ServerProcess};

const VERBS: &[&str] = &[
    "mg", "ms", "md", "ma", "me", "mn", "mz", "mg", "ms", "ma", "md",
];
const KEYS: &[&str] = &[
    "foo", "Zm9v", "Zm9vYg==", "Zm9vYg", "YQ==", "====", "a", "cnt", "n1",
];
const FLAGS: &[&str] = &[
    "b",
    "c",
    "f",
    "h",
    "k",
    "l",
    "s",
    "t",
    "u",
    "v",
    "q",
    "I",
    "P",
    "L",
    "O1",
    "Oabc",
    "N0",
    "N30",
    "N-1",
    "Nx",
    "N",
    "R10",
    "Rx",
    "T0",
    "T60",
    "T-1",
    "T+5",
    "Tx",
    "T99999999999",
    "C0",
    "C123",
    "C-1",
    "Cx",
    "F0",
    "F7",
    "Fx",
    "F-1",
    "MS",
    "ME",
    "MA",
    "MP",
    "MR",
    "MI",
    "MD",
    "M+",
    "M-",
    "Mz",
    "M",
    "MSS",
    "J0",
    "J5",
    "Jx",
    "D1",
    "D0",
    "Dx",
    "D-2",
    "zz",
    "!",
    "S2",
    "a",
    "e",
    "g",
];

fn random_line(rng: &mut Rng) -> (String, Vec<u8>) {
    let verb = rng.pick(VERBS);
    let mut line = String::from(verb);
    if rng.below(20) != 0 {
        line.push(' ');
        match rng.below(30) {
            0 => line.push_str(&"k".repeat(250)),
            1 => line.push_str(&"k".repeat(251)),
            _ => line.push_str(rng.pick(KEYS)),
        }
    }
    let mut data = Vec::new();
    if verb == "ms" && rng.below(10) != 0 {
        let len = rng.pick(&["0", "2", "2", "2", "x", "-1", "2147483646"]);
        line.push(' ');
        line.push_str(len);
        if len == "2" {
            data = b"hi\r\n".to_vec();
        } else if len == "0" {
            data = b"\r\n".to_vec();
        }
    }
    let nflags = match rng.below(20) {
        0 => 16 + rng.below(4),
        _ => rng.below(5),
    };
    for _ in 0..nflags {
        line.push(' ');
        line.push_str(rng.pick(FLAGS));
    }
    // Make opaque long now and then: the limit is 32 bytes with the O.
    if rng.below(25) == 0 {
        line.push_str(if rng.below(2) == 0 { " O" } else { " Ox" });
        line.push_str(&"1".repeat(31));
    }
    (line, data)
}

/// What tern's parser predicts memcached sends for `line` followed by `data`: the error lines
/// when it rejects the line, `None` when the line is valid (memcached's reply then depends on
/// the store, and must simply not be an error).
fn predicted(line: &str, data: &[u8]) -> Option<String> {
    let mut out = String::new();
    match meta::parse(line.as_bytes()) {
        Ok(req) => {
            if let Command::Set { data_len, .. } = req.command {
                assert_eq!(
                    data.len(),
                    data_len + 2,
                    "{line}: generator sends the declared data"
                );
            }
            return None;
        }
        Err(e) => {
            out.push_str(as_1_6_18(line, e.reply).message());
            out.push_str("\r\n");
            if e.swallow == 0 && !data.is_empty() {
                // Not swallowed: memcached reads the data block as a command line.
                let data_line = &data[..data.len() - 2];
                let reply = match meta::parse(data_line) {
                    Err(e) => e.reply.message(),
                    Ok(_) => unreachable!("data blocks are never meta commands"),
                };
                out.push_str(reply);
                out.push_str("\r\n");
            } else {
                assert!(e.swallow == data.len() || data.is_empty(), "{line}: {e:?}");
            }
        }
    }
    Some(out)
}

/// What 1.6.18 says where 1.6.45 says `reply`: `ERROR` for a meta command without a key (1.6.45:
/// bad command line format), and one message for every flag error of `md` (1.6.45: the same
/// ones as `mg`'s).
fn as_1_6_18(line: &str, reply: meta::ErrorReply) -> meta::ErrorReply {
    use meta::ErrorReply::*;
    let words = line.split(' ').count();
    match reply {
        BadFormat if words == 1 && ["mg", "ms", "md", "ma"].contains(&line) => Error,
        OptionsTooLong | OpaqueTooLong => reply,
        // A key too long is refused before the flags are read.
        _ if line.starts_with("md ") && line.split(' ').nth(1).is_some_and(|k| k.len() <= 250) => {
            InvalidOrDuplicateFlag
        }
        _ => reply,
    }
}

#[test]
fn meta_parser_agrees_with_memcached_on_generated_lines() {
    let server = ServerProcess::memcached(&[]);
    let mut conn = server.connect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut valid = 0;
    let mut rejected = 0;
    let mut previous = String::new();
    for _ in 0..5000 {
        let (line, data) = random_line(&mut rng);
        let mut request = line.clone().into_bytes();
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(&data);
        // mn marks the end of this command's replies (quiet ones may send nothing).
        request.extend_from_slice(b"mn\r\n");
        let is_mn = matches!(meta::parse(line.as_bytes()), Ok(r) if r.command == Command::NoOp);
        let end: &[u8] = if is_mn { b"MN\r\nMN\r\n" } else { b"MN\r\n" };
        let got = conn.request(&request, end);
        let got = String::from_utf8_lossy(&got[..got.len() - 4]).into_owned();
        match predicted(&line, &data) {
            Some(want) => {
                rejected += 1;
                // memcached checks ma's opaque length only while writing the reply, after the
                // arithmetic (which it applies anyway, or reports non-numeric first); tern
                // refuses the line before touching the store.
                let opaque_late = format!("{}\r\n", meta::ErrorReply::NonNumeric.message());
                if line.starts_with("ma ") && got == opaque_late {
                    continue;
                }
                assert_eq!(got, want, "line {line:?} (after {previous:?})");
            }
            None => {
                valid += 1;
                // Only the store may still refuse a well-formed line.
                let store_error = meta::ErrorReply::NonNumeric.message();
                assert!(
                    !got.replace(store_error, "").contains("ERROR"),
                    "tern accepts {line:?}, memcached says {got:?} (after {previous:?})"
                );
            }
        }
        previous = line;
    }
    // The generator must exercise both sides, or the test proves little.
    assert!(
        valid > 300 && rejected > 300,
        "valid {valid}, rejected {rejected}"
    );
}
