"""The operator's side of cache mode: `chell cache start|stat|flush|stop|check`
and `chell run --mode cache` starting its manager.

Dirty data is made the way a client makes it (cache/layout.h): a small
protocol client below registers a backing file with its own descriptor,
MAPs a chunk for writing, stores into the mapped chunk file and sets the
blocks' dirty states in the control page's dirty table. Everything runs as
root (as the tests do); one case runs a flush as `nobody`.
"""
import array
import hashlib
import json
import mmap
import os
import socket
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import CHELL, run

AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
SUBCOMMANDS = ["start", "status", "stat", "flush", "stop", "check", "ls"]

MAGIC = 0x4C4C4843
HELLO, OPEN, MAP, BYE, CLOSE = 1, 2, 3, 6, 10
PROTO = 3  # chelld protocol version (3: batched MAP)
CHUNK = 2 << 20
BLOCK = 4096
# The control page's dirty table (cache/policy dirty.c, one chunk): at line 2;
# a 64-byte header (magic, nchunks, ndirty), 16 words of 2-bit block states,
# then the chunk's maybe-dirty byte.
CTL_DIRTY = CHUNK + 128
CTL_DIRTY_NDIRTY = CTL_DIRTY + 12
CTL_DIRTY_WORDS = CTL_DIRTY + 64
CTL_DIRTY_FLAG = CTL_DIRTY_WORDS + 16 * 8


class Client:
    """A cache client reduced to what the tests need (protocol.h, layout.h)."""

    def __init__(self, sock):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.connect(str(sock))
        self.seq = 0
        st, _, fd = self.call(HELLO, struct.pack("<II", PROTO, 0))
        assert st == 0, st
        if fd is not None:
            os.close(fd)  # the access table: not needed here

    def call(self, typ, payload, fd=None):
        self.seq += 1
        msg = struct.pack("<IHHII", MAGIC, PROTO, typ, 16 + len(payload), self.seq) + payload
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))] if fd is not None else []
        self.s.sendmsg([msg], anc)
        data, anc, _, _ = self.s.recvmsg(8192, socket.CMSG_SPACE(4))
        rfd = None
        for lvl, t, d in anc:
            if lvl == socket.SOL_SOCKET and t == socket.SCM_RIGHTS:
                rfd = array.array("i", d[:4])[0]
        return struct.unpack_from("<i", data, 16)[0], data[24:], rfd

    def open_file(self, path):
        fd = os.open(path, os.O_RDWR)
        p = os.path.realpath(path).encode()
        st, body, _ = self.call(OPEN, struct.pack("<II", 0, 0) + p + b"\0" * (4096 - len(p)), fd)
        os.close(fd)
        assert st == 0, (st, body)
        return struct.unpack_from("<I", body, 0)[0]

    def write(self, fid, off, data):
        """Store data at file offset off (inside one chunk) and mark it dirty."""
        chunk, coff = divmod(off, CHUNK)
        assert coff + len(data) <= CHUNK
        first, last = coff // BLOCK, (coff + len(data) + BLOCK - 1) // BLOCK
        st, _, fd = self.call(MAP, struct.pack("<IIQIIII", fid, 1, chunk, first, last - first, 0, 0))
        assert st == 0 and fd is not None, st
        m = mmap.mmap(fd, CHUNK + BLOCK)
        os.close(fd)
        m[coff:coff + len(data)] = data
        # dirty_mark: the blocks' states, then the chunk's flag and the count
        for b in range(first, last):
            w = CTL_DIRTY_WORDS + (b // 32) * 8
            v = struct.unpack_from("<Q", m, w)[0]
            struct.pack_into("<Q", m, w, (v & ~(3 << (2 * (b % 32)))) | (1 << (2 * (b % 32))))
        if not m[CTL_DIRTY_FLAG]:
            m[CTL_DIRTY_FLAG] = 1
            n = struct.unpack_from("<I", m, CTL_DIRTY_NDIRTY)[0]
            struct.pack_into("<I", m, CTL_DIRTY_NDIRTY, n + 1)
        m.close()

    def close_file(self, fid, read_hits=0, read_misses=0):
        counts = struct.pack("<6Q", read_hits, 0, read_misses, 0, 0, 0)
        st, _, _ = self.call(CLOSE, struct.pack("<II", fid, 0) + counts)
        assert st == 0, st

    def bye(self):
        self.call(BYE, b"\0" * 48)
        self.s.close()


def cache(*args, **kw):
    return run([CHELL, "cache"] + [str(a) for a in args], timeout=60, **kw)


def js(p):
    assert p.stdout, p.stderr
    return json.loads(p.stdout)


@pytest.fixture
def pool(workdir):
    """A running chelld: 32 MiB pool, one backing directory with two files."""
    p, back = workdir / "pool", workdir / "back"
    p.mkdir()
    back.mkdir()
    for name in ("a", "b"):
        (back / name).write_bytes(os.urandom(3 * CHUNK))
    r = cache("start", "--pool", p, "--size", "32M", "--backing", back)
    assert r.returncode == 0, r.stderr
    yield {"pool": p, "back": back, "sock": p / "chelld.sock", "dir": workdir}
    cache("stop", "--pool", p, "--timeout", "30")


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---------------------------------------------------------------- arguments

def test_help_of_every_subcommand_and_usage_errors(workdir):
    top = cache("--help")
    assert top.returncode == 0
    for sub in SUBCOMMANDS:
        assert sub in top.stdout.decode()
        p = cache(sub, "--help")
        assert p.returncode == 0, (sub, p.stderr)
        assert p.stdout.decode().startswith(f"Usage: chell cache {sub}"), sub
        assert "Exit status" in p.stdout.decode(), sub
        bad = cache(sub, "--no-such-option")
        assert bad.returncode == 2 and b"unknown" in bad.stderr, (sub, bad.stderr)
    assert cache().returncode == 2
    assert cache("frobnicate").returncode == 2
    for sub in ("stat", "check"):
        p = cache(sub, "--pool", workdir, "extra")
        assert p.returncode == 2 and b"unexpected argument" in p.stderr


def test_exit_codes_when_nothing_runs(workdir):
    p = cache("stat", "--pool", workdir)
    assert p.returncode == 1 and b"not running" in p.stdout
    p = cache("stat", "--pool", workdir, "--json")
    assert p.returncode == 1 and js(p)["running"] is False
    p = cache("flush", "--pool", workdir)
    assert p.returncode == 1 and b"not running" in p.stderr
    # check: no pool here (2), no such directory (2), a file (2)
    p = cache("check", "--pool", workdir)
    assert p.returncode == 2 and b"meta.pool" in p.stderr
    p = cache("check", "--pool", workdir / "missing")
    assert p.returncode == 2 and b"No such file" in p.stderr
    (workdir / "f").write_text("")
    p = cache("check", "--pool", workdir / "f")
    assert p.returncode == 2 and b"not a directory" in p.stderr


def test_start_takes_the_cache_settings(workdir):
    """--dry-run prints the chelld command: options, then config file, then
    environment; tunables only when set; backing falls back to paths."""
    back = workdir / "back"
    back.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHELL_")}
    p = cache("start", "-n", "--pool", workdir, "--backing", back, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().split() == ["chelld", "--pool", str(workdir), "--size", "1G",
                                         "--backing", str(back)]
    conf = workdir / "chell.conf"
    conf.write_text(f"cache.pool = {workdir}\ncache.size = 64M\ncache.policy = fifo\n"
                    f"cache.backing = {back}\ncache.readahead = 128K\n")
    env2 = dict(env, CHELL_CACHE_DIRTY_HIGH="70", CHELL_CACHE_DIRTY_LOW="10")
    p = cache("start", "-n", "--config", conf, "--readahead", "256K", env=env2)
    assert p.returncode == 0, p.stderr
    argv = p.stdout.decode().split()
    opts = dict(zip(argv[1::2], argv[2::2]))
    assert opts == {"--pool": str(workdir), "--size": "64M", "--backing": str(back),
                    "--policy": "fifo", "--dirty-high": "70",
                    "--dirty-low": "10", "--readahead": "256K"}
    # backing from paths, when cache.backing is empty
    p = cache("start", "-n", "--pool", workdir, env=dict(env, CHELL_PATHS=str(back)))
    assert p.returncode == 0 and f"--backing {back}" in p.stdout.decode()
    # nothing to cache: a usage error naming the ways to give it
    p = cache("start", "-n", "--pool", workdir, env=env)
    assert p.returncode == 2 and b"--backing" in p.stderr and b"cache.backing" in p.stderr
    # a bad tunable is refused with the setting's own words
    p = cache("start", "-n", "--pool", workdir, "--backing", back, "--policy", "mru", env=env)
    assert p.returncode == 2 and b"cache.policy" in p.stderr and b"lru|fifo" in p.stderr


def test_start_passes_tunables_chelld_accepts(workdir):
    back = workdir / "back"
    back.mkdir()
    p = cache("start", "--pool", workdir, "--size", "8M", "--backing", back, "--policy", "fifo",
              "--dirty-high", "60", "--dirty-low", "20", "--readahead", "128K")
    assert p.returncode == 0, p.stderr
    try:
        st = js(cache("stat", "--pool", workdir, "--json"))
        assert st["policy"] == "fifo"
    finally:
        assert cache("stop", "--pool", workdir).returncode == 0


# ------------------------------------------------------------ stat and flush

def test_stat_json_shape_and_per_file_rows(pool):
    c = Client(pool["sock"])
    a = c.open_file(pool["back"] / "a")
    c.write(a, 8192, b"x" * 10000)          # blocks 2..4 of chunk 0
    c.write(a, CHUNK + 4096, b"y" * 4096)   # block 1 of chunk 1
    c.close_file(a, read_hits=3, read_misses=1)
    c.bye()
    p = cache("stat", "--pool", pool["pool"], "--json")
    assert p.returncode == 0, p.stderr
    st = js(p)
    for key in ("pid", "pool", "policy", "used_bytes", "slots", "slots_used", "occupancy",
                "dirty_chunks",
                "dirty_bytes", "hits", "misses", "hit_ratio", "fills", "evictions",
                "writeback_ops", "writeback_bytes", "cleaner_passes", "throttle_waits", "files"):
        assert key in st, key
    assert st["running"] is True and st["policy"] == "lru"
    # a slot per 256K of the 32M pool; capacity counted in 4 KB pages: the
    # two control pages and the valid blocks (those written, and zeros
    # past the end of the file)
    assert st["slots"] == 128 and st["slots_used"] == 2 and st["occupancy"] == 0.0156
    assert st["size"] == 32 << 20 and 6 * BLOCK <= st["used_bytes"] < 2 * CHUNK
    assert st["dirty_chunks"] == 2 and st["dirty_bytes"] == 4 * BLOCK
    assert (st["hits"], st["misses"], st["hit_ratio"]) == (3, 1, 0.75)
    [row] = st["files"]
    assert row["path"] == str((pool["back"] / "a").resolve())
    assert row["size"] == 3 * CHUNK and row["chunks"] == 2
    assert row["dirty_bytes"] == 4 * BLOCK and row["valid_bytes"] >= 4 * BLOCK
    assert (row["hits"], row["misses"], row["hit_ratio"]) == (3, 1, 0.75)
    text = cache("stat", "--pool", pool["pool"])
    assert text.returncode == 0
    out = text.stdout.decode()
    assert "2 of 128 used" in out and "hit ratio 75.0%" in out and str(row["path"]) in out


def test_flush_files_then_all_then_drop(pool):
    a, b = pool["back"] / "a", pool["back"] / "b"
    c = Client(pool["sock"])
    ida, idb = c.open_file(a), c.open_file(b)
    c.write(ida, 4096, b"A" * 8192)
    c.write(idb, 2 * CHUNK, b"B" * 4096)
    c.bye()
    before_b = sha(b)
    # one file: only its data is written back
    p = cache("flush", "--pool", pool["pool"], a)
    assert p.returncode == 0, p.stderr
    assert b"flushed 1 file: 8.0 KiB written (2 blocks)" in p.stdout
    assert a.read_bytes()[4096:12288] == b"A" * 8192 and sha(b) == before_b
    st = js(cache("stat", "--pool", pool["pool"], "--json"))
    assert st["dirty_bytes"] == BLOCK
    # every file, as JSON
    p = cache("flush", "--pool", pool["pool"], "--json")
    assert p.returncode == 0, p.stderr
    r = js(p)
    assert r["bytes_written"] == BLOCK and r["failed"] == 0
    assert b.read_bytes()[2 * CHUNK:2 * CHUNK + 4096] == b"B" * 4096
    # --drop empties the cache (clean data too)
    p = cache("flush", "--pool", pool["pool"], "--drop", "--json")
    assert p.returncode == 0 and js(p)["chunks_dropped"] == 2
    assert js(cache("stat", "--pool", pool["pool"], "--json"))["slots_used"] == 0


def test_flush_refusals(pool):
    outside = pool["dir"] / "outside"
    outside.write_text("x")
    p = cache("flush", "--pool", pool["pool"], outside)
    assert p.returncode == 1 and b"refused by chelld: EPERM" in p.stderr
    p = cache("flush", "--pool", pool["pool"], pool["back"] / "missing")
    assert p.returncode == 1 and b"No such file" in p.stderr
    p = cache("flush", "--pool", pool["pool"], "--json", pool["back"] / "missing", outside)
    assert p.returncode == 1
    r = js(p)
    assert [x["error"] for x in r["results"]] == ["ENOENT", "EPERM"] and r["failed"] == 2
    # nobody can open neither the 0600 file nor ask to flush everything
    secret = pool["back"] / "a"
    os.chmod(secret, 0o600)
    os.chmod(pool["dir"], 0o755)
    p = run(AS_NOBODY + [CHELL, "cache", "flush", "--socket", pool["sock"], secret])
    assert p.returncode == 1 and b"Permission denied" in p.stderr, p.stderr
    p = run(AS_NOBODY + [CHELL, "cache", "flush", "--socket", pool["sock"]])
    assert p.returncode == 1 and b"EPERM" in p.stderr, p.stderr


def test_stop_below_the_threshold_leaves_write_back_to_chelld(pool):
    a = pool["back"] / "a"
    c = Client(pool["sock"])
    fid = c.open_file(a)
    data = bytes(range(256)) * (CHUNK // 256)
    c.write(fid, 0, data)
    c.write(fid, CHUNK, data)
    c.bye()
    b = pool["back"] / "b"
    c = Client(pool["sock"])
    fid = c.open_file(b)
    for k in range(3):
        for half in range(2):
            c.write(fid, k * CHUNK + half * (CHUNK // 2), data[:CHUNK // 2])
    c.bye()
    assert js(cache("stat", "--pool", pool["pool"], "--json"))["dirty_bytes"] == 5 * CHUNK
    # 10 MiB: below the threshold, the daemon writes back as it stops
    p = cache("stop", "--pool", pool["pool"])
    assert p.returncode == 0, p.stderr
    assert b"writing it back first" not in p.stderr
    assert a.read_bytes()[:2 * CHUNK] == data * 2


def test_stop_progress_above_the_threshold(workdir):
    p, back = workdir / "pool", workdir / "back"
    p.mkdir()
    back.mkdir()
    f = back / "big"
    f.write_bytes(b"\0" * (10 * CHUNK))
    # watermarks above what the test dirties: no background write-back
    assert cache("start", "--pool", p, "--size", "32M", "--backing", back, "--dirty-high", "95",
                 "--dirty-low", "90").returncode == 0
    data = os.urandom(CHUNK)
    c = Client(p / "chelld.sock")
    fid = c.open_file(f)
    for k in range(9):  # 18 MiB dirty
        c.write(fid, k * CHUNK, data)
    c.bye()
    r = cache("stop", "--pool", p)
    assert r.returncode == 0, r.stderr
    err = r.stderr.decode()
    assert "18 MiB of dirty data: writing it back first" in err, err
    assert "wrote back 18 MiB (1 file) in" in err, err
    assert f.read_bytes()[:9 * CHUNK] == data * 9


# -------------------------------------------------------------------- check

def _ctl_offset(field):
    return CHUNK + {"magic": 0, "version": 8, "state": 12, "slot": 16, "ino": 32}[field]


def test_check_online_then_offline_catches_damage(pool):
    c = Client(pool["sock"])
    fid = c.open_file(pool["back"] / "a")
    c.write(fid, 0, b"z" * 4096)
    c.bye()
    p = cache("check", "--pool", pool["pool"], "--json")
    assert p.returncode == 0, p.stderr
    r = js(p)
    assert r["mode"] == "online" and r["ok"] is True and r["cnodes"] == 1
    assert cache("stop", "--pool", pool["pool"]).returncode == 0

    p = cache("check", "--pool", pool["pool"], "--json")
    assert p.returncode == 0, p.stdout
    r = js(p)
    assert (r["mode"], r["ok"], r["cnodes"], r["chunks_used"], r["chunk_files"]) == \
        ("offline", True, 1, 1, 1)
    chunks = sorted((pool["pool"] / "chunks").iterdir())
    assert len(chunks) == 1
    chunk, meta = chunks[0], pool["pool"] / "meta.pool"
    name = f"chunks/{chunk.name}"
    saved = {chunk: chunk.read_bytes(), meta: meta.read_bytes()}

    def damage(path, off, data):
        for p_, b in saved.items():
            p_.write_bytes(b)
        with open(path, "r+b") as fh:
            fh.seek(off)
            fh.write(data)
        before = sha(path)
        res = cache("check", "--pool", pool["pool"], "--json")
        assert sha(path) == before  # a check never changes the pool
        return res

    for field, value in [("magic", b"\xff" * 8), ("version", struct.pack("<I", 9)),
                         ("state", struct.pack("<I", 7)), ("slot", struct.pack("<I", 12)),
                         ("ino", struct.pack("<Q", 77))]:
        p = damage(chunk, _ctl_offset(field), value)
        assert p.returncode == 1, (field, p.stdout)
        r = js(p)
        assert r["ok"] is False
        assert {"file": name, "field": field} in [{k: x[k] for k in ("file", "field")}
                                                  for x in r["problems"]], (field, r)
    # a dirty block that is not valid (block 300 was never filled)
    word = CTL_DIRTY_WORDS + (300 // 32) * 8
    v = struct.unpack_from("<Q", saved[chunk], word)[0] | (1 << (2 * (300 % 32)))
    p = damage(chunk, word, struct.pack("<Q", v))
    assert p.returncode == 1
    assert [(x["file"], x["field"]) for x in js(p)["problems"]] == [(name, "dirty")]
    assert "not valid (first: block 300)" in js(p)["problems"][0]["text"]
    # meta.pool: the root's Cnode count, and the region's superblock
    info = json.loads(run([CHELL, "pool", "info", "--json", meta]).stdout)
    p = damage(meta, info["heap_offset"] + 32, struct.pack("<I", 5))
    assert p.returncode == 1
    [prob] = js(p)["problems"]
    assert prob["file"] == "meta.pool" and prob["field"] == "tables"
    assert "root counts 5 Cnodes" in prob["text"]
    p = damage(meta, 100, b"\x55")
    assert p.returncode == 1
    r = js(p)
    assert r["problems"][0]["file"] == "meta.pool" and r["problems"][0]["field"] == "region"
    assert "checksum" in r["problems"][0]["text"]
    # text output: one line per finding, with file and field
    p = damage(chunk, _ctl_offset("magic"), b"\xff" * 8)
    p = cache("check", "--pool", pool["pool"])
    assert p.returncode == 1
    assert f"problem: {name}: magic: 0xffffffffffffffff".encode() in p.stdout
    for p_, b in saved.items():
        p_.write_bytes(b)
    # leftovers are notes, not problems: an empty chunk file of a free slot
    (pool["pool"] / "chunks" / "7").write_bytes(b"")
    p = cache("check", "--pool", pool["pool"], "--json")
    assert p.returncode == 0
    r = js(p)
    assert r["ok"] is True and [n["file"] for n in r["notes"]] == ["chunks/7"]


# ----------------------------------------------------- chell run --mode cache

def test_run_mode_cache_starts_the_manager_and_leaves_it_running(workdir):
    pool, back = workdir / "pool", workdir / "back"
    back.mkdir()
    base = [CHELL, "run", "--mode", "cache", "--set", f"cache.pool={pool}",
            "--set", "cache.size=8M", "--path", back, "--"]
    p = run(base + ["sh", "-c", "echo out; exit 3"])
    assert p.returncode == 3 and p.stdout == b"out\n"  # the command's status and stdout
    err = p.stderr.decode()
    assert f"started chelld for cache pool {pool}" in err
    assert f"chell cache stop --pool {pool}" in err
    st = js(cache("status", "--pool", pool, "--json"))
    assert st["running"] and st["backings"] == [str(back)]
    # the next command uses it, and says nothing about it
    p = run(base + ["true"])
    assert p.returncode == 0 and b"started" not in p.stderr
    assert js(cache("status", "--pool", pool, "--json"))["pid"] == st["pid"]
    assert cache("stop", "--pool", pool).returncode == 0


def test_run_mode_cache_stop_cache_and_errors(workdir):
    pool, back = workdir / "pool", workdir / "back"
    back.mkdir()
    p = run([CHELL, "run", "--stop-cache", "--mode", "cache", "--set", f"cache.pool={pool}",
             "--set", "cache.size=8M", "--path", back, "--", "sh", "-c", "exit 5"])
    assert p.returncode == 5, p.stderr
    assert b"started" not in p.stderr
    assert cache("status", "--pool", pool).returncode == 1  # stopped after the command
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHELL_")}
    p = run([CHELL, "run", "--mode", "cache", "--set", f"cache.pool={pool}", "--", "true"],
            env=env)
    assert p.returncode == 2 and b"backing directory" in p.stderr
    p = run([CHELL, "run", "--mode", "cache", "--set", f"cache.pool={pool}",
             "--set", f"cache.backing={workdir / 'missing'}", "--", "true"], env=env)
    assert p.returncode == 2 and b"missing" in p.stderr
    assert cache("status", "--pool", pool).returncode == 1
