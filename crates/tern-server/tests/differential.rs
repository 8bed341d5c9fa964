//! The same seeded random command stream goes to tern and to a live memcached — Debian 12's
//! packaged 1.6.18, and the newest one a registry ships (Debian 13's 1.6.38, built by
//! `scripts/third-party-memcached.sh`); the replies must be identical, apart from CAS uniques and
//! the version string. Replies that changed after 1.6.38 are checked against memcached 1.6.45's
//! transcripts (`tests/transcripts.rs`) and the literal tests at the end of this file. Two paths are compared with
//! newer memcached instead of 1.6.18 itself: incr/decr of a stored number of 2^63 or more (see
//! [`Peer::count_as_newer_memcached`]) and a line of under 4 bytes (see
//! [`as_newer_memcached_reads_short_lines`]).

use tern_testkit::{Conn, ServerProcess};

/// A small deterministic generator (splitmix64), so a failure reproduces from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const KEYS: &[&str] = &["a", "b", "counter", "k:1", "user/42", "x_y"];

/// One side of the comparison: a connection plus the CAS uniques it has seen.
struct Peer {
    conn: Conn,
    barrier: Vec<u8>,
    cas: std::collections::HashMap<String, u64>,
}

impl Peer {
    /// Sends a request followed by `version` (a barrier, since noreply commands answer nothing)
    /// and returns the reply with CAS uniques masked.
    fn exchange(&mut self, request: &[u8]) -> String {
        let mut bytes = request.to_vec();
        bytes.extend_from_slice(b"version\r\n");
        let reply = self.conn.request(&bytes, &self.barrier);
        let reply =
            String::from_utf8_lossy(&reply[..reply.len() - self.barrier.len()]).into_owned();
        let lines: Vec<&str> = reply.split_inclusive("\r\n").collect();
        let mut masked = String::new();
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i];
            i += 1;
            let fields: Vec<&str> = line.trim_end_matches("\r\n").split(' ').collect();
            if fields[0] == "VALUE" && (fields.len() == 4 || fields.len() == 5) {
                let mut data = lines.get(i).copied().unwrap_or("").trim_end_matches("\r\n");
                i += 1;
                // After incr/decr shortens a number, memcached pads it with spaces in place or
                // stores it anew, depending on whether another reference to the item is still
                // held: both forms are correct, so compare the number alone.
                let digits = data.trim_end_matches(' ');
                if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                    data = digits;
                }
                let cas = if fields.len() == 5 {
                    self.cas
                        .insert(fields[1].to_string(), fields[4].parse().unwrap());
                    " <cas>"
                } else {
                    ""
                };
                masked.push_str(&format!(
                    "VALUE {} {} {}{cas}\r\n{data}\r\n",
                    fields[1],
                    fields[2],
                    data.len()
                ));
            } else if line.starts_with("VERSION ") {
                masked.push_str("VERSION <version>\r\n");
            } else {
                masked.push_str(line);
            }
        }
        masked
    }

    /// The reference's reply to `request`. An incr/decr of a number of 2^63 or more is worked
    /// out from the value memcached holds instead of sent: Debian's memcached 1.6.18 refuses
    /// such a number as non-numeric now and then (see [`Peer::count_as_newer_memcached`]).
    fn reference_reply(&mut self, request: &[u8]) -> String {
        if let Some(op) = Arithmetic::parse(request) {
            if let Some(held) = self.held_big_number(op.key) {
                return self.count_as_newer_memcached(&op, held);
            }
        }
        let reply = self.exchange(request);
        as_newer_memcached_reads_short_lines(request, reply)
    }

    /// What memcached holds at `key` when incr/decr would read it as a number of 2^63 or more.
    fn held_big_number(&mut self, key: &str) -> Option<HeldNumber> {
        let reply = self.exchange(format!("mg {key} v f t\r\n").as_bytes());
        let (head, rest) = reply.split_once("\r\n")?;
        let fields: Vec<&str> = head.split(' ').collect();
        if fields[0] != "VA" {
            assert_eq!(reply, "EN\r\n", "mg {key}");
            return None;
        }
        let len: usize = fields[1].parse().unwrap();
        let value = &rest.as_bytes()[..len];
        let number = leading_number(value).filter(|&n| n > i64::MAX as u64)?;
        let flag = |name: char| {
            fields[2..]
                .iter()
                .find_map(|f| f.strip_prefix(name))
                .unwrap_or_else(|| panic!("mg {key}: no {name} in {head}"))
        };
        Some(HeldNumber {
            number,
            len,
            flags: flag('f').parse().unwrap(),
            ttl: flag('t').parse().unwrap(),
        })
    }

    /// incr/decr of a number of 2^63 or more, done as newer memcached does it and written back
    /// to memcached. Debian's 1.6.18 parses the value with `safe_strtoull`, which for such a
    /// number looks for a minus sign with `strchr` over the item's data: the data ends in
    /// `\r\n`, not NUL, so the search runs on through the rest of the slab chunk and into the
    /// next one until some NUL, and a `-` byte there (stale bytes of an earlier item, a pointer
    /// of the next item) makes memcached answer `CLIENT_ERROR cannot increment or decrement
    /// non-numeric value`. What lies there depends on which chunk the item got and on the
    /// neighbours' pointers: the LRU threads' timing and address randomisation, not the stream.
    /// Newer memcached searches only the digits (`memchr(str, '-', endptr - str)`), so the
    /// number counts: incr wraps at 2^64, decr stops at 0, a result no longer than the value is
    /// written over it padded with spaces (memcached's in-place form; only the test holds the
    /// item), a longer one replaces it; flags and expiry are kept.
    fn count_as_newer_memcached(&mut self, op: &Arithmetic, held: HeldNumber) -> String {
        let result = if op.incr {
            held.number.wrapping_add(op.delta)
        } else {
            held.number.saturating_sub(op.delta)
        };
        let value = format!("{result:<width$}", width = held.len);
        // mg's `t` is the remaining TTL (-1: none). Written back relative to now, the expiry
        // may move by the second that can pass between mg and set; the stream's TTLs are 100 s
        // or more, far beyond a run, so no reply can show it.
        assert!(held.ttl != 0, "{}: expires within the second", op.key);
        let exptime = held.ttl.max(0);
        let set = format!(
            "set {} {} {exptime} {}\r\n{value}\r\n",
            op.key,
            held.flags,
            value.len()
        );
        assert_eq!(self.exchange(set.as_bytes()), "STORED\r\n", "{set:?}");
        if op.noreply {
            String::new()
        } else {
            format!("{result}\r\n")
        }
    }
}

/// memcached 1.6.45 answers a line of under 4 bytes (line ending included) with `CLIENT_ERROR
/// bad command line format`; 1.6.18 says `ERROR`. The stream makes such lines only out of a
/// storage command's data: a refused command line leaves its data (`v\r\n`) to be read as a
/// command, and a data block one byte longer than declared (bad data chunk) leaves a lone
/// `\n`. Where 1.6.18's reply ends in the `ERROR` for such a line, the expectation is
/// 1.6.45's.
fn as_newer_memcached_reads_short_lines(request: &[u8], reply: String) -> String {
    const FORMAT: &str = "CLIENT_ERROR bad command line format\r\n";
    let Some(at) = request.windows(2).position(|w| w == b"\r\n") else {
        return reply;
    };
    let (head, rest) = (&request[..at], &request[at + 2..]);
    let words: Vec<&[u8]> = head.split(|&b| b == b' ').collect();
    let storage = [
        &b"set"[..],
        b"add",
        b"replace",
        b"append",
        b"prepend",
        b"cas",
    ];
    if rest.is_empty()
        || !storage.contains(&words[0])
        || !reply.ends_with("\r\nERROR\r\n") && reply != "ERROR\r\n"
    {
        return reply;
    }
    // The line is refused (silently with noreply) when a number in it is not one.
    let number = |at: usize, signed: bool| {
        words
            .get(at)
            .and_then(|w| std::str::from_utf8(w).ok())
            .is_some_and(|w| {
                if signed {
                    w.parse::<i64>().is_ok()
                } else {
                    w.parse::<u32>().is_ok()
                }
            })
    };
    let declared: Option<usize> = words
        .get(4)
        .and_then(|w| std::str::from_utf8(w).ok()?.parse().ok());
    let short = match declared {
        Some(declared) if number(2, false) && number(3, true) => rest.len() > declared + 2,
        _ => rest.len() < 4,
    };
    if !short {
        return reply;
    }
    format!("{}{FORMAT}", &reply[..reply.len() - "ERROR\r\n".len()])
}

/// A well-formed `incr`/`decr` request: the ones memcached answers by reading the stored value.
struct Arithmetic<'a> {
    incr: bool,
    key: &'a str,
    delta: u64,
    noreply: bool,
}

impl<'a> Arithmetic<'a> {
    fn parse(request: &'a [u8]) -> Option<Arithmetic<'a>> {
        let line = std::str::from_utf8(request).ok()?.strip_suffix("\r\n")?;
        let (incr, key, delta, noreply) = match line.split(' ').collect::<Vec<_>>()[..] {
            [cmd, key, delta] => (cmd, key, delta, false),
            [cmd, key, delta, "noreply"] => (cmd, key, delta, true),
            _ => return None,
        };
        let incr = match incr {
            "incr" => true,
            "decr" => false,
            _ => return None,
        };
        if key.is_empty() || key.len() > 250 || !delta.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Arithmetic {
            incr,
            key,
            delta: delta.parse().ok()?,
            noreply,
        })
    }
}

/// A number memcached holds, with what writing it back needs.
struct HeldNumber {
    number: u64,
    len: usize,
    flags: u32,
    ttl: i64,
}

/// The number incr/decr reads from a stored value, as memcached's `strtoull` does: white space,
/// digits, then white space or the end (the stream never stores a sign).
fn leading_number(value: &[u8]) -> Option<u64> {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
    let start = value.iter().position(|b| !is_space(b))?;
    let rest = &value[start..];
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits).is_some_and(|b| !is_space(b)) {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

fn value(rng: &mut Rng) -> Vec<u8> {
    match rng.below(10) {
        0 => b"18446744073709551615".to_vec(),
        1 => b" 12".to_vec(),
        2 => rng.below(1000).to_string().into_bytes(),
        3 => Vec::new(),
        _ => {
            let longest = if rng.chance(5) { 3000 } else { 20 };
            let len = rng.below(longest);
            (0..len)
                .map(|_| *rng.pick(b"abcdefghijklmnopqrstuvwxyz0123456789"))
                .collect()
        }
    }
}

/// What the stream sends instead of a request whose reply changed after Debian's 1.6.18 (the
/// tests below hold those against 1.6.45's transcript): a line both answer alike that, like
/// the request in 1.6.18, changes nothing, so the stream's draws and the items it leaves are
/// those it always had.
const CHANGED_AFTER_1_6_18: &[u8] = b"bogus\r\n";

/// One random request, rendered for a peer (a cas command uses that peer's own unique).
fn request(rng: &mut Rng, cas_of: &dyn Fn(&str) -> Option<u64>, stale: bool) -> Vec<u8> {
    let key = *rng.pick(KEYS);
    let noreply = if rng.chance(15) { " noreply" } else { "" };
    let exptime = *rng.pick(&["0", "0", "0", "1000", "-1", "2592001", "x"]);
    let flags = *rng.pick(&["0", "0", "1", "4294967295", "-1"]);
    let mut req = Vec::new();
    match rng.below(20) {
        0..=5 => {
            let cmd = *rng.pick(&["set", "set", "add", "replace", "append", "prepend", "cas"]);
            let v = value(rng);
            // Now and then a length one short: the block then lacks its \r\n (bad data chunk).
            let declared = if rng.chance(3) && !v.is_empty() {
                v.len() - 1
            } else {
                v.len()
            };
            let cas = if cmd == "cas" {
                let unique = cas_of(key).unwrap_or(1);
                format!(" {}", if stale { unique + 1 } else { unique })
            } else {
                String::new()
            };
            req.extend_from_slice(
                format!("{cmd} {key} {flags} {exptime} {declared}{cas}{noreply}\r\n").as_bytes(),
            );
            req.extend_from_slice(&v);
            req.extend_from_slice(b"\r\n");
            if flags == "-1" || exptime == "x" {
                // Refused for its flags or exptime: 1.6.18 reads the data block as a command,
                // 1.6.45 swallows it (`replies_that_changed_after_1_6_18`).
                return CHANGED_AFTER_1_6_18.to_vec();
            }
        }
        6..=9 => {
            let cmd = *rng.pick(&["get", "gets", "gat 100", "gats 0", "gat -1"]);
            let n = 1 + rng.below(4);
            let keys: Vec<&str> = (0..n).map(|_| *rng.pick(KEYS)).collect();
            req.extend_from_slice(format!("{cmd} {}\r\n", keys.join(" ")).as_bytes());
        }
        10..=11 => {
            let cmd = *rng.pick(&["incr", "decr"]);
            let delta = *rng.pick(&["1", "5", "18446744073709551615", "x", "-1"]);
            req.extend_from_slice(format!("{cmd} {key} {delta}{noreply}\r\n").as_bytes());
        }
        12 => {
            let hold = *rng.pick(&["", " 0", " 5"]);
            if hold == " 5" {
                // 1.6.18 refuses the hold time, 1.6.40 and later ignore it
                // (`delete_ignores_all_but_a_final_noreply`).
                return CHANGED_AFTER_1_6_18.to_vec();
            }
            req.extend_from_slice(format!("delete {key}{hold}{noreply}\r\n").as_bytes());
        }
        13 => req.extend_from_slice(format!("touch {key} {exptime}{noreply}\r\n").as_bytes()),
        14 => {
            if rng.chance(10) {
                req.extend_from_slice(format!("flush_all{noreply}\r\n").as_bytes());
            } else {
                req.extend_from_slice(b"verbosity 1\r\n");
            }
        }
        15 => {
            let junk = *rng.pick(&[
                "bogus",
                "get",
                "set a 0 0",
                "incr a",
                "touch a",
                "delete a 0 0 0",
                "GET a",
                "gets  a   b ",
                "flush_all 0 0 0",
                "version",
                "stats nonsense",
                "set a 0 0 1 2 3 4 5",
                "cas a 0 0 1",
            ]);
            let unchanged = [
                "bogus",
                "GET a",
                "gets  a   b ",
                "version",
                "stats nonsense",
            ];
            if !unchanged.contains(&junk) {
                // Since 1.6.45 too few tokens is a bad format and extra ones are ignored
                // (`replies_that_changed_after_1_6_18`).
                return CHANGED_AFTER_1_6_18.to_vec();
            }
            req.extend_from_slice(format!("{junk}\r\n").as_bytes());
        }
        16 => {
            let long = "k".repeat(250 + rng.below(2) as usize);
            let cmd = *rng.pick(&["get", "incr", "delete", "touch"]);
            let arg = if cmd == "incr" || cmd == "touch" {
                " 1"
            } else {
                ""
            };
            req.extend_from_slice(format!("{cmd} {long}{arg}\r\n").as_bytes());
        }
        17 if rng.chance(5) => {
            // A value over the 1 MB item limit: refused and skipped by both.
            let size = (1 << 20) + 1;
            req.extend_from_slice(format!("set {key} 0 0 {size}{noreply}\r\n").as_bytes());
            req.extend(std::iter::repeat_n(b'z', size));
            req.extend_from_slice(b"\r\n");
        }
        _ => req.extend_from_slice(format!("get {key}\r\n").as_bytes()),
    }
    req
}

/// tern and a memcached, each with a fresh store and one connection.
struct Pair {
    reference: Peer,
    ours: Peer,
    _servers: [ServerProcess; 2],
}

impl Pair {
    /// With Debian 12's memcached 1.6.18.
    fn start() -> Pair {
        Pair::with(ServerProcess::memcached(&["-t", "1"]))
    }

    fn with(memcached: ServerProcess) -> Pair {
        let tern = ServerProcess::tern(&["-t", "2"]);
        let mut conn = memcached.connect();
        let barrier = conn.request(b"version\r\n", b"\r\n");
        assert!(barrier.starts_with(b"VERSION 1.6."), "{barrier:?}");
        Pair {
            reference: Peer {
                conn,
                barrier,
                cas: Default::default(),
            },
            ours: Peer {
                conn: tern.connect(),
                barrier: tern_server::VERSION_REPLY.as_bytes().to_vec(),
                cas: Default::default(),
            },
            _servers: [memcached, tern],
        }
    }
}

fn run(pair: Pair, seed: u64, commands: usize) {
    let Pair {
        mut reference,
        mut ours,
        _servers,
    } = pair;
    let mut rng = Rng(seed);
    let mut history = Vec::new();
    for i in 0..commands {
        let mut fork = Rng(rng.next());
        let stale = fork.chance(30);
        let (mut a, mut b) = (Rng(fork.0), Rng(fork.0));
        let ref_req = request(&mut a, &|k| reference.cas.get(k).copied(), stale);
        let our_req = request(&mut b, &|k| ours.cas.get(k).copied(), stale);
        let want = reference.reference_reply(&ref_req);
        let got = ours.exchange(&our_req);
        history.push(String::from_utf8_lossy(&our_req[..our_req.len().min(120)]).into_owned());
        assert_eq!(
            got,
            want,
            "seed {seed}, command {i}: {:?}\nlast commands:\n{}",
            String::from_utf8_lossy(&our_req[..our_req.len().min(200)]),
            history[history.len().saturating_sub(8)..].join("")
        );
    }
}

#[test]
fn random_streams_match_memcached() {
    for seed in 1..=5 {
        run(Pair::start(), seed, 1500);
    }
}

/// The same streams against the newest memcached a registry ships (1.6.38 today): what changed
/// between 1.6.18 and it (meta, stats, extstore) is outside the stream, and what the stream
/// sends that changed after it is compared as with 1.6.18 (the short lines and the replaced
/// requests above).
#[test]
fn random_streams_match_the_newest_packaged_memcached() {
    for seed in 1..=5 {
        run(
            Pair::with(ServerProcess::memcached_newest(&["-t", "1"])),
            seed,
            1500,
        );
    }
}

/// CI's one failure (seed 1, command 1361: `decr a 5` of 18446744073709551615, refused by
/// memcached) made certain: a longer value with minus signs leaves them in the slab chunk that
/// the number then takes, and 1.6.18's search for a sign runs into them and refuses to
/// decrement. The comparison must still count the number as newer memcached does (the value,
/// not the memory after it, decides), and tern must agree.
#[test]
fn big_counters_count_whatever_memory_follows_them() {
    let mut pair = Pair::start();
    for request in [
        "set a 0 0 30\r\n18446744073709551615----------\r\n",
        "delete a\r\n",
        "set a 1 1000 20\r\n18446744073709551615\r\n",
        "decr a 5\r\n",
        "gets a\r\n",
        "incr a 18446744073709551615 noreply\r\n",
        "decr a 18446744073709551605\r\n",
        "get a\r\n",
        "append a 0 0 1\r\nx\r\n",
        "incr a 1\r\n",
        "set b 0 0 23\r\n18446744073709551615 12\r\n",
        "incr b 1\r\n",
        "get b\r\n",
        "decr b x\r\n",
        // 2^63 is the first number 1.6.18 searches past; decr stops at 0.
        "set c 0 0 19\r\n9223372036854775808\r\n",
        "decr c 18446744073709551615\r\n",
        "incr c 9223372036854775807\r\n",
        "incr c 1\r\n",
        "incr c 1\r\n",
        "get c\r\n",
        "incr d 1\r\n",
        "mg a v f\r\n",
    ] {
        let request = request.as_bytes();
        let want = pair.reference.reference_reply(request);
        let got = pair.ours.exchange(request);
        assert_eq!(got, want, "{:?}", String::from_utf8_lossy(request));
    }
}

/// incr/decr read a stored value as memcached's `safe_strtoull` does: C white space (vertical tab
/// and form feed too), a sign (`+5` counts, `-0` is 0, `-5` is refused), digits, then white
/// space, a NUL (where C's string ends) or the end of the value.
#[test]
fn stored_numbers_are_read_as_memcached_reads_them() {
    let mut pair = Pair::start();
    for (value, op) in [
        (&b"+5"[..], "incr"),
        (b"-0", "incr"),
        (b"-5", "incr"),
        (b"-9223372036854775809", "decr"),
        (b"5\x0b", "incr"),
        (b"\x0c12", "decr"),
        (b"5\0x", "incr"),
        (b"\t7\0", "decr"),
        (b"5\x01", "incr"),
        (b"+", "incr"),
    ] {
        let mut set = format!("set n 0 0 {}\r\n", value.len()).into_bytes();
        set.extend_from_slice(value);
        set.extend_from_slice(b"\r\n");
        for request in [&set[..], format!("{op} n 1\r\n").as_bytes(), b"get n\r\n"] {
            let want = pair.reference.reference_reply(request);
            let got = pair.ours.exchange(request);
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(request));
        }
    }
}

/// Lines the random stream sent once and whose replies changed after Debian's 1.6.18: the
/// replies are memcached 1.6.45's, as its transcript shows them (sent with nc to
/// /tmp/memcached-src/memcached, 1.6.45). 1.6.45's request parser answers a command with too few
/// tokens `CLIENT_ERROR bad command line format` (1.6.18: `ERROR`), ignores tokens past those a
/// command reads (1.6.18: `ERROR`), and swallows the data block of a storage line refused after
/// its length was read.
#[test]
fn replies_that_changed_after_1_6_18() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    let format = "CLIENT_ERROR bad command line format\r\n";
    for (request, reply) in [
        ("get\r\n", format),
        ("set a 0 0\r\n", format),
        ("incr a\r\n", format),
        ("touch a\r\n", format),
        ("cas a 0 0 1\r\nx\r\n", format),
        ("set a 0 0 1 2 3 4 5\r\nx\r\n", "STORED\r\n"),
        ("delete a 0 0 0\r\n", "DELETED\r\n"),
        ("flush_all 0 0 0\r\n", "OK\r\n"),
        ("set a -1 0 1\r\nx\r\n", format),
        ("set a 0 x 1\r\nx\r\n", format),
    ] {
        c.expect(request.as_bytes(), reply.as_bytes());
    }
}

/// Since 1.6.40 a `delete` ignores everything after its key but a final `noreply` (1.6.18 refused
/// a hold time other than 0 and any other word); memcached 1.6.45's transcript. Its own proxy
/// sends backends `delete KEY noreplY`.
#[test]
fn delete_ignores_all_but_a_final_noreply() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    for (delete, reply) in [
        ("delete a 5", "DELETED\r\n"),
        ("delete a noreplY", "DELETED\r\n"),
        ("delete a x y noreply", ""),
    ] {
        c.expect(
            format!("set a 0 0 1\r\nx\r\n{delete}\r\nget a\r\n").as_bytes(),
            format!("STORED\r\n{reply}END\r\n").as_bytes(),
        );
    }
}
