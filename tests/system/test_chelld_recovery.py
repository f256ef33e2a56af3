"""chelld's pool on restart: recovery after kill -9 (dirty data written back,
clean data still cached, interrupted check-outs and evictions finished), and
damaged pools refused with a message and exit status 2.

The control page offsets below follow struct cache_ctl (src/cache/layout.h)
and the one-chunk dirty table after it (src/cache/policy/dirty.c).
"""
import json
import os
import signal
import struct

import pytest

from test_chelld import AS_NOBODY, CHELLD, client, run, start, status, stop, wait_gone

CHUNK = 2 << 20
CTL = CHUNK                  # the control page's offset in a chunk file
STATE = CTL + 12
DIRTY_WORDS = CTL + 128 + 64  # after the dirty table's 64-byte header


@pytest.fixture
def pool(workdir):
    pool, back = workdir / "pool", workdir / "back"
    pool.mkdir()
    back.mkdir()
    env = {"pool": pool, "back": back, "dir": workdir, "sock": pool / "chelld.sock"}

    def serve(size="8M"):
        p = start(pool, [back], size=size)
        if p.returncode == 0:
            env["pid"] = json.loads(status(pool).stdout)["pid"]
        return p

    def kill():
        os.kill(env["pid"], signal.SIGKILL)
        assert wait_gone(env["pid"])

    env["serve"], env["kill"] = serve, kill
    yield env
    if (pool / "chelld.pid").exists() and status(pool).returncode == 0:
        assert stop(pool).returncode == 0
    log = (pool / "chelld.log").read_text() if (pool / "chelld.log").exists() else ""
    assert "ERROR: AddressSanitizer" not in log and "runtime error" not in log, log


def stats(sock):
    rc, out, _ = client(sock, "hello", "stats")
    return out[1][1]


def chunk_file(env, slot):
    return env["pool"] / "chunks" / str(slot)


def set_block_state(path, block, state):
    """Two bits per block in the dirty table's words (CLEAN 0, DIRTY 1,
    PRE_CHECKOUT 2, POST_CHECKOUT 3)."""
    with open(path, "r+b") as f:
        off = DIRTY_WORDS + (block // 32) * 8
        f.seek(off)
        (w,) = struct.unpack("<Q", f.read(8))
        shift = 2 * (block % 32)
        w = (w & ~(3 << shift)) | (state << shift)
        f.seek(off)
        f.write(struct.pack("<Q", w))


def test_kill_9_with_dirty_chunks_then_restart_writes_back_and_stays_warm(pool):
    assert pool["serve"]().returncode == 0
    f = pool["back"] / "f"
    f.write_bytes(b"o" * (2 * CHUNK))
    p = pool["dir"] / "p"
    p.write_bytes(b"N" * 6000)
    rc, out, _ = client(pool["sock"], "hello", f"open:{f}:rw",
                        f"read:last:0:{2 * CHUNK}:{pool['dir'] / 'g'}",
                        f"write:last:1000:{p}", "sync:last", "stats")
    assert [r[1]["status"] for r in out] == ["OK"] * 6
    assert out[-1][1]["dirty_blocks"] == "2"
    pool["kill"]()
    assert f.read_bytes() == b"o" * (2 * CHUNK)  # nothing was written back before
    assert pool["serve"]().returncode == 0
    want = b"o" * 1000 + b"N" * 6000 + b"o" * (2 * CHUNK - 7000)
    assert f.read_bytes() == want
    st = stats(pool["sock"])
    assert st["used"] == "2" and st["dirty_blocks"] == "0"
    log = (pool["pool"] / "chelld.log").read_text()
    assert "recovery: 2 chunk(s) kept (1 dirty)" in log
    assert "recovery: wrote back 2 dirty block(s), 8192 bytes; 0 chunk(s) still dirty" in log
    # the clean chunk is still cached: reading it fills nothing
    rc, out, _ = client(pool["sock"], "hello", f"open:{f}:ro",
                        f"read:last:0:{2 * CHUNK}:{pool['dir'] / 'g2'}", "stats", "check")
    assert (pool["dir"] / "g2").read_bytes() == want
    assert out[3][1]["fills"] == "0" and out[4][1]["status"] == "OK"


def test_restart_finishes_checkouts_and_evictions_and_frees_unpublished_slots(pool):
    assert pool["serve"]().returncode == 0
    files = [pool["back"] / n for n in "abc"]
    for f in files:
        f.write_bytes(b"-" * 8192)
    ops = ["hello"] + [f"open:{f}:rw" for f in files] + [f"map:{i}:0:w:0:2" for i in range(3)]
    rc, out, _ = client(pool["sock"], *ops)
    slots = [int(o[1]["slot"]) for o in out[4:]]
    pool["kill"]()
    # a: a block written, then checked out by a write-back that never ended
    with open(chunk_file(pool, slots[0]), "r+b") as fh:
        fh.write(b"A" * 4096)
    set_block_state(chunk_file(pool, slots[0]), 0, 2)
    # b: written, then its eviction stopped after REVOKED
    with open(chunk_file(pool, slots[1]), "r+b") as fh:
        fh.seek(4096)
        fh.write(b"B" * 4096)
        fh.seek(STATE)
        fh.write(struct.pack("<I", 2))
    set_block_state(chunk_file(pool, slots[1]), 1, 1)
    # c: its file vanished before the rename that publishes it
    os.unlink(chunk_file(pool, slots[2]))
    assert pool["serve"]().returncode == 0
    assert files[0].read_bytes() == b"A" * 4096 + b"-" * 4096
    assert files[1].read_bytes() == b"-" * 4096 + b"B" * 4096
    st = stats(pool["sock"])
    assert st["used"] == "1"  # a stays (clean now); b's eviction finished; c freed
    assert not chunk_file(pool, slots[1]).exists()
    log = (pool["pool"] / "chelld.log").read_text()
    assert "1 never handed out freed, 1 interrupted eviction(s) finished" in log
    rc, out, _ = client(pool["sock"], "hello", "check")
    assert out[1][1]["status"] == "OK", out


def test_a_dirty_chunk_whose_backing_file_is_gone_is_kept_and_reported(pool):
    assert pool["serve"]().returncode == 0
    f = pool["back"] / "f"
    f.write_bytes(b"1" * 4096)
    p = pool["dir"] / "p"
    p.write_bytes(b"2" * 100)
    rc, out, _ = client(pool["sock"], "hello", f"open:{f}:rw", f"write:last:0:{p}")
    pool["kill"]()
    os.unlink(f)
    assert pool["serve"]().returncode == 0
    st = stats(pool["sock"])
    assert st["dirty_chunks"] == "1" and st["used"] == "1"
    log = (pool["pool"] / "chelld.log").read_text()
    assert "1 chunk(s) still dirty (kept" in log
    # and it survives another restart
    assert stop(pool["pool"]).returncode == 0
    assert pool["serve"]().returncode == 0
    assert stats(pool["sock"])["dirty_chunks"] == "1"


def test_corrupt_meta_pool_is_refused(pool):
    assert pool["serve"]().returncode == 0
    assert stop(pool["pool"]).returncode == 0
    with open(pool["pool"] / "meta.pool", "r+b") as fh:
        fh.seek(0)
        fh.write(b"garbage!" * 16)
    p = pool["serve"]()
    err = p.stderr.decode()
    assert p.returncode == 2, err
    assert "meta.pool" in err and "damaged" in err and "to recreate the pool" in err
    assert not (pool["pool"] / "chelld.sock").exists()


def test_chunk_with_a_bad_control_page_is_refused(pool):
    assert pool["serve"]().returncode == 0
    f = pool["back"] / "f"
    f.write_bytes(b"x" * 100)
    rc, out, _ = client(pool["sock"], "hello", f"open:{f}:ro", "map:last:0:r:0:1")
    slot = out[2][1]["slot"]
    pool["kill"]()
    with open(chunk_file(pool, slot), "r+b") as fh:
        fh.seek(CTL)
        fh.write(b"\xff" * 8)
    p = pool["serve"]()
    err = p.stderr.decode()
    assert p.returncode == 2, err
    assert f"chunks/{slot}: bad control page" in err


def test_truncated_chunk_file_is_refused(pool):
    assert pool["serve"]().returncode == 0
    f = pool["back"] / "f"
    f.write_bytes(b"x" * 100)
    rc, out, _ = client(pool["sock"], "hello", f"open:{f}:ro", "map:last:0:r:0:1")
    pool["kill"]()
    os.truncate(chunk_file(pool, out[2][1]["slot"]), 1000)
    p = pool["serve"]()
    assert p.returncode == 2 and b"has 1000 bytes" in p.stderr


def test_not_a_pool_and_unreadable_backing_directory(pool):
    (pool["pool"] / "meta.pool").write_bytes(b"")
    p = pool["serve"]()
    assert p.returncode == 2 and b"meta.pool" in p.stderr
    os.unlink(pool["pool"] / "meta.pool")
    # root reads any directory: the unreadable one is tried as nobody
    os.chmod(pool["dir"], 0o755)
    os.chmod(pool["pool"], 0o777)
    os.chmod(pool["back"], 0o700)
    p = run(AS_NOBODY + [CHELLD, "--pool", pool["pool"], "--size", "4M", "--backing",
                         pool["back"]])
    assert p.returncode == 2 and b"is not readable" in p.stderr, p.stderr
    os.rmdir(pool["back"])
    p = pool["serve"]()
    assert p.returncode == 2 and b"backing directory" in p.stderr


def test_a_pool_keeps_the_slots_it_was_created_with(pool):
    assert pool["serve"]().returncode == 0  # 8M: a slot per 256K
    assert stop(pool["pool"]).returncode == 0
    p = pool["serve"](size="16M")
    assert p.returncode == 0
    assert b"note: pool" in p.stderr and b"32 chunk slots" in p.stderr
    st = stats(pool["sock"])
    assert st["slots"] == "32" and json.loads(status(pool["pool"]).stdout)["size"] == 16 << 20


def test_a_pool_with_a_slot_per_2m_still_opens_with_its_size(pool):
    """Pools made before the slots got smaller have size / 2M slots: 32
    slots are that geometry for 64M. They open without a note, with the
    capacity of the size, and serve."""
    f = pool["back"] / "f"
    f.write_bytes(bytes(range(256)) * 40000)
    assert pool["serve"]().returncode == 0  # 8M: 32 slots
    assert stop(pool["pool"]).returncode == 0
    p = pool["serve"](size="64M")
    assert p.returncode == 0 and b"note" not in p.stderr, p.stderr
    assert stats(pool["sock"])["slots"] == "32"
    assert json.loads(status(pool["pool"]).stdout)["size"] == 64 << 20
    got = pool["dir"] / "got"
    rc, out, _ = client(pool["sock"], "hello", f"open:{f}:ro",
                        f"read:last:0:{f.stat().st_size}:{got}", "stats")
    assert out[2][1]["status"] == "OK" and got.read_bytes() == f.read_bytes()


def test_kept_dirty_chunk_is_written_back_by_a_flush_once_its_file_is_back(pool):
    assert pool["serve"]().returncode == 0
    f, away = pool["back"] / "f", pool["dir"] / "away"
    f.write_bytes(b"1" * 4096)
    p = pool["dir"] / "p"
    p.write_bytes(b"2" * 100)
    rc, out, _ = client(pool["sock"], "hello", f"open:{f}:rw", f"write:last:0:{p}")
    pool["kill"]()
    os.rename(f, away)  # e.g. a backing file system not mounted yet
    assert pool["serve"]().returncode == 0
    assert stats(pool["sock"])["dirty_chunks"] == "1"
    os.rename(away, f)
    rc, out, _ = client(pool["sock"], "hello", "flush:all", "stats")
    assert out[1][1]["status"] == "OK" and out[1][1]["bytes"] == "4096"
    assert out[2][1]["dirty_chunks"] == "0"
    assert f.read_bytes() == b"2" * 100 + b"1" * 3996
