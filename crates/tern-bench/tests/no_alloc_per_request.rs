//! The generator allocates nothing per request: ten times the requests cost (almost) no more
//! allocations, only the per-second ticks and start-up do.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use tern_bench::run::run;
use tern_bench::workload::Workload;
use tern_testkit::ServerProcess;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed unchanged to the system allocator, which upholds GlobalAlloc's
// contract; the counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_for(requests: u64, port: u16, protocol: &str) -> u64 {
    let w = Workload {
        servers: vec![format!("127.0.0.1:{port}")],
        protocol: protocol.into(),
        mix: "get:6,set:2,multiget:1,delete:1".into(),
        keys: 1_000,
        preload: false,
        connections: 2,
        pipeline: 8,
        value_size: "16-512".into(),
        requests: Some(requests),
        ..Workload::default()
    };
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let r = run(&w, None, &mut |_| {}).unwrap();
    assert_eq!(r.requests, requests);
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

#[test]
fn ten_times_the_requests_cost_no_more_allocations() {
    let mc = ServerProcess::memcached(&[]);
    for protocol in ["ascii", "meta", "binary"] {
        let small = allocations_for(1_000, mc.port, protocol);
        let large = allocations_for(10_000, mc.port, protocol);
        eprintln!("{protocol}: {small} allocations for 1,000 requests, {large} for 10,000");
        // A once-a-second tick allocates a few times; 9,000 more requests must not.
        assert!(
            large < small + 200,
            "{protocol}: {small} allocations for 1,000 requests, {large} for 10,000"
        );
    }
}
