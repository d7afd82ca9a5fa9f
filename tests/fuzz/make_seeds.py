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

# PostgreSQL protocol target: a direction byte (0 client, 1 server), then
# the stream's messages.
import struct


def pg_msg(kind, body=b""):
    return kind + struct.pack(">i", len(body) + 4) + body


def pg_startup(params, code=196608):
    body = struct.pack(">i", code)
    for k, v in params:
        body += k.encode() + b"\0" + v.encode() + b"\0"
    body += b"\0"
    return struct.pack(">i", len(body) + 4) + body


def cstr(s):
    return s.encode() + b"\0"


ssl_request = struct.pack(">ii", 8, 80877103)
startup = pg_startup([("user", "worker"), ("database", "jobs"),
                      ("options", "-c fencegate.domain=jobs -c fencegate.token=7"),
                      ("application_name", "psql")])
save("pgwire_message", "psql_simple", b"\0" + ssl_request + startup +
     pg_msg(b"Q", cstr("BEGIN; UPDATE jobs SET done = true WHERE id = 1; COMMIT")) +
     pg_msg(b"X"))
bind = (cstr("") + cstr("s1") + struct.pack(">hh", 1, 0) + struct.pack(">h", 2) +
        struct.pack(">i", 1) + b"7" + struct.pack(">i", -1) + struct.pack(">hh", 1, 1))
save("pgwire_message", "extended", b"\0" + startup +
     pg_msg(b"P", cstr("s1") + cstr("UPDATE t SET a = $1 WHERE b = $2") + struct.pack(">hii", 2, 23, 25)) +
     pg_msg(b"B", bind) + pg_msg(b"D", b"P" + cstr("")) + pg_msg(b"E", cstr("") + struct.pack(">i", 0)) +
     pg_msg(b"S") + pg_msg(b"C", b"S" + cstr("s1")) + pg_msg(b"H"))
save("pgwire_message", "copy_in", b"\0" + startup + pg_msg(b"Q", cstr("COPY t FROM STDIN")) +
     pg_msg(b"d", b"1\tx\n") + pg_msg(b"c") + pg_msg(b"f", cstr("gave up")))
save("pgwire_message", "scram", b"\0" + startup +
     pg_msg(b"p", cstr("SCRAM-SHA-256") + struct.pack(">i", 8) + b"n,,n=,r=") +
     pg_msg(b"p", b"c=biws,r=abc,p=xyz"))
save("pgwire_message", "cancel", b"\0" + struct.pack(">iiii", 16, 80877102, 1234, -5))
server = (pg_msg(b"R", struct.pack(">i", 10) + cstr("SCRAM-SHA-256") + b"\0") +
          pg_msg(b"R", struct.pack(">i", 0)) +
          pg_msg(b"S", cstr("server_version") + cstr("15.10")) +
          pg_msg(b"K", struct.pack(">ii", 4242, 99)) + pg_msg(b"Z", b"I") +
          pg_msg(b"T", struct.pack(">h", 1) + cstr("a") + struct.pack(">ihihih", 0, 0, 25, -1, -1, 0)) +
          pg_msg(b"D", struct.pack(">hi", 2, 1) + b"x" + struct.pack(">i", -1)) +
          pg_msg(b"C", cstr("SELECT 1")) + pg_msg(b"N", b"SNOTICE\0Mhi\0\0") +
          pg_msg(b"E", b"SERROR\0C25006\0Mcannot execute UPDATE in a read-only transaction\0\0") +
          pg_msg(b"Z", b"E") + pg_msg(b"1") + pg_msg(b"2") + pg_msg(b"t", struct.pack(">hi", 1, 23)) +
          pg_msg(b"n") + pg_msg(b"s") + pg_msg(b"3") + pg_msg(b"I") +
          pg_msg(b"G", struct.pack(">bhh", 0, 1, 0)) + pg_msg(b"H", struct.pack(">bh", 0, 0)) +
          pg_msg(b"d", b"row\n") + pg_msg(b"c") + pg_msg(b"A", struct.pack(">i", 7) + cstr("ch") + cstr("p")) +
          pg_msg(b"v", struct.pack(">ii", 0, 1) + cstr("_pq_.x")) + pg_msg(b"Z", b"T"))
save("pgwire_message", "server", b"\1" + server)

# The message sequences of the PostgreSQL port's adversarial breaks (issue
# of the held fence), as client streams: pipelines that end or skip a
# transaction, a replaced fence statement, replies shifted by skipped
# Queries, and a forged stale-token error after them.
def pg_parse(name, sql):
    return pg_msg(b"P", cstr(name) + cstr(sql) + struct.pack(">h", 0))


def pg_bind(portal="", statement=""):
    return pg_msg(b"B", cstr(portal) + cstr(statement) + struct.pack(">hhh", 0, 0, 0))


def pg_execute(portal=""):
    return pg_msg(b"E", cstr(portal) + struct.pack(">i", 0))


update = "UPDATE jobs SET owner = 'old' WHERE id = 1"
save("pgwire_message", "skipped_begin", b"\0" + startup +
     pg_msg(b"Q", cstr("SELECT 1/0; BEGIN")) + pg_msg(b"Q", cstr("SELECT pg_sleep(4)")) +
     pg_msg(b"Q", cstr(update)))
save("pgwire_message", "prepared_commit", b"\0" + startup +
     pg_parse("c", "COMMIT") + pg_msg(b"S") + pg_msg(b"Q", cstr("BEGIN")) +
     pg_bind("", "c") + pg_execute() + pg_msg(b"S") +
     pg_msg(b"Q", cstr("SELECT pg_sleep(2)")) + pg_msg(b"Q", cstr(update)))
save("pgwire_message", "do_commit", b"\0" + startup +
     pg_parse("", "DO $$BEGIN COMMIT; PERFORM pg_sleep(3); " + update + "; END$$") +
     pg_bind() + pg_execute() + pg_msg(b"S"))
save("pgwire_message", "scs_off", b"\0" + startup +
     pg_msg(b"Q", cstr("SET standard_conforming_strings = off")) +
     pg_msg(b"Q", cstr("SELECT 'a\\' , ' ; COMMIT ; SELECT pg_sleep(3) ; " + update + " ; -- '")))
save("pgwire_message", "replaced_fence", b"\0" + startup +
     pg_msg(b"Q", cstr("DO $$BEGIN EXECUTE 'DEALLOCATE fencegate_fence'; EXECUTE "
                       "'PREPARE fencegate_fence(text, bigint) AS SELECT $2'; END$$")))
save("pgwire_message", "shifted_replies", b"\0" + startup +
     pg_parse("", "SELECT 1/0") + pg_bind() + pg_execute() +
     pg_msg(b"Q", cstr("SELECT 1")) + pg_msg(b"Q", cstr("SELECT 2")) + pg_msg(b"S") +
     pg_msg(b"Q", cstr("DO $$BEGIN RAISE SQLSTATE 'FG001' USING DETAIL = "
                       "'9223372036854775807'; END$$")) + pg_msg(b"X"))
save("pgwire_message", "skipped_then_terminate", b"\0" + startup +
     pg_parse("", "SELECT 1/0") + pg_bind() + pg_execute() +
     pg_msg(b"Q", cstr("SELECT 1")) + pg_msg(b"Q", cstr("SELECT 2")) + pg_msg(b"S") + pg_msg(b"X"))
