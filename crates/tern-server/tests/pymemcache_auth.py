"""pymemcache against tern -Y: python3 pymemcache_auth.py PORT USER PASSWORD.

The credentials go in pymemcache's own `set` (memcached's authentication); then normal use."""
import sys

from pymemcache.client.base import Client

port, user, password = int(sys.argv[1]), sys.argv[2], sys.argv[3]
# With replies awaited, a refused password fails at the authenticating set itself.
client = Client(("127.0.0.1", port), connect_timeout=10, timeout=10, default_noreply=False)
assert client.set("auth", f"{user} {password}")
client.set("k", b"v")
assert client.get("k") == b"v"
assert client.get_many(["k", "missing"]) == {"k": b"v"}
print("authenticated: ok")
