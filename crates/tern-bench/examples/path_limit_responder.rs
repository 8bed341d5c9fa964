//! The path's limit: a memcached text-protocol responder that stores nothing.
//!
//! One thread, one epoll loop (mio, edge-triggered), one read and one write per wake-up, like
//! tern's workers; every `get` is answered with the same value (each key named gets a `VALUE`
//! line), every `set` with `STORED` after its data block is skipped. What tern spends beyond
//! this responder's CPU per request is what its store, parser and bookkeeping cost; see
//! `crates/tern-bench/scripts/path-limit.sh`, which runs it beside tern and memcached.
//!
//!   cargo run --release -p tern-bench --example path_limit_responder -- PORT [VALUE_BYTES]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

const LISTENER: Token = Token(usize::MAX);

struct Client {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
    sent: usize,
}

fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args
        .next()
        .and_then(|p| p.parse().ok())
        .expect("usage: path_limit_responder PORT [VALUE_BYTES]");
    let value_bytes: usize = args.next().map_or(256, |v| v.parse().expect("VALUE_BYTES"));
    // What follows the key in every VALUE reply, built once: flags, length, the data.
    let value = [
        format!(" 0 {value_bytes}\r\n").into_bytes(),
        vec![b'x'; value_bytes],
        b"\r\n".to_vec(),
    ]
    .concat();

    let mut poll = Poll::new()?;
    let mut listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut clients: HashMap<Token, Client> = HashMap::new();
    let mut next_token = 0;
    let mut events = Events::with_capacity(1024);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        poll.poll(&mut events, None)?;
        for event in events.iter() {
            if event.token() == LISTENER {
                while let Ok((mut stream, _)) = listener.accept() {
                    let _ = stream.set_nodelay(true);
                    let token = Token(next_token);
                    next_token += 1;
                    poll.registry().register(
                        &mut stream,
                        token,
                        Interest::READABLE | Interest::WRITABLE,
                    )?;
                    let client = Client {
                        stream,
                        input: Vec::new(),
                        output: Vec::new(),
                        sent: 0,
                    };
                    clients.insert(token, client);
                }
                continue;
            }
            let Some(client) = clients.get_mut(&event.token()) else {
                continue;
            };
            if !serve(client, &mut chunk, &value) {
                let mut gone = clients.remove(&event.token()).expect("present");
                let _ = poll.registry().deregister(&mut gone.stream);
            }
        }
    }
}

/// Reads what the socket has, answers every complete request, writes the answers at once.
/// False when the client is gone.
fn serve(client: &mut Client, chunk: &mut [u8], value: &[u8]) -> bool {
    let mut open = true;
    loop {
        match client.stream.read(chunk) {
            Ok(0) => {
                open = false;
                break;
            }
            Ok(n) => client.input.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    let used = answer(&client.input, &mut client.output, value);
    client.input.drain(..used);
    while client.sent < client.output.len() {
        match client.stream.write(&client.output[client.sent..]) {
            Ok(n) => client.sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return open,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    client.output.clear();
    client.sent = 0;
    open
}

/// Appends the answer to every complete request in `input`; returns the bytes they took.
/// `value` is what follows the key in a `VALUE` reply (` <flags> <bytes>\r\n<data>\r\n`).
fn answer(input: &[u8], out: &mut Vec<u8>, value: &[u8]) -> usize {
    let mut at = 0;
    while let Some(eol) = input[at..].iter().position(|&b| b == b'\n') {
        let line = input[at..at + eol]
            .strip_suffix(b"\r")
            .unwrap_or(&input[at..at + eol]);
        let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
        match words.next() {
            Some(b"get") | Some(b"gets") => {
                for key in words {
                    out.extend_from_slice(b"VALUE ");
                    out.extend_from_slice(key);
                    out.extend_from_slice(value);
                }
                out.extend_from_slice(b"END\r\n");
            }
            Some(b"set") => {
                let bytes: usize = words
                    .nth(3)
                    .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
                    .unwrap_or(0);
                let data_end = at + eol + 1 + bytes + 2;
                if data_end > input.len() {
                    // The data block has not all arrived: answer it next time.
                    return at;
                }
                out.extend_from_slice(b"STORED\r\n");
                at = data_end;
                continue;
            }
            Some(b"version") => out.extend_from_slice(b"VERSION path-limit-responder\r\n"),
            _ => out.extend_from_slice(b"ERROR\r\n"),
        }
        at += eol + 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::answer;

    #[test]
    fn gets_and_sets_are_answered_and_a_partial_set_waits() {
        let mut out = Vec::new();
        let input = b"get a bb\r\nset k 0 0 3\r\nabc\r\nset k 0 0 3\r\na";
        let used = answer(input, &mut out, b" 0 2\r\nvv\r\n");
        assert_eq!(
            out,
            b"VALUE a 0 2\r\nvv\r\nVALUE bb 0 2\r\nvv\r\nEND\r\nSTORED\r\n"
        );
        assert_eq!(&input[used..], b"set k 0 0 3\r\na");
    }
}
