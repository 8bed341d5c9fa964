"""Ask libmemcached itself (through ctypes, no headers needed) where weighted ketama puts each key.

Usage: libmemcached_ketama.py [--hash-only] host:port[,host:port...] key [key ...]
Prints one line per key, "<key> <server index>", and (unless --hash-only) stores each key through
libmemcached so the caller can also check where it really landed.
"""
import ctypes
import sys

# enum memcached_behavior_t and memcached_server_distribution_t (libmemcached/types/behavior.h).
BEHAVIOR_DISTRIBUTION = 9
BEHAVIOR_KETAMA_WEIGHTED = 16
# KETAMA_WEIGHTED selects CONSISTENT_WEIGHTED (5) with MD5 for both key and point hashes.
DISTRIBUTION_CONSISTENT_WEIGHTED = 5

lib = ctypes.CDLL("libmemcached.so.11")
lib.memcached_create.restype = ctypes.c_void_p
lib.memcached_create.argtypes = [ctypes.c_void_p]
lib.memcached_behavior_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
lib.memcached_behavior_get.restype = ctypes.c_uint64
lib.memcached_behavior_get.argtypes = [ctypes.c_void_p, ctypes.c_int]
lib.memcached_server_add.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint16]
lib.memcached_server_add_unix_socket.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.memcached_generate_hash.restype = ctypes.c_uint32
lib.memcached_generate_hash.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
lib.memcached_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                              ctypes.c_size_t, ctypes.c_long, ctypes.c_uint32]

args = sys.argv[1:]
store = args[0] != "--hash-only"
if not store:
    args = args[1:]
memc = lib.memcached_create(None)
for server in args[0].split(","):
    if server.startswith("/"):
        assert lib.memcached_server_add_unix_socket(memc, server.encode()) == 0, server
        continue
    host, port = server.rsplit(":", 1)
    assert lib.memcached_server_add(memc, host.encode(), int(port)) == 0, server
assert lib.memcached_behavior_set(memc, BEHAVIOR_KETAMA_WEIGHTED, 1) == 0
assert lib.memcached_behavior_get(memc, BEHAVIOR_KETAMA_WEIGHTED) == 1
assert lib.memcached_behavior_get(memc, BEHAVIOR_DISTRIBUTION) == DISTRIBUTION_CONSISTENT_WEIGHTED
for key in args[1:]:
    k = key.encode()
    index = lib.memcached_generate_hash(memc, k, len(k))
    if store:
        rc = lib.memcached_set(memc, k, len(k), b"x", 1, 0, 0)
        assert rc == 0, f"memcached_set({key}) returned {rc}"
    print(key, index)
