//! Replies of memcached's newest release where they changed after the newest one CI can build
//! (Debian 13's 1.6.38, the live peer of `differential.rs`): each `tests/transcripts/*.json` holds
//! requests and the replies memcached gave, recorded by `scripts/record-transcripts.py` with a
//! build of the newest release (the file says which). tern must give the same bytes.

use std::path::Path;

use serde_json::Value;
use tern_testkit::ServerProcess;

const BARRIER: &[u8] = b"mn\r\n";
const BARRIER_REPLY: &[u8] = b"MN\r\n";

/// A transcript's text as bytes: each char is one byte (the recorder writes latin-1).
fn bytes(text: &str) -> Vec<u8> {
    text.chars()
        .map(|c| u8::try_from(u32::from(c)).expect("a transcript holds latin-1 only"))
        .collect()
}

fn replay(path: &Path) -> usize {
    let transcript: Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("a JSON transcript");
    let args: Vec<&str> = transcript["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let recorded_with = transcript["recorded_with"].as_str().unwrap();
    assert!(
        recorded_with.starts_with("memcached 1."),
        "{}: not recorded (run scripts/record-transcripts.py)",
        path.display()
    );
    let server = ServerProcess::tern(&args);
    let mut conn = server.connect();
    let exchanges = transcript["exchanges"].as_array().unwrap();
    for step in exchanges {
        let send = bytes(step["send"].as_str().unwrap());
        let expected = bytes(step["reply"].as_str().unwrap());
        let mut request = send.clone();
        request.extend_from_slice(BARRIER);
        let mut reply = conn.request(&request, BARRIER_REPLY);
        reply.truncate(reply.len() - BARRIER_REPLY.len());
        assert_eq!(
            String::from_utf8_lossy(&reply),
            String::from_utf8_lossy(&expected),
            "{}: tern's reply to {:?} is not {recorded_with}'s",
            path.display(),
            String::from_utf8_lossy(&send)
        );
    }
    exchanges.len()
}

#[test]
fn replies_match_the_newest_memcached_transcripts() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/transcripts");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no transcripts in {}", dir.display());
    let replayed: usize = files.iter().map(|f| replay(f)).sum();
    assert!(replayed > 0);
}
