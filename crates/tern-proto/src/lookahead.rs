//! The keys of the next text requests in a batch, found cheaply, for the server's read-ahead
//! (it starts loading their items before it serves them). A key's request is not checked
//! except where it is a one-key get line, which is recognised by the parser's own test: the
//! server then serves it without parsing it again. Any other wrong answer only costs a useless
//! prefetch: those requests are parsed for real when served.

use crate::ascii::one_key_get_line;
use crate::ascii::scan::{first_below, memchr};

/// A key the look-ahead found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Upcoming<'a> {
    pub key: &'a [u8],
    /// Where the key's request starts in the input.
    pub start: usize,
    /// Where the request ends when it is a one-key get line (`get <key>\r\n`) of a key of
    /// legal length: the parser reads `start..end` as a get of this key alone, without cas or
    /// touch, whatever came before it.
    pub one_key_get_end: Option<usize>,
}

/// Hands `found` the keys of the `get <key>...` and `set <key> <flags> <exptime> <bytes>`
/// requests at the start of `input`, in order, at most `limit` of them; returns how many it
/// found and where it stopped: the end of the last request whose keys it gave (all of them or,
/// in a multi-key get cut off by the limit, the first ones). It stops at a line of another
/// kind, at an incomplete request and at the limit.
///
/// It runs over every request of a pipelined batch before the batch is served, so it uses the
/// parser's word-at-a-time searches, not a call to `memchr` per line: a one-key get's line is
/// one search to its key's end.
#[inline(always)]
pub fn upcoming<'a>(
    input: &'a [u8],
    limit: usize,
    mut found: impl FnMut(Upcoming<'a>),
) -> (usize, usize) {
    let mut count = 0;
    let mut at = 0;
    while count < limit {
        let rest = &input[at..];
        if let Some(args) = rest.strip_prefix(b"get ") {
            if let Ok((key_len, consumed)) = one_key_get_line(args) {
                let end = at + 4 + consumed;
                found(Upcoming {
                    key: &args[..key_len],
                    start: at,
                    one_key_get_end: Some(end),
                });
                count += 1;
                at = end;
                continue;
            }
            let Some(eol) = memchr(b'\n', args) else {
                break;
            };
            let line = &args[..eol];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            for key in line.split(|&b| b == b' ').filter(|k| !k.is_empty()) {
                if count == limit {
                    return (count, at + 4 + eol + 1);
                }
                found(Upcoming {
                    key,
                    start: at,
                    one_key_get_end: None,
                });
                count += 1;
            }
            at += 4 + eol + 1;
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
            found(Upcoming {
                key: &args[..key_end],
                start: at,
                one_key_get_end: None,
            });
            count += 1;
            at += 4 + next;
        } else {
            break;
        }
    }
    (count, at)
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
    use super::{upcoming, Upcoming};
    use crate::ascii::{self, Command, Frame, StoreKind};
    use crate::xorshift;

    /// What the look-ahead finds, and whether it left input after them.
    fn found(input: &[u8], limit: usize) -> (Vec<Upcoming<'_>>, bool) {
        let mut found = Vec::new();
        let (n, stopped) = upcoming(input, limit, |key| found.push(key));
        assert_eq!(n, found.len());
        (found, stopped < input.len())
    }

    fn keys_of(input: &[u8]) -> (Vec<&[u8]>, bool) {
        let (found, more) = found(input, 4);
        (found.iter().map(|up| up.key).collect(), more)
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
        // Cut off inside the last line, the look stops at its end.
        assert_eq!((keys, more), (vec![&b"a"[..], b"b", b"c", b"d"], false));
        assert_eq!(
            keys_of(
                b"get x y
"
            ),
            (vec![&b"x"[..], b"y"], false)
        );
    }

    /// The keys the parser itself sees in `input`'s leading gets and sets, each with where its
    /// request starts and, for a get of that key alone, where the request ends; up to the
    /// first other or incomplete request, and whether input is left after them.
    fn parsed_keys(input: &[u8]) -> (Vec<Upcoming<'_>>, bool) {
        let (mut keys, mut at) = (Vec::new(), 0);
        while let Frame::Line { consumed, parsed } = ascii::parse(&input[at..], 1 << 20) {
            match parsed {
                Ok(Command::Get {
                    keys: line,
                    with_cas,
                    touch,
                }) => {
                    let alone = (!with_cas && touch.is_none() && line.only().is_some())
                        .then_some(at + consumed);
                    keys.extend(line.map(|key| Upcoming {
                        key,
                        start: at,
                        one_key_get_end: alone,
                    }));
                }
                Ok(Command::Store {
                    kind: StoreKind::Set,
                    key,
                    bytes,
                    ..
                }) if at + consumed + bytes + 2 <= input.len() => {
                    keys.push(Upcoming {
                        key,
                        start: at,
                        one_key_get_end: None,
                    });
                    at += consumed + bytes + 2;
                    continue;
                }
                _ => break,
            }
            at += consumed;
        }
        (keys, at < input.len())
    }

    /// The look-ahead's answer for `input` agrees with the parser's: the same keys of the same
    /// requests, and each one-key get it names is one to the parser, of the same length. (It
    /// may leave one out, e.g. `get  a`: that only costs a parse.)
    fn assert_agrees_with_the_parser(input: &[u8]) {
        let (found, more) = found(input, 64);
        let (parsed, parsed_more) = parsed_keys(input);
        let context = || format!("input {:?}", String::from_utf8_lossy(input));
        assert_eq!(more, parsed_more, "{}", context());
        assert_eq!(found.len(), parsed.len(), "{}", context());
        for (up, parsed) in found.iter().zip(&parsed) {
            assert_eq!(
                (up.key, up.start),
                (parsed.key, parsed.start),
                "{}",
                context()
            );
            if up.one_key_get_end.is_some() {
                assert_eq!(up.one_key_get_end, parsed.one_key_get_end, "{}", context());
            }
        }
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
                        // Now and then a key past the word-at-a-time search's reach.
                        let longest = if next() % 8 == 0 { 300 } else { 20 };
                        input.extend_from_slice(b"get ");
                        input.extend(word(&mut next, longest));
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
            assert_agrees_with_the_parser(&input);
            assert_agrees_with_the_parser(&input[..cut]);
        }
    }

    #[test]
    fn a_one_key_get_line_is_named_with_its_end_and_others_are_not() {
        let input = b"get a\r\nget  b\nget c d\nset e 0 0 1\r\nx\r\nget f\n";
        let (found, more) = found(input, 8);
        let ends: Vec<_> = found
            .iter()
            .map(|up| (up.key, up.start, up.one_key_get_end))
            .collect();
        assert_eq!(
            (ends, more),
            (
                vec![
                    (&b"a"[..], 0, Some(7)),
                    (b"b", 7, None),
                    (b"c", 14, None),
                    (b"d", 14, None),
                    (b"e", 22, None),
                    (b"f", 38, Some(44)),
                ],
                false
            )
        );
        // The parser agrees that the lines named are one-key gets of exactly that length.
        for (start, end, key) in [(0, 7, &b"a"[..]), (38, 44, b"f")] {
            let Frame::Line {
                consumed,
                parsed: Ok(Command::Get { keys, .. }),
            } = ascii::parse(&input[start..], 1 << 20)
            else {
                panic!("not a get");
            };
            assert_eq!((consumed, keys.only()), (end - start, Some(key)));
        }
    }
}
