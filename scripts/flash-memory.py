#!/usr/bin/env python3
"""Memory per item held on flash, tern against memcached side by side (issue 27's item 2).

Each server gets the same `-m` and the same size of flash file (`-o ext_path=FILE:SIZE`), then
COUNT items of VALUE bytes are stored (pipelined, `noreply`), several times what `-m` holds.
Once the flash tier has settled, the script reports the server's resident memory, how many of
the items a sample of keys finds (and so how many the server holds), the DRAM each item on
flash costs (tern: the index, `hash_bytes`, over the items; both: the resident memory beyond
an empty server's over the items held), and the false flash reads: gets of keys never stored
that read flash anyway (a tag that matched), over those gets.

    scripts/flash-memory.py [--count 2000000] [--value 1024] [-m 64] [--flash-gib 4]
        [--dir /tmp] [--tern target/release/tern] [--memcached PATH] [--sample 100000]
        [--rate 25000]

Long: about 2 minutes per server for the defaults on a 2-core machine. Not a test (it asserts
nothing): its output goes to docs/flash.md with its date and commit.
"""

import argparse
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from servers import free_port, rss_mib, wait_accepting  # noqa: E402


def stats(sock, group=b""):
    sock.sendall(b"stats " + group + b"\r\n" if group else b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise RuntimeError("server closed the connection")
        buf += chunk
    out = {}
    for line in buf.decode().split("\r\n"):
        parts = line.split(" ")
        if len(parts) == 3 and parts[0] == "STAT":
            out[parts[1]] = parts[2]
    return out


def key(n):
    return b"key:%d" % n


def load(port, count, value, rate):
    """Stores `count` items with `noreply`, in batches, at most `rate` a second (a flash tier
    takes what eviction hands it only as fast as its file takes writes: faster, both servers
    evict instead), then a `mn` to wait for them all."""
    sock = socket.create_connection(("127.0.0.1", port))
    body = b"x" * value
    batch = 256
    started = time.time()
    for start in range(0, count, batch):
        parts = []
        for n in range(start, min(count, start + batch)):
            parts.append(b"set %s 0 0 %d noreply\r\n%s\r\n" % (key(n), value, body))
        sock.sendall(b"".join(parts))
        ahead = start / rate - (time.time() - started)
        if ahead > 0:
            time.sleep(ahead)
    sock.sendall(b"mn\r\n")
    buf = b""
    while not buf.endswith(b"MN\r\n"):
        buf += sock.recv(1 << 16)
    return sock


def settle(sock, patience=120):
    """Waits until the flash tier has no buffer waiting and wrote nothing for two seconds, at
    most `patience` seconds."""
    deadline = time.time() + patience
    last = None
    while time.time() < deadline:
        s = stats(sock)
        written = s.get("extstore_objects_written")
        if s.get("extstore_io_queue", "0") == "0" and written == last:
            return
        last = written
        time.sleep(2)


def found(sock, keys):
    """How many of `keys` a get finds, in multigets of 100."""
    hits = 0
    for i in range(0, len(keys), 100):
        chunk = keys[i : i + 100]
        sock.sendall(b"get " + b" ".join(key(n) for n in chunk) + b"\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += sock.recv(1 << 20)
        hits += buf.count(b"VALUE ")
    return hits


def run(name, cmd, port, args, flash_path):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if not wait_accepting(port, 30):
            raise RuntimeError(f"{name} did not start: {proc.stderr.read().decode()}")
        empty_rss = rss_mib(proc.pid)
        started = time.time()
        sock = load(port, args.count, args.value, args.rate)
        loaded = time.time() - started
        settle(sock)
        rss = rss_mib(proc.pid)
        rng = random.Random(1)
        sample = [rng.randrange(args.count) for _ in range(args.sample)]
        hits = found(sock, sample)
        held = hits / len(sample) * args.count
        before = stats(sock)
        never = [args.count + rng.randrange(10 * args.count) for _ in range(args.sample)]
        found(sock, never)
        after = stats(sock)
        false_reads = int(after.get("extstore_false_reads", 0)) - int(
            before.get("extstore_false_reads", 0)
        )
        misses_read = int(after.get("extstore_objects_read", 0)) - int(
            before.get("extstore_objects_read", 0)
        )
        s = after
        on_flash = int(s.get("extstore_objects_used", 0))
        print(f"== {name}: {' '.join(cmd[1:])}")
        print(f"  load: {args.count} x {args.value} B in {loaded:.0f} s")
        print(f"  resident memory: {rss:.1f} MiB (empty: {empty_rss:.1f} MiB)")
        print(
            f"  readable: {hits}/{len(sample)} sampled keys = {100 * hits / len(sample):.2f} %"
            f" (about {held:,.0f} items held), curr_items {s.get('curr_items')},"
            f" on flash {on_flash}"
        )
        if held:
            print(
                f"  DRAM per item held, beyond an empty server: "
                f"{(rss - empty_rss) * 2**20 / held:.1f} B"
            )
        if on_flash and "hash_bytes" in s:
            print(
                f"  index (hash_bytes) per item: {int(s['hash_bytes']) / int(s['curr_items']):.1f} B"
            )
        print(
            f"  gets of {len(sample)} keys never stored: flash reads {misses_read},"
            f" false reads {false_reads} ({100 * false_reads / len(sample):.4f} %)"
        )
        print(
            f"  flash: written {s.get('extstore_bytes_written')} B,"
            f" write amplification {s.get('extstore_write_amplification', '-')},"
            f" page evictions {s.get('extstore_page_evictions')}, RAM evictions {s.get('evictions')}"
        )
        sys.stdout.flush()
    finally:
        proc.terminate()
        proc.wait()
        if os.path.exists(flash_path):
            os.unlink(flash_path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=2_000_000)
    p.add_argument("--value", type=int, default=1024)
    p.add_argument("-m", type=int, default=64)
    p.add_argument("--flash-gib", type=int, default=4)
    p.add_argument("--dir", default=tempfile.gettempdir())
    p.add_argument("--tern", default="target/release/tern")
    p.add_argument("--memcached", default=shutil.which("memcached"))
    p.add_argument("--sample", type=int, default=100_000)
    p.add_argument("--rate", type=int, default=25_000, help="sets a second while loading")
    p.add_argument("--only", choices=["tern", "memcached"], help="run one server only")
    args = p.parse_args()
    flash = os.path.join(args.dir, f"flash-memory-{os.getpid()}")
    ext = f"ext_path={flash}:{args.flash_gib}g"
    port = free_port()
    if args.only != "memcached":
        run(
            "tern",
            [args.tern, "serve", "-l", "127.0.0.1", "-p", str(port), "-m", str(args.m), "-o", ext],
            port,
            args,
            flash,
        )
    if args.memcached and args.only != "tern":
        port = free_port()
        # memcached refuses to run as root without -u.
        user = ["-u", "root"] if os.geteuid() == 0 else []
        run(
            "memcached",
            [args.memcached, *user, "-l", "127.0.0.1", "-p", str(port), "-U", "0",
             "-m", str(args.m), "-o", ext],
            port,
            args,
            flash,
        )


if __name__ == "__main__":
    main()
