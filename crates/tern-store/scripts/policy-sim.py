#!/usr/bin/env python3
"""Item-level reference points for benches/hit_ratio.rs: the hit ratio of FIFO, LRU, CLOCK (one
reference bit, what merge approximates with whole segments), CLOCK with a 2-bit counter and
S3-FIFO (10% small queue, ghost queue as large as the main one) on the same kind of workload:
Zipf(0.99) over 1 M keys, cache-aside, 3 M requests after 1 M of warm-up, a cache of CAPACITY
items (default 140,000: about what the bench's 16 MB heap holds of 100-byte values).

    python3 crates/tern-store/scripts/policy-sim.py [CAPACITY]

Pure Python, about a minute."""
import bisect
import collections
import random
import sys

KEYS, WARM_UP, REQUESTS = 1_000_000, 1_000_000, 3_000_000
capacity = int(sys.argv[1]) if len(sys.argv) > 1 else 140_000

rng = random.Random(42)
cdf, total = [], 0.0
for rank in range(1, KEYS + 1):
    total += rank**-0.99
    cdf.append(total)
keys = [bisect.bisect_left(cdf, rng.random() * total) for _ in range(WARM_UP + REQUESTS)]


def ratio(hits):
    return f"{hits / REQUESTS:.2%}"


def fifo():
    queue, held, hits = collections.deque(), set(), 0
    for n, k in enumerate(keys):
        if k in held:
            hits += n >= WARM_UP
            continue
        held.add(k)
        queue.append(k)
        if len(queue) > capacity:
            held.discard(queue.popleft())
    return ratio(hits)


def lru():
    held, hits = collections.OrderedDict(), 0
    for n, k in enumerate(keys):
        if k in held:
            hits += n >= WARM_UP
            held.move_to_end(k)
            continue
        held[k] = True
        if len(held) > capacity:
            held.popitem(last=False)
    return ratio(hits)


def clock_evict(queue, count):
    """Evicts the first item of `queue` whose count is 0; those before it go to the back, one
    count lower."""
    while True:
        victim = queue.popleft()
        if count[victim]:
            count[victim] -= 1
            queue.append(victim)
        else:
            del count[victim]
            return


def clock(max_count):
    queue, count, hits = collections.deque(), {}, 0
    for n, k in enumerate(keys):
        if k in count:
            hits += n >= WARM_UP
            count[k] = min(count[k] + 1, max_count)
            continue
        count[k] = 0
        queue.append(k)
        if len(queue) > capacity:
            clock_evict(queue, count)
    return ratio(hits)


def s3fifo():
    small_cap = capacity // 10
    main_cap = capacity - small_cap
    small, main, count = collections.deque(), collections.deque(), {}
    ghost, hits = collections.OrderedDict(), 0

    def to_main(k):
        if len(main) >= main_cap:
            clock_evict(main, count)
        main.append(k)
        count[k] = 0

    for n, k in enumerate(keys):
        if k in count:
            hits += n >= WARM_UP
            count[k] = min(count[k] + 1, 3)
            continue
        if k in ghost:
            del ghost[k]
            to_main(k)
            continue
        if len(small) >= small_cap:
            victim = small.popleft()
            if count[victim]:
                to_main(victim)
            else:
                del count[victim]
                ghost[victim] = True
                if len(ghost) > main_cap:
                    ghost.popitem(last=False)
        small.append(k)
        count[k] = 0
    return ratio(hits)


print(f"| policy (item level, {capacity} items) | hit ratio |")
print("|---|---|")
for name, run in [("fifo", fifo), ("lru", lru), ("clock, 1 bit", lambda: clock(1)),
                  ("clock, 2 bits", lambda: clock(3)), ("s3fifo", s3fifo)]:
    print(f"| {name} | {run()} |")
print(f"| best static set (the {capacity} most popular keys) | {cdf[capacity - 1] / total:.2%} |")
