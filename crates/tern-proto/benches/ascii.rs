//! Parse and encode costs of the text protocol's hottest path: a get line with its keys split, and
//! the `VALUE` reply of a hit. `cargo bench -p tern-proto --bench ascii`.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tern_proto::ascii::{self, Command, Frame};

/// Parses the line at the front of `buf` and walks its keys; the keys' total length.
fn parse_get(buf: &[u8]) -> usize {
    match ascii::parse(buf, 1 << 20) {
        Frame::Line {
            parsed: Ok(Command::Get { keys, .. }),
            ..
        } => keys.map(<[u8]>::len).sum(),
        _ => 0,
    }
}

fn bench_ascii(c: &mut Criterion) {
    let one = b"get key:000000012345\r\nget key:000000012346\r\n";
    let ten: Vec<u8> = {
        let keys: Vec<String> = (0..10).map(|i| format!("key:0000000123{i:02}")).collect();
        format!("get {}\r\n", keys.join(" ")).into_bytes()
    };
    c.bench_function("ascii/parse_get_1_key", |b| {
        b.iter(|| parse_get(black_box(one)))
    });
    c.bench_function("ascii/parse_get_10_keys", |b| {
        b.iter(|| parse_get(black_box(&ten)))
    });
    let value = [b'v'; 256];
    let mut out = Vec::with_capacity(4096);
    c.bench_function("ascii/encode_value_256", |b| {
        b.iter(|| {
            out.clear();
            ascii::encode_value(
                &mut out,
                black_box(b"key:000000012345"),
                black_box(0),
                black_box(&value),
                None,
            );
        })
    });
    c.bench_function("ascii/encode_value_256_cas", |b| {
        b.iter(|| {
            out.clear();
            ascii::encode_value(
                &mut out,
                black_box(b"key:000000012345"),
                black_box(5),
                black_box(&value),
                Some(black_box(1_234_567_890_123)),
            );
        })
    });
}

criterion_group!(benches, bench_ascii);
criterion_main!(benches);
