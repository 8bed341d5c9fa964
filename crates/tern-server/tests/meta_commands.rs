//! Meta commands against the real server: the behaviours memcached's protocol.txt documents
//! (anti-stampede vivify/win/stale, recache, quiet pipelines ended by `mn`, base64 keys, opaque,
//! `ms` and `ma` modes), then a seeded stream of meta commands sent to tern and to Debian's
//! memcached 1.6.18, whose replies must agree apart from CAS values.

use tern_testkit::{Conn, Rng, ServerProcess};

/// Sends `request` followed by `mn`, returns everything before the `MN` (quiet replies too).
fn ask(c: &mut Conn, request: &str) -> String {
    c.send(request.as_bytes());
    c.send(b"mn\r\n");
    let got = String::from_utf8(c.read_until(b"MN\r\n")).expect("utf-8 replies");
    got[..got.len() - 4].to_string()
}

/// CAS values differ between servers and runs: `c123` becomes `c*`.
fn without_cas(reply: &str) -> String {
    reply
        .split("\r\n")
        .map(|line| {
            line.split(' ')
                .map(|t| match t.strip_prefix('c') {
                    Some(digits)
                        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) =>
                    {
                        "c*"
                    }
                    _ => t,
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

fn check(c: &mut Conn, request: &str, want: &str) {
    assert_eq!(without_cas(&ask(c, request)), want, "reply to {request:?}");
}

#[test]
fn vivify_on_miss_hands_one_client_the_win() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    // protocol.txt: N creates an empty item on a miss; the first client gets W, later ones Z.
    check(&mut c, "mg foo v c N30 s\r\n", "VA 0 c* s0 W\r\n\r\n");
    check(&mut c, "mg foo v N30\r\n", "VA 0 Z\r\n\r\n");
    check(&mut c, "mg foo s\r\n", "HD s0 Z\r\n");
    // The winner fills it; a fresh item has no token out.
    check(&mut c, "ms foo 2 T60\r\nhi\r\n", "HD\r\n");
    check(&mut c, "mg foo v\r\n", "VA 2\r\nhi\r\n");
}

#[test]
fn invalidated_items_serve_stale_and_one_recache_win() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    check(&mut c, "ms foo 2\r\nhi\r\n", "HD\r\n");
    check(&mut c, "md foo I T30\r\n", "HD\r\n");
    check(&mut c, "mg foo v c\r\n", "VA 2 c* X W\r\nhi\r\n");
    check(&mut c, "mg foo v\r\n", "VA 2 Z X\r\nhi\r\n");
    // ms I with a CAS older than the item's still stores, and the new value is stale too.
    let cas = current_cas(&mut c, "foo");
    check(
        &mut c,
        &format!("ms foo 3 I C{}\r\nnew\r\n", cas - 1),
        "HD\r\n",
    );
    // It keeps the old TTL and the fact that a win token is out.
    check(&mut c, "mg foo v\r\n", "VA 3 Z X\r\nnew\r\n");
    // A CAS newer than the (new) item's is just a mismatch.
    let newer = current_cas(&mut c, "foo") + 1;
    check(&mut c, &format!("ms foo 3 I C{newer}\r\nxyz\r\n"), "EX\r\n");
}

fn current_cas(c: &mut Conn, key: &str) -> u64 {
    let reply = ask(c, &format!("mg {key} c\r\n"));
    reply
        .split(' ')
        .find_map(|t| t.strip_prefix('c'))
        .and_then(|d| d.trim().parse().ok())
        .unwrap_or_else(|| panic!("no CAS in {reply:?}"))
}

#[test]
fn a_stale_cas_is_refused_on_delete_arithmetic_and_append() {
    let server = ServerProcess::tern(&[]);
    let (mut a, mut b) = (server.connect(), server.connect());
    check(&mut a, "ms n 1\r\n5\r\n", "HD\r\n");
    let seen = current_cas(&mut a, "n");
    // Another connection writes after `a` read the CAS: every change `a` conditions on it is
    // refused and leaves the other connection's value in place.
    check(&mut b, "ma n v\r\n", "VA 1\r\n6\r\n");
    check(&mut a, &format!("md n C{seen}\r\n"), "EX\r\n");
    check(&mut a, &format!("md n I C{seen}\r\n"), "EX\r\n");
    check(&mut a, &format!("ma n v C{seen}\r\n"), "EX\r\n");
    check(&mut a, &format!("ms n 1 MA C{seen}\r\n0\r\n"), "EX\r\n");
    check(&mut a, &format!("ms n 1 MP C{seen}\r\n0\r\n"), "EX\r\n");
    check(&mut a, "mg n v\r\n", "VA 1\r\n6\r\n");
    // `ma c` reports the CAS of the version it wrote: the next conditioned change may name it.
    let current = current_cas(&mut a, "n");
    let reply = ask(&mut a, &format!("ma n v c C{current}\r\n"));
    let written: u64 = reply
        .split(['\r', ' '])
        .find_map(|t| t.strip_prefix('c'))
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no CAS in {reply:?}"));
    assert_eq!(without_cas(&reply), "VA 1 c*\r\n7\r\n");
    assert_eq!(current_cas(&mut a, "n"), written);
    // `md I` gives the item a new CAS, as memcached does: the one read before is stale now.
    check(&mut a, &format!("md n I C{written}\r\n"), "HD\r\n");
    check(&mut a, &format!("md n C{written}\r\n"), "EX\r\n");
    let invalidated = current_cas(&mut a, "n");
    check(&mut a, &format!("md n C{invalidated}\r\n"), "HD\r\n");
    check(&mut a, &format!("md n C{invalidated}\r\n"), "NF\r\n");
}

#[test]
fn u_reads_leave_the_item_unfetched() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    check(&mut c, "ms q 1\r\nx\r\n", "HD\r\n");
    check(&mut c, "mg q u v\r\n", "VA 1\r\nx\r\n");
    check(&mut c, "mg q h\r\n", "HD h0\r\n");
    check(&mut c, "mg q h\r\n", "HD h1\r\n");
}

#[test]
fn recache_wins_once_when_the_ttl_runs_low() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    check(&mut c, "ms r 1 T100\r\n1\r\n", "HD\r\n");
    check(&mut c, "mg r v R30\r\n", "VA 1\r\n1\r\n");
    check(&mut c, "mg r v R1000\r\n", "VA 1 W\r\n1\r\n");
    check(&mut c, "mg r v R1000\r\n", "VA 1 Z\r\n1\r\n");
}

#[test]
fn quiet_mode_and_mn_end_a_pipeline() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    // q hides HD on ms/md, EN on mg, success on ma; errors and NF on md still show.
    let replies = ask(
        &mut c,
        "ms a 1 q\r\n1\r\nmg nope v q\r\nmg a v q k O9\r\nma a q\r\nmd nope q\r\nms a 1 ME q\r\nx\r\n",
    );
    assert_eq!(replies, "VA 1 ka O9\r\n1\r\nNF\r\nNS\r\n");
    check(&mut c, "mg a v\r\n", "VA 1\r\n2\r\n");
}

#[test]
fn base64_keys_and_opaque_tokens() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    check(&mut c, "ms Zm9v 2 b\r\nhi\r\n", "HD\r\n");
    check(
        &mut c,
        "mg Zm9v b k v O123\r\n",
        "VA 2 kZm9v b O123\r\nhi\r\n",
    );
    // The decoded key is the item's key for every protocol.
    c.expect(b"get foo\r\n", b"VALUE foo 0 2\r\nhi\r\nEND\r\n");
    check(
        &mut c,
        "mg ####= b\r\n",
        "CLIENT_ERROR error decoding key\r\n",
    );
    check(&mut c, "md Zm9v b q\r\n", "");
    check(&mut c, "mg Zm9v b O1\r\n", "EN O1\r\n");
}

#[test]
fn ms_modes_and_ma_modes_with_auto_create() {
    let server = ServerProcess::tern(&[]);
    let mut c = server.connect();
    check(&mut c, "ms k 1 MR\r\nx\r\n", "NS\r\n");
    check(&mut c, "ms k 1 ME F5\r\nb\r\n", "HD\r\n");
    check(&mut c, "ms k 1 ME\r\nx\r\n", "NS\r\n");
    check(&mut c, "ms k 1 MA\r\nc\r\n", "HD\r\n");
    check(&mut c, "ms k 1 MP\r\na\r\n", "HD\r\n");
    check(&mut c, "mg k v f\r\n", "VA 3 f5\r\nabc\r\n");
    check(&mut c, "ms k 1 MR c\r\nz\r\n", "HD c*\r\n");
    check(
        &mut c,
        "ms k 1 MX\r\nz\r\n",
        "CLIENT_ERROR invalid mode for ms M token\r\n",
    );
    check(&mut c, "ma n\r\n", "NF\r\n");
    check(&mut c, "ma n N0 J10 v\r\n", "VA 2\r\n10\r\n");
    check(&mut c, "ma n D5 v\r\n", "VA 2\r\n15\r\n");
    check(&mut c, "ma n MD D20 v\r\n", "VA 1\r\n0\r\n");
    check(&mut c, "ma n M+ D7\r\n", "HD\r\n");
    check(
        &mut c,
        "ma k\r\n",
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
    check(&mut c, "ma n C1 v\r\n", "EX\r\n");
    // md with a matching CAS deletes.
    let cas = ask(&mut c, "mg n c\r\n");
    let cas = cas.trim().trim_start_matches("HD c");
    check(&mut c, &format!("md n C{cas}\r\n"), "HD\r\n");
    check(&mut c, "mg n\r\n", "EN\r\n");
}

#[test]
fn a_too_large_ms_is_refused_and_its_data_skipped() {
    let server = ServerProcess::tern(&["-I", "1k"]);
    let mut c = server.connect();
    check(&mut c, "ms big 1\r\na\r\n", "HD\r\n");
    let value = "v".repeat(2000);
    check(
        &mut c,
        &format!("ms big 2000\r\n{value}\r\n"),
        "SERVER_ERROR object too large for cache\r\n",
    );
    check(&mut c, "mg big v\r\n", "EN\r\n");
}

/// One generated request; `{CAS}` / `{OLD}` stand for the key's CAS on the server it is sent
/// to (and one less), so CAS checks can succeed on both servers.
fn generate(rng: &mut Rng) -> (String, &'static str) {
    const PLAIN: [&str; 4] = ["k0", "k1", "k2", "n0"];
    // Keys that always travel base64-encoded ("b0", "b1", "b2").
    const BASE64: [&str; 3] = ["YjA=", "YjE=", "YjI="];
    let (key, b64) = if rng.chance(20) {
        (rng.pick(&BASE64), true)
    } else {
        (rng.pick(&PLAIN), false)
    };
    let mut flags: Vec<String> = Vec::new();

    let verb = rng.pick(&["mg", "mg", "mg", "ms", "ms", "md", "ma"]);
    // memcached 1.6.18's incr/decr keeps an item's stale and win-token marks when it updates
    // in place, and drops them when it must copy the item (another thread holds it), which
    // varies from run to run. So `ma` only goes to counter keys, and nothing marks those.
    const COUNTERS: [&str; 2] = ["n0", "YjI="];
    let (key, b64) = if verb == "ma" {
        let key = rng.pick(&COUNTERS);
        (key, key.ends_with('='))
    } else {
        (key, b64)
    };
    let mut data = None;
    match verb {
        "mg" => {
            // No `h`: tern's store keeps the fetched mark across incr/decr and sets it on the
            // executor's own CAS reads, where memcached starts a fresh item / does not read.
            for f in ["v", "c", "f", "s", "k", "q"] {
                add(rng, &mut flags, 35, f);
            }
            add(rng, &mut flags, 15, "O42");
            add(rng, &mut flags, 20, "N100");
            let recache = rng.pick(&["R30", "R1000"]);
            add(rng, &mut flags, 15, recache);
            let ttl = rng.pick(&["T0", "T100", "T200"]);
            add(rng, &mut flags, 10, ttl);
        }
        "ms" => {
            let mode = rng.pick(&["MS", "MS", "ME", "MR", "MA", "MP"]);
            if mode != "MS" || rng.chance(20) {
                flags.push(mode.to_string());
            }
            for f in ["q", "c", "k"] {
                add(rng, &mut flags, 25, f);
            }
            add(rng, &mut flags, 30, "F7");
            let ttl = rng.pick(&["T0", "T100", "T200"]);
            add(rng, &mut flags, 30, ttl);
            if rng.chance(25) {
                let cas = rng.pick(&["C{CAS}", "C{CAS}", "C{OLD}", "C1"]);
                flags.push(cas.to_string());
                add(rng, &mut flags, 50, "I");
            }
            let value = if rng.chance(40) {
                rng.below(1000).to_string()
            } else {
                let len = rng.below(12);
                (0..len)
                    .map(|i| (b'a' + ((i * 7 + len) % 26) as u8) as char)
                    .collect()
            };
            data = Some(value);
        }
        "md" => {
            for f in ["q", "k", "I"] {
                add(rng, &mut flags, 25, f);
            }
            add(rng, &mut flags, 15, "T100");
            let cas = rng.pick(&["C{CAS}", "C1"]);
            add(rng, &mut flags, 15, cas);
            add(rng, &mut flags, 10, "O7");
        }
        "ma" => {
            let mode = rng.pick(&["MI", "MD", "M+", "M-"]);
            add(rng, &mut flags, 30, mode);
            for f in ["q", "v", "c", "k"] {
                add(rng, &mut flags, 30, f);
            }
            add(rng, &mut flags, 35, "N0");
            let initial = rng.pick(&["J0", "J5", "J99"]);
            add(rng, &mut flags, 30, initial);
            let delta = rng.pick(&["D1", "D3", "D500"]);
            add(rng, &mut flags, 40, delta);
            add(rng, &mut flags, 10, "C{CAS}");
        }
        _ => unreachable!(),
    }
    if COUNTERS.contains(&key) {
        flags.retain(|f| !(f.starts_with('R') || f == "I" || verb == "mg" && f.starts_with('N')));
    }
    if b64 {
        // memcached echoes `k` in base64 when the *item* was stored with a base64 key (and not
        // for one `mg N` created); tern's store keeps no such mark and echoes the key as this
        // request sent it, so `k` is left out for these keys.
        flags.retain(|f| f != "k");
        flags.push("b".to_string());
    }
    // memcached echoes return flags in request order: shuffle them.
    for i in (1..flags.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        flags.swap(i, j);
    }
    // tern applies `T` before looking at `R`; 1.6.18 takes flags in line order, so a `T`
    // after `R` is where the two differ (see docs/protocols.md): keep `T` first.
    let position = |flags: &[String], c: char| flags.iter().position(|f| f.starts_with(c));
    if let (Some(r), Some(t)) = (position(&flags, 'R'), position(&flags, 'T')) {
        if r < t {
            flags.swap(r, t);
        }
    }
    let mut line = match &data {
        Some(value) => format!("ms {key} {}", value.len()),
        None => format!("{verb} {key}"),
    };
    for f in &flags {
        line.push(' ');
        line.push_str(f);
    }
    line.push_str("\r\n");
    if let Some(value) = data {
        line.push_str(&value);
        line.push_str("\r\n");
    }
    (line, key)
}

fn add(rng: &mut Rng, flags: &mut Vec<String>, percent: u64, flag: &str) {
    if rng.chance(percent) {
        flags.push(flag.to_string());
    }
}

/// Fills in `{CAS}`/`{OLD}` with this server's current CAS of `key` (0 when absent).
fn resolve(c: &mut Conn, template: &str, key: &str) -> String {
    if !template.contains('{') {
        return template.to_string();
    }
    let b = if key.ends_with('=') { " b" } else { "" };
    let reply = ask(c, &format!("mg {key} c{b}\r\n"));
    let cas: u64 = reply
        .split_whitespace()
        .find_map(|t| t.strip_prefix('c'))
        .and_then(|d| d.parse().ok())
        .unwrap_or(0);
    template
        .replace("{CAS}", &cas.to_string())
        .replace("{OLD}", &cas.saturating_sub(1).to_string())
}

#[test]
fn seeded_meta_stream_matches_memcached() {
    let tern = ServerProcess::tern(&[]);
    let memcached = ServerProcess::memcached(&[]);
    let mut t = tern.connect();
    let mut m = memcached.connect();
    let mut rng = Rng(0x005e_ed0f_7e4e);
    let mut history = Vec::new();
    for step in 0..1500 {
        let (template, key) = generate(&mut rng);
        // The CAS probe is itself a read, so it runs on both servers before the request.
        let (to_tern, to_memcached) = (
            resolve(&mut t, &template, key),
            resolve(&mut m, &template, key),
        );
        let ours = without_cas(&ask(&mut t, &to_tern));
        let theirs = without_cas(&ask(&mut m, &to_memcached));
        history.push((key, template.clone(), theirs.clone()));
        let same_key: Vec<_> = history
            .iter()
            .filter(|h| h.0 == key)
            .rev()
            .take(8)
            .collect();
        assert_eq!(
            ours, theirs,
            "step {step}: {template:?}; latest requests for {key} (newest first) and memcached's replies: {same_key:#?}"
        );
    }
}
