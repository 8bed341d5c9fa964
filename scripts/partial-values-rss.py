#!/usr/bin/env python3
"""Server RSS while many clients are part-way through uploading a large value (issue 26): each of
CONNS connections sends a set's line and SENT bytes of a SIZE-byte value, then stops. Prints the
server's RSS before, with every upload waiting, and after the uploads finish (or are refused)
and the clients close, for tern and memcached side by side at the same -m.

  scripts/partial-values-rss.py TERN MEMCACHED [CONNS] [SENT] [SIZE] [MEMORY_MB] [-- TERN_ARGS...]

A measurement, not a test: it asserts nothing.
"""
import os
import resource
import socket
import subprocess
import sys
import time

from servers import free_port, rss_mib, wait_accepting


def settle(pid):
    """RSS once it stops moving (the server has read what the clients sent)."""
    last = -1.0
    for _ in range(50):
        time.sleep(0.2)
        now = rss_mib(pid)
        if abs(now - last) < 0.1:
            return now
        last = now
    return last


def measure(name, cmd, conns, sent, size):
    port = free_port()
    server = subprocess.Popen(cmd + ["-l", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL)
    try:
        wait_accepting(port, 5)
        before = settle(server.pid)
        clients = []
        for i in range(conns):
            c = socket.create_connection(("127.0.0.1", port))
            c.sendall(f"set k{i} 0 0 {size}\r\n".encode() + b"v" * sent)
            clients.append(c)
        waiting = settle(server.pid)
        refused = 0
        for c in clients:
            c.sendall(b"v" * (size - sent) + b"\r\n")
        for c in clients:
            reply = b""
            while not reply.endswith(b"\r\n"):
                reply += c.recv(100)
            # A refusal may come before the rest of the value: its answer is the first line.
            if reply.startswith(b"SERVER_ERROR"):
                refused += 1
            c.close()
        after = settle(server.pid)
        print(f"{name}: RSS {before:.1f} MiB before, {waiting:.1f} MiB with {conns} uploads "
              f"of {sent} of {size} bytes waiting, {after:.1f} MiB after they finished and "
              f"closed ({refused} refused)")
    finally:
        server.terminate()
        server.wait()


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        extra = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    tern, memcached = args[0], args[1]
    conns = int(args[2]) if len(args) > 2 else 1000
    sent = int(args[3]) if len(args) > 3 else 100_000
    size = int(args[4]) if len(args) > 4 else 500_000
    memory = args[5] if len(args) > 5 else "64"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    maxconns = str(conns + 100)
    measure("memcached", [memcached, "-u", "root", "-U", "0", "-m", memory, "-c", maxconns],
            conns, sent, size)
    measure("tern", [tern, "serve", "-m", memory, "-c", maxconns] + extra, conns, sent, size)


if __name__ == "__main__":
    main()
