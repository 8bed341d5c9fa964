//! `tern bench --tls-ca` against tern's own TLS server (`-Z`): replies of many records.
//! (Debian's memcached 1.6.18 `-Z` stalls now and then on this workload, with no bytes left in
//! either socket, whichever client drives it, so tern is the server here.)

use tern_bench::run::run;
use tern_bench::workload::Workload;
use tern_testkit::ServerProcess;

/// Replies of many records each, larger than the generator's 64 KiB of ciphertext read at once
/// and than its reply buffer, between sets as large: every byte still decrypts into its reply.
#[test]
fn tls_replies_larger_than_one_read_arrive_whole() {
    let certs = tern_testkit::tls::Certs::generate();
    let o = format!(
        "ssl_chain_cert={},ssl_key={}",
        certs.path("server.pem"),
        certs.path("server.key")
    );
    let tern = ServerProcess::tern(&["-Z", "-o", &o]);
    let w = Workload {
        servers: vec![format!("127.0.0.1:{}", tern.port)],
        tls_ca: Some(certs.path("ca.pem")),
        connections: 2,
        pipeline: 4,
        keys: 50,
        value_size: "150000".into(),
        mix: "get:4,multiget:1,set:1".into(),
        multiget: 3,
        requests: Some(600),
        ..Workload::default()
    };
    let r = run(&w, None, &mut |_| {}).expect("run");
    assert_eq!(r.requests, 600);
    assert_eq!(r.errors_total, 0, "{:?}", r.counts.errors);
    assert_eq!(r.counts.unanswered, 0);
    assert_eq!(r.hit_ratio, Some(1.0));
}
