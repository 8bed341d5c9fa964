//! The keys of the next text requests in a batch, found cheaply and without checking the
//! requests, for the server's read-ahead (it starts loading their items before it serves them).
//! A wrong answer only costs a useless prefetch: the requests are parsed for real when served.

/// Fills `keys` with the keys of the `get <key>` and `set <key> <flags> <exptime> <bytes>`
/// requests at the start of `input`, in order, and returns how many it found and whether any
/// input is left after them. It stops at a line of another kind, at an incomplete request and
/// when `keys` is full (inside a multi-key get, whose keys are given one by one).
pub fn upcoming_keys<'a>(input: &'a [u8], keys: &mut [&'a [u8]]) -> (usize, bool) {
    let mut found = 0;
    let mut rest = input;
    while found < keys.len() {
        let Some(eol) = memchr::memchr(b'\n', rest) else {
            break;
        };
        let line = &rest[..eol];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let mut next = eol + 1;
        let key = if let Some(line_keys) = line.strip_prefix(b"get ") {
            if next > rest.len() {
                break;
            }
            for key in line_keys.split(|&b| b == b' ').filter(|k| !k.is_empty()) {
                if found == keys.len() {
                    return (found, true);
                }
                keys[found] = key;
                found += 1;
            }
            rest = &rest[next..];
            continue;
        } else if let Some(args) = line.strip_prefix(b"set ") {
            let Some(key_end) = memchr::memchr(b' ', args) else {
                break;
            };
            let Some(bytes) = data_length(args) else {
                break;
            };
            next += bytes + 2;
            &args[..key_end]
        } else {
            break;
        };
        if next > rest.len() {
            break;
        }
        keys[found] = key;
        found += 1;
        rest = &rest[next..];
    }
    (found, !rest.is_empty())
}

/// A set's data length: the last number of its arguments, before an optional ` noreply`.
fn data_length(args: &[u8]) -> Option<usize> {
    let args = args.strip_suffix(b" noreply").unwrap_or(args);
    let digits = &args[memchr::memrchr(b' ', args)? + 1..];
    if digits.is_empty() || digits.len() > 9 {
        return None;
    }
    digits.iter().try_fold(0, |n, &d| {
        d.is_ascii_digit().then(|| n * 10 + usize::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::upcoming_keys;

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
}
