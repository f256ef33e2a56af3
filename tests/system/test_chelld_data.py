"""chelld's data path, driven by the scripted client speaking the chunk
protocol of src/cache/layout.h: fills against the backing file, eviction and
revocation in a pool smaller than the data, write-back, SYNC, TRUNCATE,
FLUSH (drop, bypass), outside writers, the cleaner's watermarks, FILE_STAT
and CHECK. The daemon and the client run as root here; test_chelld_access.py
has the two-user cases.
"""
import json
import os
import random
import subprocess
import time

import pytest

from test_chelld import CLIENT, client, start, status, stop

CHUNK = 2 << 20


def data(n, seed):
    return random.Random(seed).randbytes(n)


@pytest.fixture
def small(workdir):
    """A 4-chunk (8 MB) pool over one backing directory."""
    pool, back = workdir / "pool", workdir / "back"
    pool.mkdir()
    back.mkdir()
    env = {"pool": pool, "back": back, "dir": workdir, "sock": pool / "chelld.sock"}

    def serve(*extra, size="8M"):
        p = start(pool, [back], size=size, extra=extra)
        assert p.returncode == 0, p.stderr.decode()
        env["pid"] = json.loads(status(pool).stdout)["pid"]
        return p

    env["serve"] = serve
    yield env
    if (pool / "chelld.pid").exists():
        assert stop(pool).returncode == 0
    log = (pool / "chelld.log").read_text()
    assert "ERROR: AddressSanitizer" not in log and "runtime error" not in log, log


def ok(out, i=None):
    """Every reply in out was OK (or the i-th one); local looks (state, peek,
    poke) are checked by the tests themselves, but must not have failed."""
    rows = out if i is None else [out[i]]
    for op, f in rows:
        assert "local" not in f and "fail" not in f, (op, f)
        if op not in ("state", "peek", "poke"):
            assert f.get("status") == "OK", (op, f)


def stats(sock):
    rc, out, _ = client(sock, "hello", "stats")
    return out[1][1]


def test_fill_matches_the_backing_file_including_the_tail_past_eof(small):
    small["serve"]()
    f = small["back"] / "f"
    f.write_bytes(data(3 * CHUNK // 2 + 1234, 1))  # a chunk and a half, odd tail
    got = small["dir"] / "got"
    rc, out, p = client(small["sock"], "hello", f"open:{f}:ro", f"read:last:0:{f.stat().st_size}:{got}",
                        f"read:last:{CHUNK - 100}:5000:{small['dir'] / 'mid'}",
                        "map:last:0:r:0:0", "state:last:0", "map:last:1:r", "state:last:1",
                        "stats")
    assert rc == 0, p.stderr
    ok(out[:-1])
    assert got.read_bytes() == f.read_bytes()
    assert (small["dir"] / "mid").read_bytes() == f.read_bytes()[CHUNK - 100:CHUNK + 4900]
    # every block of chunk 0 was read; in chunk 1 the 257 blocks of the file
    # and, past its end, the read-ahead window (zeros, without I/O)
    assert out[5][1]["valid"] == "512" and 257 < int(out[7][1]["valid"]) <= 512
    st = out[-1][1]
    # what was filled is exactly the file: no block twice, nothing past EOF
    assert int(st["fill_bytes"]) == f.stat().st_size
    assert st["used"] == "2" and st["evictions"] == "0"


def test_read_ahead_only_for_sequential_misses(small):
    small["serve"]("--readahead", "16K")
    f = small["back"] / "f"
    f.write_bytes(data(CHUNK, 2))
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:ro", "map:last:0:r:10:2",
                        "state:last:0", "map:last:0:r:10:2", "stats",
                        "map:last:0:r:12:1", "state:last:0", "map:last:0:r:17:1",
                        "state:last:0", "map:last:0:r:100:1", "state:last:0")
    ok(out)
    assert out[3][1]["valid"] == "2"  # a random miss: exactly blocks 10 and 11
    assert out[5][1]["fill_bytes"] == str(2 * 4096)  # asking again reads nothing
    # where the last miss ended: sequential, a window of 4 x the request
    assert out[7][1]["valid"] == str(2 + 1 + 4)
    # where that fill ended: the window doubles, up to --readahead (4 blocks)
    assert out[9][1]["valid"] == str(7 + 1 + 4)
    assert out[11][1]["valid"] == str(12 + 1)  # random again: no read-ahead


def test_eviction_in_a_pool_smaller_than_the_data(small):
    small["serve"]()
    files = []
    for i in range(3):
        f = small["back"] / f"f{i}"
        f.write_bytes(data(3 * CHUNK, 10 + i))  # 9 chunks of data, 4 slots
        files.append(f)
    ops = ["hello"]
    for f in files:
        ops.append(f"open:{f}:ro")
    for rnd in range(2):
        for i, f in enumerate(files):
            ops.append(f"read:{i}:0:{3 * CHUNK}:{small['dir'] / f'got{rnd}{i}'}")
    ops += ["stats", "check"]
    rc, out, p = client(small["sock"], *ops)
    assert rc == 0, p.stderr
    ok(out)
    for rnd in range(2):
        for i, f in enumerate(files):
            assert (small["dir"] / f"got{rnd}{i}").read_bytes() == f.read_bytes()
    st = out[-2][1]
    # 18 chunk loads of 513 pages (data and control page) in 2048 pages
    assert int(st["used"]) <= 4 and int(st["evictions"]) >= 14
    assert int(st["used_pages"]) <= 2048
    assert out[-1][1]["chunks"] == st["used"]


def test_a_revoked_mapping_faults_and_never_shows_another_files_data(small):
    small["serve"]("--size", "2M")  # one slot: every new chunk reuses it
    a, b = small["back"] / "a", small["back"] / "b"
    a.write_bytes(b"\xaa" * CHUNK)
    b.write_bytes(b"\xbb" * CHUNK)
    rc, out, _ = client(small["sock"], "hello", f"open:{a}:rw", f"open:{b}:ro",
                        "map:0:0:w:0:512", "peek:0:0:100", "state:0:0",
                        "map:1:0:r:0:512", "state:1:0",
                        "peek:0:0:100", "poke:0:0:100:7", "state:0:0",
                        f"read:0:0:4096:{small['dir'] / 'again'}", "peek:1:0:100",
                        f"read:1:0:4096:{small['dir'] / 'bb'}", "stats")
    ok(out[:4])
    assert out[4][1] == {"value": str(0xAA)}
    # (a's chunk was evicted for b's: the pool holds one full chunk)
    assert out[7][1]["cnode"] == out[2][1]["id"]
    assert out[7][1]["incarnation"] != out[5][1]["incarnation"]
    # the old mapping of a's chunk: a fault, for loads and stores alike
    assert out[8][1] == {"fault": "SIGBUS"}
    assert out[9][1] == {"fault": "SIGBUS"}
    assert out[10][1] == {"fault": "SIGBUS"}
    # the protocol turns it into a miss and a's data comes back
    assert out[11][1]["status"] == "OK" and int(out[11][1]["misses"]) >= 1
    assert (small["dir"] / "again").read_bytes() == b"\xaa" * 4096
    assert out[12][1] == {"fault": "SIGBUS"}  # b's chunk was evicted for it
    assert (small["dir"] / "bb").read_bytes() == b"\xbb" * 4096
    assert a.read_bytes() == b"\xaa" * CHUNK  # the poke never reached a


def test_write_through_the_mapping_then_flush_reaches_the_backing_file(small):
    small["serve"]()
    f = small["back"] / "f"
    orig = data(CHUNK + 50000, 3)
    f.write_bytes(orig)
    patch = small["dir"] / "patch"
    patch.write_bytes(data(9000, 4))
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:rw", f"write:last:{CHUNK - 3000}:{patch}",
                        "stats", "fstat:0", "flush:last", "stats")
    ok(out)
    st = out[3][1]
    assert st["dirty_chunks"] == "2" and st["dirty_blocks"] == "3"
    assert out[4][1]["dirty"] == "3"
    assert out[5][1]["blocks"] == "3" and out[5][1]["bytes"] == str(3 * 4096)
    want = bytearray(orig)
    want[CHUNK - 3000:CHUNK + 6000] = patch.read_bytes()
    assert f.read_bytes() == bytes(want)
    assert out[6][1]["dirty_blocks"] == "0" and out[6][1]["wb_bytes"] == str(3 * 4096)


def test_extending_write_is_clamped_to_the_backing_size_and_truncate(small):
    small["serve"]()
    f = small["back"] / "f"
    f.write_bytes(b"x" * 10000)
    tail = small["dir"] / "tail"
    tail.write_bytes(b"y" * 8000)
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:rw", f"write:last:9000:{tail}",
                        "sync:last", "flush:last", "truncate:last:12000",
                        f"read:last:0:12000:{small['dir'] / 'got'}", "stats")
    ok(out)
    assert out[4][1]["bytes"] == str(17000 - 8192)  # two blocks, the second cut at EOF
    want = b"x" * 9000 + b"y" * 3000
    assert f.read_bytes() == want and (small["dir"] / "got").read_bytes() == want
    assert out[-1][1]["truncates"] == "1" and out[-1][1]["syncs"] == "1"


def test_truncate_keeps_dirty_data_below_the_size_and_drops_the_rest(small):
    small["serve"]()
    f = small["back"] / "f"
    f.write_bytes(b"a" * (3 * CHUNK))
    p = small["dir"] / "p"
    p.write_bytes(b"b" * (CHUNK + 8192))
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:rw",
                        f"write:last:{CHUNK - 4096}:{p}", "truncate:last:{}".format(CHUNK + 1000),
                        "stats", f"read:last:0:{CHUNK + 1000}:{small['dir'] / 'got'}",
                        "flush:last", "stats")
    ok(out)
    want = b"a" * (CHUNK - 4096) + b"b" * 5096
    assert f.read_bytes() == want
    assert (small["dir"] / "got").read_bytes() == want
    assert out[4][1]["dirty_blocks"] == "1"  # chunk 0's dirty block stays cached
    assert out[-1][1]["dirty_blocks"] == "0"


def test_truncate_needs_write_access(small):
    small["serve"]()
    f = small["back"] / "f"
    f.write_bytes(b"z" * 100)
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:ro", "truncate:last:0", "truncate:9:0")
    assert out[2][1]["status"] == "EACCES" and out[3][1]["status"] == "EBADF"
    assert f.stat().st_size == 100


def test_flush_drop_and_bypass(small):
    small["serve"]()
    f = small["back"] / "f"
    f.write_bytes(data(CHUNK, 5))
    p = small["dir"] / "p"
    p.write_bytes(b"q" * 4096)
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:rw", "map:last:0:r:0:1",
                        f"write:last:0:{p}", "flush:last:drop", "peek:last:0:0", "stats",
                        "flush:last:bypass", "map:last:0:r:0:1", f"open:{f}:ro", "fstat:0",
                        "flush:all:bypass")
    ok(out[:5])
    assert out[4][1]["dropped"] == "1" and out[4][1]["bytes"] == "4096"
    assert f.read_bytes()[:4096] == b"q" * 4096
    assert out[5][1] == {"fault": "SIGBUS"}
    assert out[6][1]["used"] == "0"
    assert out[7][1]["status"] == "OK"
    assert out[8][1]["status"] == "OK" and out[8][1]["bypass"] == "1"
    assert out[9][1]["bypass"] == "1" and out[10][1]["flags"] == "1"
    assert out[11][1]["status"] == "EINVAL"
    # the bypass ends with the file's last registration
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:ro", "map:last:0:r:0:1")
    assert out[1][1]["bypass"] == "0" and out[2][1]["bypass"] == "0"


def test_outside_writer_is_detected_at_the_next_registration(small):
    small["serve"]()
    f = small["back"] / "f"
    f.write_bytes(b"1" * 8192)
    got = small["dir"] / "got"
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:ro", f"read:last:0:8192:{got}", "close:last")
    ok(out)
    # not through Chell; one byte longer, so the change shows even where the
    # file system's timestamps are too coarse to tell the two writes apart
    f.write_bytes(b"2" * 8193)
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:ro", f"read:last:0:8192:{got}", "stats")
    ok(out)
    assert got.read_bytes() == b"2" * 8192
    assert out[-1][1]["outside"] == "1"
    # no change: no invalidation, the data stays cached
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:ro", "stats")
    assert out[-1][1]["outside"] == "1" and out[-1][1]["used"] == "1"
    assert "changed outside the cache" in (small["pool"] / "chelld.log").read_text()


def test_cleaner_writes_back_above_the_high_watermark(small):
    small["serve"]("--dirty-high", "40", "--dirty-low", "10")
    f = small["back"] / "f"
    f.write_bytes(b"o" * (4 * CHUNK))
    p = small["dir"] / "p"
    p.write_bytes(b"n" * 4096)
    p.write_bytes(b"n" * CHUNK)
    ops = ["hello", f"open:{f}:rw"] + [f"write:last:{i * CHUNK}:{p}" for i in range(2)]
    rc, out, _ = client(small["sock"], *ops, "stats")
    ok(out)
    # 2 chunks dirty, half the capacity: above 40 %, so the cleaner must write them back
    for _ in range(200):
        st = stats(small["sock"])
        if st["dirty_chunks"] == "0":
            break
        time.sleep(0.05)
    assert st["dirty_chunks"] == "0" and int(st["cleaner_passes"]) >= 1
    assert f.read_bytes()[:4096] == b"n" * 4096
    assert f.read_bytes()[CHUNK:CHUNK + 4096] == b"n" * 4096


def test_cleaner_keeps_a_reserve_of_free_or_clean_capacity(small):
    """A few dirty blocks in every chunk of an almost full pool: far below
    --dirty-high (50%), but evictions would find no clean victim, so the
    cleaner writes them back (free + clean below 20% of the capacity)."""
    small["serve"]()
    f = small["back"] / "f"
    f.write_bytes(data(4 * CHUNK, 21))
    p = small["dir"] / "p"
    p.write_bytes(b"r" * 4096)
    # 300 blocks of one chunk and 3 whole ones: about 90% of the 8 MB (in an
    # order that is not sequential, so no read-ahead adds to it)
    ops = ["hello", f"open:{f}:rw", "map:last:3:w:0:300"]
    ops += [f"map:last:{i}:w:0:512" for i in (1, 2, 0)]
    ops += [f"write:last:{i * CHUNK + 8192}:{p}" for i in range(4)]
    rc, out, _ = client(small["sock"], *ops, "stats")
    ok(out)
    for _ in range(200):
        st = stats(small["sock"])
        if st["dirty_chunks"] == "0":
            break
        time.sleep(0.05)
    assert st["dirty_chunks"] == "0" and int(st["cleaner_passes"]) >= 1, st
    assert st["evictions"] == "0"
    body = f.read_bytes()
    for i in range(4):
        assert body[i * CHUNK + 8192:i * CHUNK + 12288] == b"r" * 4096


def test_a_cache_full_of_dirty_data_cleans_on_a_miss(small):
    # watermarks the cleaner never reaches: every victim is dirty
    small["serve"]("--dirty-high", "100", "--dirty-low", "99")
    f = small["back"] / "f"
    f.write_bytes(b"\0" * (8 * CHUNK))
    p = small["dir"] / "p"
    p.write_bytes(b"w" * CHUNK)
    # whole chunks: the capacity (8 MB) holds three of them and their control pages
    ops = ["hello", f"open:{f}:rw"] + [f"write:last:{i * CHUNK}:{p}" for i in range(8)]
    rc, out, _ = client(small["sock"], *ops, "stats")
    ok(out)
    st = out[-1][1]
    assert int(st["throttle"]) >= 4 and int(st["evictions"]) >= 4
    body = f.read_bytes()
    written = [i for i in range(8) if body[i * CHUNK:(i + 1) * CHUNK] == b"w" * CHUNK]
    assert len(written) >= int(st["evictions"])  # each evicted chunk was written back
    client(small["sock"], "hello", "flush:all")
    assert f.read_bytes() == b"w" * (8 * CHUNK)


def test_close_and_bye_counts_and_file_stat(small):
    small["serve"]()
    f = small["back"] / "f"
    f.write_bytes(b"s" * 5000)
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:ro", f"open:{f}:ro",
                        f"read:last:0:5000:{small['dir'] / 'g'}", "fstat:0", "close:last",
                        "fstat:0", "close:last", "fstat:0", "close:last", "fstat:1", "stats")
    assert out[1][1]["id"] == out[2][1]["id"]
    f0 = out[4][1]
    assert f0["size"] == "5000" and f0["chunks"] == "1" and f0["clients"] == "1"
    assert f0["path"] == str(f) and f0["fills"] == "1"
    assert out[6][1]["clients"] == "1" and out[8][1]["clients"] == "0"
    assert out[8][1]["read_hits"] == "2"  # the test client reports one per CLOSE
    assert out[9][1]["status"] == "EBADF"  # closed twice already
    assert out[10][1]["status"] == "ENOENT"
    assert out[11][1]["read_hits"] == "2"


def test_check_passes_and_stop_writes_back(small):
    small["serve"]()
    f = small["back"] / "f"
    f.write_bytes(b"c" * 9000)
    p = small["dir"] / "p"
    p.write_bytes(b"d" * 100)
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:rw", f"write:last:0:{p}", "check")
    ok(out)
    assert out[3][1]["chunks"] == "1" and out[3][1]["cnodes"] == "1"
    assert stop(small["pool"]).returncode == 0
    assert f.read_bytes() == b"d" * 100 + b"c" * 8900
    assert "stopping: wrote back 4096 bytes" in (small["pool"] / "chelld.log").read_text()


@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_policies_keep_a_hot_chunk_or_not(small, policy):
    small["serve"]("--policy", policy)
    f = small["back"] / "f"
    with open(f, "wb") as fh:
        fh.truncate(13 * CHUNK)
    # chunk 0 is hot: asked for again (a manager-side touch) after every
    # new chunk; CLOCK keeps it once its hand has gone round, FIFO evicts it
    # every three new chunks (the capacity holds three whole chunks)
    ops = ["hello", f"open:{f}:ro", "map:last:0:r:0:512"]
    for i in range(1, 13):
        ops += [f"map:last:{i}:r:0:512", "map:last:0:r:0:512"]
    ops += ["stats"]
    rc, out, _ = client(small["sock"], *ops)
    ok(out)
    st = out[-1][1]
    assert st["policy"] == ("0" if policy == "lru" else "1")
    fills = int(st["fills"])  # one per chunk load: 13 if chunk 0 were never evicted
    if policy == "lru":
        assert fills <= 15, fills
    else:
        assert fills >= 16, fills


def test_chunks_of_a_deleted_file_are_dropped_dirty_or_not(small):
    small["serve"]()
    f, g = small["back"] / "f", small["back"] / "g"
    f.write_bytes(b"f" * 8192)
    g.write_bytes(b"g" * 8192)
    p = small["dir"] / "p"
    p.write_bytes(b"x" * 10)
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:rw", f"write:last:0:{p}",
                        f"open:{g}:ro", f"read:last:0:8192:{small['dir'] / 'got'}", "stats")
    ok(out)
    assert out[-1][1]["used"] == "2" and out[-1][1]["dirty_chunks"] == "1"
    os.unlink(f)
    for _ in range(200):  # the cleaner looks once a second
        st = stats(small["sock"])
        if st["used"] == "1":
            break
        time.sleep(0.05)
    assert st["used"] == "1" and st["dirty_chunks"] == "0"  # g's chunk stays
    log = (small["pool"] / "chelld.log").read_text()
    assert "was deleted: discarding its 1 dirty block(s)" not in log  # dropped without a write
    assert "dropped 1 chunk(s) of deleted files" in log


def test_concurrent_writers_evictions_and_the_cleaner_lose_nothing(small):
    """Four clients write their own files (12 chunks in a pool of 8 slots)
    while evictions and the cleaner thread write back; every byte arrives."""
    small["serve"]("--size", "2M", "--dirty-high", "25", "--dirty-low", "0")
    procs, want = [], {}
    for i in range(4):
        f = small["back"] / f"w{i}"
        f.write_bytes(b"\0" * (3 * CHUNK))
        ops = ["hello", f"open:{f}:rw"]
        body = bytearray(3 * CHUNK)
        for j in range(12):
            p = small["dir"] / f"p{i}_{j}"
            blob = data(20000, 100 * i + j)
            p.write_bytes(blob)
            off = (j * 517 * 1024 + i * 4096) % (3 * CHUNK - 20000)
            body[off:off + 20000] = blob
            ops.append(f"write:last:{off}:{p}")
        want[f] = bytes(body)
        procs.append(subprocess.Popen([str(CLIENT), str(small["sock"])] + ops,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for pr in procs:
        out, err = pr.communicate(timeout=60)
        assert pr.returncode == 0, err
        assert out.decode().count("status=OK") == 14, out
    rc, out, _ = client(small["sock"], "hello", "flush:all", "stats", "check")
    assert out[1][1]["status"] == "OK" and out[3][1]["status"] == "OK"
    st = out[2][1]
    assert st["dirty_blocks"] == "0" and int(st["evictions"]) >= 4, st
    print(f"evictions {st['evictions']} cleaner passes {st['cleaner_passes']} "
          f"throttled {st['throttle']} write-backs {st['wb_ops']}")
    for f, body in want.items():
        assert f.read_bytes() == body, f


def test_a_file_renamed_after_its_registration_is_still_served(small):
    small["serve"]()
    f, g = small["back"] / "f", small["back"] / "g"
    f.write_bytes(b"r" * 10000)
    got = small["dir"] / "got"
    p = small["dir"] / "p"
    p.write_bytes(b"W" * 10)
    go = small["dir"] / "go"
    proc = subprocess.Popen([str(CLIENT), str(small["sock"]), "hello", f"open:{f}:rw", "stats",
                             f"wait:{go}", f"read:last:0:10000:{got}", f"write:last:0:{p}",
                             "flush:last"], stdout=subprocess.PIPE)
    # once the client is registered (it answered STATS), rename, then let it go on
    for _ in range(1000):
        st = stats(small["sock"])
        if st["opens"] == "1":
            break
        time.sleep(0.01)
    os.rename(f, g)
    go.write_text("")
    out = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0 and out.count("status=OK") == 6, out
    assert got.read_bytes() == b"r" * 10000
    assert g.read_bytes() == b"W" * 10 + b"r" * 9990


def test_out_of_range_requests_are_refused_and_the_daemon_serves_on(small):
    small["serve"]()
    f = small["back"] / "f"
    f.write_bytes(b"v" * 100)
    big = 1 << 62
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:rw", "map:last:0:r:600:1",
                        "map:last:0:r:500:13", f"map:last:{big}:r:0:1", f"map:last:{1 << 40}:r:0:512",
                        f"truncate:last:{1 << 63}", "flush:last:x", "fstat:1000000000",
                        "close:4000000000", "sync:77", "check", "stats")
    st = [o[1]["status"] for o in out]
    assert st[:2] == ["OK", "OK"]
    assert st[2:5] == ["EINVAL", "EINVAL", "ERANGE"]
    assert st[5] == "OK"  # far past the end: zeros, no I/O
    assert st[6] == "E27" and st[7] == "OK"  # EFBIG; an unknown flush kind is a plain flush
    assert st[8:11] == ["ENOENT", "EBADF", "EBADF"]
    assert st[11:] == ["OK", "OK"]
    assert out[-1][1]["fill_bytes"] == "0"


def test_a_client_truncating_a_chunk_file_cannot_crash_the_manager(small):
    small["serve"]()
    f = small["back"] / "f"
    f.write_bytes(data(3 * CHUNK, 9))
    got = small["dir"] / "got"
    p = small["dir"] / "p"
    p.write_bytes(b"D" * 4096)
    # a hostile writer: dirty a block, then cut the chunk files under everyone
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:rw", f"write:last:{CHUNK}:{p}",
                        "map:last:0:w:0:512", "ctrunc:last:0:0", "ctrunc:last:1:0")
    assert out[3][1]["status"] == "OK" and out[4][1] == {"done": "1"} and out[5][1] == {"done": "1"}
    # another client still gets the file's data, from the backing file
    rc, out, p2 = client(small["sock"], "hello", f"open:{f}:ro",
                         f"read:last:0:{3 * CHUNK}:{got}", "stats", "check")
    assert rc == 0, p2.stderr
    assert [o[1]["status"] for o in out] == ["OK"] * 5
    assert got.read_bytes() == f.read_bytes()
    assert f.read_bytes()[CHUNK:CHUNK + 4096] != b"D" * 4096  # that write went with the chunk
    assert "truncated by a client; dropped without write-back" in \
        (small["pool"] / "chelld.log").read_text()


def test_a_one_slot_pool_with_the_cleaner_always_busy_never_fails_a_miss(small):
    small["serve"]("--size", "2M", "--dirty-high", "1", "--dirty-low", "0")
    f = small["back"] / "f"
    f.write_bytes(b"\0" * (2 * CHUNK))
    body = bytearray(2 * CHUNK)
    ops = ["hello", f"open:{f}:rw"]
    for i in range(40):
        p = small["dir"] / f"p{i}"
        blob = data(8192, 500 + i)
        p.write_bytes(blob)
        off = (i % 2) * CHUNK + (i * 12288) % (CHUNK - 8192)
        body[off:off + 8192] = blob
        # the whole chunk first: two do not fit, so each miss evicts the other
        ops += [f"map:last:{i % 2}:w:0:512", f"write:last:{off}:{p}"]
    rc, out, p = client(small["sock"], *ops, "flush:last", "stats")
    assert rc == 0, p.stderr
    ok(out)
    assert int(out[-1][1]["evictions"]) >= 39
    assert f.read_bytes() == bytes(body)
