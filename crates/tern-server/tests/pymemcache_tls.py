"""pymemcache over TLS: python3 pymemcache_tls.py PORT CA_FILE [CLIENT_CERT CLIENT_KEY]."""
import ssl
import sys

from pymemcache.client.base import Client

port, ca = int(sys.argv[1]), sys.argv[2]
context = ssl.create_default_context(cafile=ca)
if len(sys.argv) == 5:
    context.load_cert_chain(sys.argv[3], sys.argv[4])
client = Client(("localhost", port), tls_context=context, connect_timeout=10, timeout=10)
client.set("tls-key", b"over tls")
assert client.get("tls-key") == b"over tls", client.get("tls-key")
many = {f"k{i}": str(i).encode() for i in range(100)}
client.set_many(many)
assert client.get_many(list(many)) == many
assert client.incr("k7", 5) == 12
print("pymemcache over TLS: ok")
