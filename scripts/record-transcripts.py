#!/usr/bin/env python3
"""Records memcached's replies into the transcripts tern's tests replay
(crates/tern-server/tests/transcripts/*.json, checked by tests/transcripts.rs).

The transcripts hold the replies of memcached's newest release where they changed after the
newest one a package registry ships (the live peer CI builds: scripts/third-party-memcached.sh).
CI cannot reach memcached's repository, so these replies are recorded where it can, with a build
of the newest release, and committed.

Each file: {"about": ..., "args": [server flags], "recorded_with": "memcached X.Y.Z",
"exchanges": [{"send": TEXT, "reply": TEXT}, ...]}. TEXT is the bytes as latin-1 code points.
Every exchange goes over one connection, followed by `mn` as a barrier (memcached answers `MN`),
so a request that answers nothing (noreply) records an empty reply. To add a case, add an
exchange with its "send" (any "reply"), then re-record:

    scripts/record-transcripts.py /path/to/memcached [FILE.json ...]   (default: every file)
"""

import glob
import json
import os
import socket
import subprocess
import sys
import time

from servers import free_port, wait_accepting

BARRIER, BARRIER_REPLY = b"mn\r\n", b"MN\r\n"
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TRANSCRIPTS = os.path.join(HERE, "crates", "tern-server", "tests", "transcripts")


def exchange(conn, send):
    conn.sendall(send + BARRIER)
    reply = b""
    deadline = time.monotonic() + 5
    while not reply.endswith(BARRIER_REPLY):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no barrier after {send!r}: got {reply!r}")
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError(f"the server closed the connection after {send!r}")
        reply += chunk
    return reply[: -len(BARRIER_REPLY)]


def record(memcached, path):
    with open(path, encoding="utf-8") as f:
        transcript = json.load(f)
    port = free_port()
    args = [memcached, "-l", "127.0.0.1", "-p", str(port), "-U", "0"] + transcript["args"]
    if os.geteuid() == 0:
        args += ["-u", "root"]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_accepting(port, 5):
            raise RuntimeError(f"{memcached} did not start")
        with socket.create_connection(("127.0.0.1", port)) as conn:
            version = exchange(conn, b"version\r\n").decode().split()[1]
            for step in transcript["exchanges"]:
                step["reply"] = exchange(conn, step["send"].encode("latin-1")).decode("latin-1")
    finally:
        server.kill()
        server.wait()
    transcript["recorded_with"] = f"memcached {version}"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(transcript, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print(f"{os.path.relpath(path, HERE)}: {len(transcript['exchanges'])} replies of memcached {version}")


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    files = sys.argv[2:] or sorted(glob.glob(os.path.join(TRANSCRIPTS, "*.json")))
    for path in files:
        record(sys.argv[1], path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
