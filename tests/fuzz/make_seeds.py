#!/usr/bin/env python3
# Writes the binary seed corpora of the libFuzzer targets (protobuf wire
# format, encoded by hand so that no protobuf package is needed). The text
# targets' seeds (config, policy, adapter URIs) are plain files, edited by
# hand. Usage: python3 tests/fuzz/make_seeds.py   (from the repository root)
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, value):
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    if isinstance(value, str):
        value = value.encode()
    return varint(num << 3 | 2) + varint(len(value)) + value


def write_request(domain, token, resource, ops, request_id=""):
    b = field(1, domain) + field(2, token) + field(3, resource)
    for op in ops:
        b += field(4, op)
    if request_id:
        b += field(5, request_id)
    return b


def put(data):
    return field(1, field(1, data))


def append(data):
    return field(2, field(1, data))


def delete():
    return field(3, b"")


def sql(text, params=()):
    b = field(1, text)
    for p in params:
        b += field(2, field(1, p) if isinstance(p, str) else field(2, p))
    return field(4, b)


def statement(name, params=()):
    b = field(3, name)
    for p in params:
        b += field(2, field(2, p))
    return field(4, b)


def save(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


save("write_request", "file_put", write_request("jobs", 5, "files/a/b.txt", [put("hello")]))
save("write_request", "file_append", write_request("", 7, "files/log", [append("line\n")]))
save("write_request", "file_delete", write_request("jobs", 9, "files/x", [delete()], "req-1"))
save("write_request", "sql", write_request("billing/run", 3, "db/t",
     [sql("INSERT INTO t (a) VALUES ($1)", ["x"]), sql("UPDATE t SET a = 1")]))
save("write_request", "statement", write_request("jobs", 4, "db/jobs", [statement("complete_job", [42])]))
save("write_request", "noop", write_request("d", 1, "none/x", [put("")]))
save("write_request", "nul_sql", write_request("d", 1, "db/t", [sql("delete from t\0 where id = 3")]))
save("write_request", "comment_commit", write_request("d", 1, "db/t", [sql("select 1 --x\rCOMMIT")]))

# Fence/lease target: a list of FuzzedDataProvider strings, each a kind byte
# and a message.
def call(kind, message):
    # ConsumeRandomLengthString ends a string at a backslash followed by
    # anything other than a backslash; doubling every backslash keeps it.
    return bytes([kind]) + message.replace(b"\\", b"\\\\") + b"\\n"

fence = lambda d, t, r="": field(1, d) + field(2, t) + (field(3, r) if r else b"")
seq = lambda d: field(1, d)
acquire = lambda n, ttl, owner: field(1, n) + field(2, ttl) + field(3, owner)
lease_ref = lambda n: field(1, n) + field(2, "last")

save("fence_lease_request", "fence_then_stale", call(0, fence("jobs", 10)) + call(0, fence("jobs", 3)))
save("fence_lease_request", "sequence", call(1, seq("jobs")) + call(1, seq("jobs")))
save("fence_lease_request", "lease_cycle", call(2, acquire("lock", 1000, "w1")) +
     call(3, lease_ref("lock")) + call(4, lease_ref("lock")) + call(2, acquire("lock", 1000, "w2")))
save("fence_lease_request", "fence_max", call(0, fence("m", 2**64 - 1)) + call(1, seq("m")))
save("fence_lease_request", "bad_ttl", call(2, acquire("x", 5, "w")))

# File path target: FuzzedDataProvider strings, a kind byte and the path,
# then the data (a backslash and a newline end one).
def file_op(kind, path, data=b""):
    esc = lambda s: s.replace(b"\\", b"\\\\")
    return bytes([kind]) + esc(path) + b"\\\n" + esc(data) + b"\\\n"

save("file_path", "put", file_op(0, b"a/b/c.txt", b"data"))
save("file_path", "append", file_op(1, b"sub/log", b"line"))
save("file_path", "escape_rel", file_op(0, b"out_rel/secret", b"x"))
save("file_path", "escape_abs", file_op(0, b"out_abs/new", b"x"))
save("file_path", "dotdot", file_op(0, b"sub/../../outside/secret", b"x"))
save("file_path", "inside_link", file_op(0, b"in_link/f", b"x") + file_op(2, b"in_link/f"))
save("file_path", "temp_prefix", file_op(0, b"sub/.fencegate-tmp-0000000000000000", b"x"))
save("file_path", "delete_dir", file_op(2, b"sub"))
