//! memcached's admin and debug commands and its defences, against the real server and, where
//! the answer is deterministic, against Debian's memcached side by side.

use std::io::Read;

use tern_testkit::{Conn, ServerProcess};

/// Everything the server sends on `request` until it closes the connection.
fn reply_until_closed(conn: &mut Conn, request: &[u8]) -> Vec<u8> {
    conn.send(request);
    let mut got = Vec::new();
    conn.stream
        .read_to_end(&mut got)
        .expect("the server closes the connection");
    got
}

#[test]
fn http_request_lines_are_hung_up_on_without_a_reply() {
    let tern = ServerProcess::tern(&[]);
    let memcached = ServerProcess::memcached(&[]);
    let requests: [&[u8]; 4] = [
        b"GET / HTTP/1.0\r\nHost: cache\r\n\r\n",
        b"PUT /a HTTP/1.1\r\n",
        b"DELETE HTTP/1.1\r\n",
        // Replies queued before the HTTP line are dropped too.
        b"version\r\nPOST /x HTTP/1.1\r\nversion\r\n",
    ];
    for request in requests {
        let ours = reply_until_closed(&mut tern.connect(), request);
        let theirs = reply_until_closed(&mut memcached.connect(), request);
        assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(request));
        assert!(ours.is_empty());
    }
    // A line that only looks like one is answered as memcached answers it.
    let mut c = tern.connect();
    c.expect(b"GET / HTTP/1.0 x\r\n", b"ERROR\r\n");
    c.expect(b"get a HTTP/1.1\r\n", b"END\r\n");
}
