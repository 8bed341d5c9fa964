//! Parse and encode costs of the binary and meta protocols on the hot path (a get and a set),
//! so changes to the parsers show up as numbers. `cargo bench -p tern-proto`.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tern_proto::{binary, meta};

fn binary_frame(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut v = vec![binary::REQUEST_MAGIC, opcode];
    v.extend_from_slice(&(key.len() as u16).to_be_bytes());
    v.push(extras.len() as u8);
    v.extend_from_slice(&[0, 0, 0]);
    v.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    v.extend_from_slice(&[0; 12]);
    v.extend_from_slice(extras);
    v.extend_from_slice(key);
    v.extend_from_slice(value);
    v
}

fn bench_binary(c: &mut Criterion) {
    let get = binary_frame(0x00, &[], b"key:000000012345", &[]);
    let set = binary_frame(0x01, &[0; 8], b"key:000000012345", &[b'v'; 256]);
    let value = [b'v'; 256];
    let mut out = Vec::with_capacity(4096);
    c.bench_function("binary/parse_get", |b| {
        b.iter(|| binary::parse_request(black_box(&get), 1 << 20))
    });
    c.bench_function("binary/parse_set_256", |b| {
        b.iter(|| binary::parse_request(black_box(&set), 1 << 20))
    });
    c.bench_function("binary/write_value_256", |b| {
        b.iter(|| {
            out.clear();
            binary::write_value(
                &mut out,
                binary::Opcode::GetK,
                1,
                2,
                3,
                Some(b"key:000000012345"),
                black_box(&value),
            );
        })
    });
}

fn bench_meta(c: &mut Criterion) {
    let get = b"mg key:000000012345 v f t c k O123";
    let set = b"ms key:000000012345 256 T60 F5 c";
    let value = [b'v'; 256];
    let item = meta::ItemInfo {
        cas: 123_456,
        client_flags: 5,
        size: 256,
        ttl: Some(60),
        ..meta::ItemInfo::default()
    };
    let mut out = Vec::with_capacity(4096);
    c.bench_function("meta/parse_mg_6_flags", |b| {
        b.iter(|| meta::parse(black_box(get)))
    });
    c.bench_function("meta/parse_ms", |b| b.iter(|| meta::parse(black_box(set))));
    let req = meta::parse(get).unwrap();
    c.bench_function("meta/write_reply_va_256", |b| {
        b.iter(|| {
            out.clear();
            meta::write_reply(
                &mut out,
                black_box(&req),
                meta::Code::Value,
                Some(&item),
                &value,
            )
        })
    });
}

criterion_group!(benches, bench_binary, bench_meta);
criterion_main!(benches);
