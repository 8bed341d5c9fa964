"""pymemcache (PyPI) against a server on 127.0.0.1:PORT: get/set/multi-get/cas/incr/touch/delete.

Run by tests/clients.rs; exits non-zero with a message on the first wrong answer.
"""
import sys

from pymemcache.client.base import Client


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")


def main(port):
    c = Client(("127.0.0.1", port), connect_timeout=10, timeout=10)
    check("set", c.set("a", b"1", noreply=False), True)
    check("get", c.get("a"), b"1")
    check("get miss", c.get("missing"), None)
    check("set b", c.set("b", b"two", expire=100, noreply=False), True)
    check("get_many", c.get_many(["a", "b", "missing"]), {"a": b"1", "b": b"two"})
    check("add existing", c.add("a", b"x", noreply=False), False)
    check("replace", c.replace("a", b"10", noreply=False), True)
    check("append", c.append("b", b"!", noreply=False), True)
    check("prepend", c.prepend("b", b"<", noreply=False), True)
    check("get b", c.get("b"), b"<two!")

    value, cas = c.gets("a")
    check("gets", value, b"10")
    check("cas ok", c.cas("a", b"11", cas, noreply=False), True)
    check("cas stale", c.cas("a", b"12", cas, noreply=False), False)
    check("cas missing", c.cas("missing", b"1", 1, noreply=False), None)
    check("gets_many", sorted(c.gets_many(["a", "b"]).keys()), ["a", "b"])

    check("incr", c.incr("a", 5, noreply=False), 16)
    check("decr", c.decr("a", 100, noreply=False), 0)
    check("incr missing", c.incr("missing", 1, noreply=False), None)

    check("touch", c.touch("a", 100, noreply=False), True)
    check("touch missing", c.touch("missing", 100, noreply=False), False)

    check("delete", c.delete("a", noreply=False), True)
    check("delete missing", c.delete("a", noreply=False), False)
    check("get deleted", c.get("a"), None)

    # noreply (pymemcache's default) pipelines without waiting.
    for i in range(100):
        c.set(f"k{i}", str(i).encode())
    got = c.get_many([f"k{i}" for i in range(100)])
    check("noreply sets", len(got), 100)
    check("noreply value", got["k42"], b"42")

    big = b"x" * 500_000
    check("big set", c.set("big", big, noreply=False), True)
    check("big get", c.get("big"), big)

    check("flush_all", c.flush_all(noreply=False), True)
    check("after flush", c.get("b"), None)
    check("version", c.version().startswith(b"1.6"), True)
    stats = c.stats()
    check("stats has cmd_get", b"cmd_get" in stats, True)
    c.quit()
    print("pymemcache: all checks passed")


if __name__ == "__main__":
    main(int(sys.argv[1]))
