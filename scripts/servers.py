"""What the measuring scripts beside this file share about the servers they start: a free port
on 127.0.0.1, waiting until a server accepts on it, and a process's resident memory. Imported by name (a script's own directory is on
Python's path)."""


import socket
import time


def free_port():
    """A TCP port on 127.0.0.1 that nothing is bound to now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_accepting(port, seconds):
    """Waits until something accepts on 127.0.0.1:`port`, at most `seconds`; whether it did."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def rss_mib(pid):
    """Resident set size of process `pid` in MiB (0 when /proc says none)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0
