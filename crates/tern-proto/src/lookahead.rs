//! The keys of the next text requests in a batch, found cheaply and without checking the
//! requests, for the server's read-ahead (it starts loading their items before it serves them).
//! A wrong answer only costs a useless prefetch: the requests are parsed for real when served.

use crate::ascii::scan::{first_below, memchr};

/// Fills `keys` with the keys of the `get <key>` and `set <key> <flags> <exptime> <bytes>`
/// requests at the start of `input`, in order, and returns how many it found and whether any
/// input is left after them. It stops at a line of another kind, at an incomplete request and
/// when `keys` is full (inside a multi-key get, whose keys are given one by one).
///
/// It runs over every request of a pipelined batch before the batch is served, so it uses the
/// parser's word-at-a-time searches, not a call to `memchr` per line: a one-key get's line is
/// one search to its key's end.
pub fn upcoming_keys<'a>(input: &'a [u8], keys: &mut [&'a [u8]]) -> (usize, bool) {
    let mut found = 0;
    let mut rest = input;
    while found < keys.len() {
        if let Some(args) = rest.strip_prefix(b"get ") {
            // The key's end: a space (more keys), `\r` or `\n`.
            let Some(end) = first_below(b'!', args) else {
                break;
            };
            let after = match (args[end], args.get(end + 1)) {
                (b'\n', _) => Some(end + 1),
                (b'\r', Some(b'\n')) => Some(end + 2),
                _ => None,
            };
            match after {
                Some(after) if end > 0 => {
                    keys[found] = &args[..end];
                    found += 1;
                    rest = &args[after..];
                }
                _ => {
                    let Some(eol) = memchr(b'\n', args) else {
                        break;
                    };
                    let line = &args[..eol];
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    for key in line.split(|&b| b == b' ').filter(|k| !k.is_empty()) {
                        if found == keys.len() {
                            return (found, true);
                        }
                        keys[found] = key;
                        found += 1;
                    }
                    rest = &args[eol + 1..];
                }
            }
        } else if let Some(args) = rest.strip_prefix(b"set ") {
            let Some(key_end) = first_below(b'!', args).filter(|&i| args[i] == b' ') else {
                break;
            };
            let Some(eol) = memchr(b'\n', args) else {
                break;
            };
            let line = &args[..eol];
            let Some(bytes) = data_length(line.strip_suffix(b"\r").unwrap_or(line)) else {
                break;
            };
            let next = eol + 1 + bytes + 2;
            if next > args.len() {
                break;
            }
            keys[found] = &args[..key_end];
            found += 1;
            rest = &args[next..];
        } else {
            break;
        }
    }
    (found, !rest.is_empty())
}

/// A set's data length: the last number of its arguments, before an optional ` noreply`.
fn data_length(args: &[u8]) -> Option<usize> {
    let args = args.strip_suffix(b" noreply").unwrap_or(args);
    let digits = args.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 9 || args.len() == digits || args[args.len() - digits - 1] != b' ' {
        return None;
    }
    let number = &args[args.len() - digits..];
    Some(
        number
            .iter()
            .fold(0, |n, &d| n * 10 + usize::from(d - b'0')),
    )
}

#[cfg(test)]
mod tests {
    use super::upcoming_keys;
    use crate::ascii::{self, Command, Frame, StoreKind};
    use crate::xorshift;

    fn keys_of(input: &[u8]) -> (Vec<&[u8]>, bool) {
        let mut keys = [&b""[..]; 4];
        let (n, more) = upcoming_keys(input, &mut keys);
        (keys[..n].to_vec(), more)
    }

    #[test]
    fn gets_and_sets_give_their_keys_and_sets_are_skipped_with_their_data() {
        let input = b"get a\r\nset bb 0 0 3\r\nx\ny\r\nset c 1 2 0 noreply\r\n\r\nget d\n";
        assert_eq!(keys_of(input), (vec![&b"a"[..], b"bb", b"c", b"d"], false));
    }

    #[test]
    fn it_stops_at_other_lines_incomplete_requests_and_a_full_list() {
        assert_eq!(
            keys_of(b"get a\r\ndelete b\r\nget c\r\n"),
            (vec![&b"a"[..]], true)
        );
        assert_eq!(
            keys_of(b"get a\r\nset b 0 0 5\r\nab"),
            (vec![&b"a"[..]], true)
        );
        assert_eq!(keys_of(b"get a\r\nget b"), (vec![&b"a"[..]], true));
        assert_eq!(keys_of(b"set b 0 0 x\r\nab\r\n"), (vec![], true));
        let five = b"get a\r\nget b\r\nget c\r\nget d\r\nget e\r\n";
        assert_eq!(keys_of(five), (vec![&b"a"[..], b"b", b"c", b"d"], true));
    }

    #[test]
    fn a_multi_key_get_gives_its_keys_one_by_one() {
        let (keys, more) = keys_of(
            b"get a  b
get c d e
",
        );
        assert_eq!((keys, more), (vec![&b"a"[..], b"b", b"c", b"d"], true));
        assert_eq!(
            keys_of(
                b"get x y
"
            ),
            (vec![&b"x"[..], b"y"], false)
        );
    }

    /// The keys the parser itself sees in `input`'s leading gets and sets, up to the first
    /// other or incomplete request, and whether input is left after them.
    fn parsed_keys(input: &[u8]) -> (Vec<&[u8]>, bool) {
        let (mut keys, mut rest) = (Vec::new(), input);
        while let Frame::Line { consumed, parsed } = ascii::parse(rest, 1 << 20) {
            match parsed {
                Ok(Command::Get { keys: line, .. }) => keys.extend(line),
                Ok(Command::Store {
                    kind: StoreKind::Set,
                    key,
                    bytes,
                    ..
                }) if consumed + bytes + 2 <= rest.len() => {
                    keys.push(key);
                    rest = &rest[consumed + bytes + 2..];
                    continue;
                }
                _ => break,
            }
            rest = &rest[consumed..];
        }
        (keys, !rest.is_empty())
    }

    #[test]
    fn random_batches_cut_anywhere_give_the_keys_the_parser_sees() {
        let mut next = xorshift(0x1234_5678_9ABC_DEF1);
        let word = |next: &mut dyn FnMut() -> u64, max: u64| {
            let len = 1 + next() % max;
            (0..len)
                .map(|_| b'!' + (next() % 94) as u8)
                .collect::<Vec<u8>>()
        };
        for _ in 0..2_000 {
            let mut input = Vec::new();
            for _ in 0..1 + next() % 8 {
                let eol: &[u8] = if next() % 4 == 0 { b"\n" } else { b"\r\n" };
                match next() % 8 {
                    0..=3 => {
                        input.extend_from_slice(b"get ");
                        input.extend(word(&mut next, 20));
                    }
                    4 => {
                        input.extend_from_slice(b"get");
                        for _ in 0..1 + next() % 4 {
                            input.extend_from_slice(&b"  "[..1 + (next() % 2) as usize]);
                            input.extend(word(&mut next, 8));
                        }
                    }
                    5 | 6 => {
                        // The data may hold what looks like a request: it must be skipped.
                        let data: Vec<u8> = match next() % 3 {
                            0 => b"get decoy\r\nget".to_vec(),
                            _ => word(&mut next, 40),
                        };
                        let noreply = if next() % 4 == 0 { " noreply" } else { "" };
                        input.extend_from_slice(b"set ");
                        input.extend(word(&mut next, 20));
                        let args = format!(" {} 0 {}{noreply}", next() % 70_000, data.len());
                        input.extend_from_slice(args.as_bytes());
                        input.extend_from_slice(eol);
                        input.extend(data);
                    }
                    _ => input.extend_from_slice(b"delete x"),
                }
                input.extend_from_slice(eol);
            }
            let cut = (next() % (input.len() as u64 + 1)) as usize;
            for input in [&input[..], &input[..cut]] {
                let mut found = [&b""[..]; 64];
                let (n, more) = upcoming_keys(input, &mut found);
                assert_eq!(
                    (found[..n].to_vec(), more),
                    parsed_keys(input),
                    "input {:?}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }
}
