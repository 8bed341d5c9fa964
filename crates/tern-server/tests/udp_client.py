"""A UDP memcached client written from memcached's protocol.txt, run by udp.rs against tern.

Usage: udp_client.py <tcp port> <udp port>. Stores values over TCP, reads them back over UDP
with get, gets and gat, reassembling multi-datagram replies by their frame headers. Exits
non-zero (with the reason) on any mismatch.
"""

import socket
import struct
import sys

tcp_port, udp_port = int(sys.argv[1]), int(sys.argv[2])
tcp = socket.create_connection(("127.0.0.1", tcp_port))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.settimeout(5)

values = {b"small": b"v", b"page": b"p" * 1392, b"large": bytes(range(256)) * 40}
for key, value in values.items():
    tcp.sendall(b"set %s 5 0 %d\r\n%s\r\n" % (key, len(value), value))
    reply = tcp.recv(100)
    assert reply == b"STORED\r\n", reply


def request(request_id, payload):
    """Sends one request datagram; returns the messages of the reply, reassembled."""
    udp.sendto(struct.pack(">HHHH", request_id, 0, 1, 0) + payload, ("127.0.0.1", udp_port))
    parts = {}
    total = None
    while total is None or len(parts) < total:
        datagram = udp.recv(65536)
        rid, seq, count, reserved = struct.unpack(">HHHH", datagram[:8])
        assert rid == request_id and reserved == 0, (rid, reserved)
        assert len(datagram) <= 1400, len(datagram)
        total = count
        parts[seq] = datagram[8:]
    return b"".join(parts[i] for i in range(total))


for n, (key, value) in enumerate(values.items()):
    got = request(100 + n, b"get %s\r\n" % key)
    want = b"VALUE %s 5 %d\r\n%s\r\nEND\r\n" % (key, len(value), value)
    assert got == want, (key, got[:80])
    got = request(200 + n, b"gat 300 %s\r\n" % key)
    assert got == want, (key, got[:80])
    got = request(300 + n, b"gets %s\r\n" % key)
    assert got.startswith(b"VALUE %s 5 %d " % (key, len(value))), got[:80]
    assert got.endswith(b"\r\n%s\r\nEND\r\n" % value), got[-80:]

assert request(400, b"get nothing\r\n") == b"END\r\n"
assert request(401, b"version\r\n").startswith(b"VERSION ")
print("udp client: ok")
