"""Cache modes per backing directory (docs/CACHE.md, "Cache modes"):
write-back, write-through, write-around, read-only, pass-through; switching
a directory's mode at run time with its dirty data drained; the sequential
cutoff; pinning; the per-file size cap. (Every transcript and the random
differential also run in each mode: test_cache.py, *_in_mode.)

Each test starts its own chelld with the options under test and checks the
backing file from the test itself (outside Chell: a program Chell runs
keeps its children under Chell even with an empty environment), which sees
exactly what reached the backing store.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CHELL, describe, fresh_manager, run

PLAIN_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
PLAIN_ENV.update({k: v for k, v in os.environ.items() if k in ("ASAN_OPTIONS", "UBSAN_OPTIONS")})
MODES = ("write-back", "write-through", "write-around", "read-only", "pass-through")


def pattern(n, seed):
    return bytes((i * 131 + seed) % 251 for i in range(n))


def cache_json(m, sub, *extra):
    res = run([CHELL, "cache", sub, "--pool", m.pool, "--json", *extra], timeout=60)
    assert res.returncode == 0, describe(res)
    return json.loads(res.stdout)


def file_stat(m, path):
    for f in cache_json(m, "stat")["files"]:
        if f["path"] == str(path):
            return f
    return None


def cache_cli(m, *args):
    return run([CHELL, "cache", *args[:1], "--pool", m.pool, *args[1:]], timeout=120)


# Writes under Chell, then waits while the test reads the backing file
# before the writer closes anything: what reached the backing store.
WRITER = r"""
import os, sys
path = sys.argv[1]
def pat(n, seed):
    return bytes((i * 131 + seed) % 251 for i in range(n))
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
data = bytearray(pat(300000, 3))
os.write(fd, data)                      # extending, past the 16 KB publication write
os.pwrite(fd, b"MIDDLE", 100000)        # inside the file
data[100000:100006] = b"MIDDLE"
ap = os.open(path, os.O_WRONLY | os.O_APPEND)
os.write(ap, b"TAIL" * 10000)           # appending
data += b"TAIL" * 10000
os.pwrite(fd, b"X" * 8192, 4096)        # whole blocks
data[4096:4096 + 8192] = b"X" * 8192
sys.stdout.buffer.write(bytes(data))
sys.stdout.flush()
sys.stdin.readline()
os.lseek(fd, 0, os.SEEK_SET)
print("read", "same" if os.read(fd, len(data) + 10) == bytes(data) else "differs")
"""


@pytest.mark.parametrize("mode", MODES)
def test_writes_reach_the_backing_file(mode, tmp_path):
    """Every mode but write-back puts a write in the backing file before it
    returns; write-back keeps it in the pool (the control: the check can
    tell)."""
    with fresh_manager(start_args=["--cache-mode", mode]) as m:
        prog = tmp_path / "w.py"
        prog.write_text(WRITER)
        f = Path(m.backing) / "f"
        p = subprocess.Popen(m.cmd([sys.executable, prog, f]), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=dict(PLAIN_ENV))
        written = p.stdout.read(300000 + 40000)
        backing = f.read_bytes()
        out, _ = p.communicate(b"go\n", timeout=60)
        assert p.returncode == 0 and b"read same" in out, out
        assert len(written) == 340000
        assert (backing == written) == (mode != "write-back"), mode
        st = cache_json(m, "stat")
        if mode in ("write-around", "read-only", "pass-through"):
            assert st["dirty_bytes"] == 0, st  # nothing is ever dirty in the pool


READER_WRITER = r"""
import os, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDWR)
whole = os.pread(fd, 4 << 20, 0)                 # cached
assert os.pread(fd, 4096, 1 << 20) == whole[1 << 20:(1 << 20) + 4096]
os.pwrite(fd, b"NEW" * 1000, (1 << 20) + 5)      # around the cache
got = os.pread(fd, 3000, (1 << 20) + 5)
print("reread", "new" if got == b"NEW" * 1000 else "stale")
print("again", "same" if os.pread(fd, 4 << 20, 0) == os.pread(fd, 4 << 20, 0) else "differs")
"""


@pytest.mark.parametrize("mode", ("write-around", "read-only"))
def test_writes_around_drop_cached_data(mode, tmp_path):
    """write-around and read-only: reads are cached, a write goes to the
    backing file and the cached copy of its range is dropped, so the next
    read sees it; nothing is ever dirty in the pool."""
    with fresh_manager(start_args=["--cache-mode", mode]) as m:
        f = Path(m.backing) / "f"
        f.write_bytes(pattern(3 << 20, 5))
        prog = tmp_path / "rw.py"
        prog.write_text(READER_WRITER)
        res = run(m.cmd([sys.executable, prog, f],
                        ["--set", f"stats.file={tmp_path}/stats.%p.json"]), env=dict(PLAIN_ENV))
        assert res.returncode == 0, describe(res)
        assert b"reread new" in res.stdout and b"again same" in res.stdout, describe(res)
        expect = bytearray(pattern(3 << 20, 5))
        expect[(1 << 20) + 5:(1 << 20) + 3005] = b"NEW" * 1000
        assert f.read_bytes() == bytes(expect)
        st = file_stat(m, f)
        assert st and st["dirty_bytes"] == 0 and st["valid_bytes"] > 0, st
        stats = [json.loads(p.read_text()) for p in tmp_path.glob("stats.*.json")]
        assert sum(s.get("read_hits", 0) for s in stats) > 0, stats


DRIVER = r"""
import os, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "write":
        off, n, seed = int(cmd[1]), int(cmd[2]), int(cmd[3])
        os.pwrite(fd, bytes((i * 131 + seed) % 251 for i in range(n)), off)
        os.fsync(fd)
    elif cmd[0] == "digest":
        import hashlib
        os.lseek(fd, 0, os.SEEK_SET)
        print(hashlib.sha256(os.read(fd, 64 << 20)).hexdigest())
    print("ok", flush=True)
"""


class Driver:
    """A process under Chell that keeps the file open and writes on command."""

    def __init__(self, m, prog, path):
        self.p = subprocess.Popen(m.cmd([sys.executable, prog, path]), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, env=dict(PLAIN_ENV), text=True)

    def do(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        out = []
        while True:
            got = self.p.stdout.readline()
            assert got, "the driver died"
            if got.strip() == "ok":
                return out
            out.append(got.strip())

    def close(self):
        self.p.stdin.close()
        assert self.p.wait(timeout=60) == 0


def test_mode_switch_drains_and_reaches_open_files(tmp_path):
    """`chell cache mode DIR MODE` writes the directory's dirty data back
    first, and a program that has a file open carries on under the new
    mode: write-back -> write-through -> write-around -> pass-through ->
    write-back, the backing file checked after each step."""
    with fresh_manager(start_args=[]) as m:
        prog = tmp_path / "d.py"
        prog.write_text(DRIVER)
        f = Path(m.backing) / "f"
        model = bytearray()

        def write(d, off, n, seed):
            d.do(f"write {off} {n} {seed}")
            data = pattern(n, seed)
            if len(model) < off + n:
                model.extend(bytes(off + n - len(model)))
            model[off:off + n] = data

        d = Driver(m, prog, f)
        try:
            write(d, 0, 1 << 20, 1)
            assert f.read_bytes() != bytes(model)  # write-back: still in the pool
            res = cache_cli(m, "mode", "--json", m.backing, "write-through")
            assert res.returncode == 0, describe(res)
            out = json.loads(res.stdout)
            assert out["mode"] == "write-through" and out["bytes_written"] > 0, out
            assert f.read_bytes() == bytes(model)  # drained
            write(d, 4096 + 17, 5000, 2)           # through an open descriptor
            assert f.read_bytes() == bytes(model)
            write(d, 3 << 20, 70000, 3)            # extending
            assert f.read_bytes() == bytes(model)
            res = cache_cli(m, "mode", m.backing, "write-around")
            assert res.returncode == 0, describe(res)
            write(d, 100, 9000, 4)
            assert f.read_bytes() == bytes(model)
            assert cache_json(m, "stat")["dirty_bytes"] == 0
            res = cache_cli(m, "mode", m.backing, "pass-through")
            assert res.returncode == 0, describe(res)
            write(d, 2 << 20, 4096, 5)
            assert f.read_bytes() == bytes(model)
            res = cache_cli(m, "mode", m.backing, "write-back")
            assert res.returncode == 0, describe(res)
            write(d, 50, 10, 6)
            import hashlib
            assert d.do("digest") == [hashlib.sha256(bytes(model)).hexdigest()]
        finally:
            d.close()
        m.flush()
        assert f.read_bytes() == bytes(model)
        st = cache_json(m, "status")
        assert {"dir": str(Path(m.backing).resolve()), "mode": "write-back"} in st["mode_rules"]


def test_mode_cli(tmp_path):
    """--help, the exit statuses, and what status shows."""
    res = run([CHELL, "cache", "mode", "--help"])
    assert res.returncode == 0 and b"write-around" in res.stdout, describe(res)
    res = run([CHELL, "cache", "pin", "--help"])
    assert res.returncode == 0 and b"cache.pin_max" in res.stdout, describe(res)
    with fresh_manager(start_args=["--cache-mode", "read-only"]) as m:
        sub = Path(m.backing) / "sub"
        sub.mkdir()
        assert cache_cli(m, "mode", m.backing, "write-sideways").returncode == 2
        res = cache_cli(m, "mode", str(tmp_path), "write-through")
        assert res.returncode == 2 and b"backing" in res.stderr, describe(res)
        (sub / "file").write_bytes(b"x")
        res = cache_cli(m, "mode", str(sub / "file"), "write-through")
        assert res.returncode == 2 and b"directory" in res.stderr, describe(res)
        res = cache_cli(m, "mode", str(sub), "pass-through")
        assert res.returncode == 0, describe(res)
        res = cache_cli(m, "mode", str(sub))
        assert res.returncode == 0 and b"pass-through" in res.stdout, describe(res)
        res = cache_cli(m, "mode", m.backing)
        assert res.returncode == 0 and b"read-only" in res.stdout, describe(res)
        st = cache_json(m, "status")
        assert st["mode"] == "read-only", st
        assert st["mode_rules"] == [{"dir": str(sub.resolve()), "mode": "pass-through"}], st
        pool = m.pool
    res = run([CHELL, "cache", "mode", "--pool", pool, "/tmp", "write-back"])
    assert res.returncode == 1, describe(res)


def test_sequential_cutoff(tmp_path):
    """A sequential read of a file larger than cache.seq_cutoff reads the
    chunks the cache does not hold from the backing file once the stream is
    established: most of the file is not cached, and the bytes are right.
    With a cutoff above the file's size, all of it is cached."""
    data = pattern(12 << 20, 9)
    for cutoff, cached in (("1M", False), ("64M", True)):
        with fresh_manager(start_args=["--seq-cutoff", cutoff], size="64M") as m:
            f = Path(m.backing) / "big"
            f.write_bytes(data)
            res = run(m.cmd(["sh", "-c", f"cat {f} | md5sum"]), env=dict(PLAIN_ENV))
            assert res.returncode == 0, describe(res)
            plain = run(["sh", "-c", f"md5sum < {f}"], env=dict(PLAIN_ENV))
            assert res.stdout.split()[0] == plain.stdout.split()[0]
            st = file_stat(m, f)
            valid = st["valid_bytes"] if st else 0
            bypassed = cache_json(m, "status")["seq_bypassed"]
            if cached:
                assert valid >= len(data) and bypassed == 0, (valid, bypassed)
            else:
                assert valid <= 4 << 20 and bypassed > 0, (valid, bypassed)


def read_under_chell(m, *paths):
    res = run(m.cmd(["sh", "-c", " && ".join(f"cat {p} > /dev/null" for p in paths)]),
              env=dict(PLAIN_ENV))
    assert res.returncode == 0, describe(res)


@pytest.mark.parametrize("pinned", (True, False))
def test_pinned_file_survives_eviction(pinned):
    """A pinned file's chunks stay while other files' reads evict
    everything else (the control: unpinned, they go)."""
    with fresh_manager(start_args=["--seq-cutoff", "1G"]) as m:  # 8M pool
        a = Path(m.backing) / "a"
        a.write_bytes(pattern(3 << 20, 1))
        others = []
        for i in range(3):
            o = Path(m.backing) / f"o{i}"
            o.write_bytes(pattern(5 << 20, 2 + i))
            others.append(o)
        if pinned:
            res = cache_cli(m, "pin", str(a))
            assert res.returncode == 0, describe(res)
        read_under_chell(m, a)
        assert file_stat(m, a)["valid_bytes"] >= 3 << 20
        read_under_chell(m, *others)
        read_under_chell(m, *others)
        st = file_stat(m, a)
        valid = st["valid_bytes"] if st else 0
        if pinned:
            assert valid >= 3 << 20, st
            pins = cache_json(m, "status")["pins"]
            assert pins == [{"path": str(a.resolve()), "bytes": 3 << 20}], pins
        else:
            assert valid < 3 << 20, st
        assert cache_json(m, "stat")["evictions"] > 0


def test_pin_limit_and_unpin():
    """cache.pin_max: a pin that would exceed it is refused with exit 3 and
    the setting named; unpin frees its bytes; unknown pins exit 2."""
    with fresh_manager(start_args=["--pin-max", "4M"]) as m:
        d = Path(m.backing) / "dir"
        d.mkdir()
        (d / "x").write_bytes(bytes(3 << 20))
        big = Path(m.backing) / "big"
        big.write_bytes(bytes(2 << 20))
        assert cache_cli(m, "pin", str(d)).returncode == 0
        res = cache_cli(m, "pin", str(big))
        assert res.returncode == 3 and b"cache.pin_max" in res.stderr, describe(res)
        assert cache_cli(m, "unpin", str(d)).returncode == 0
        assert cache_cli(m, "pin", str(big)).returncode == 0
        res = cache_cli(m, "unpin", str(d))
        assert res.returncode == 2 and b"not pinned" in res.stderr, describe(res)
        st = cache_json(m, "status")
        assert st["pinned_bytes"] == 2 << 20 and st["pin_max"] == 4 << 20, st


CAP_WRITER = r"""
import os, sys
big, small = sys.argv[1], sys.argv[2]
def pat(n, seed):
    return bytes((i * 131 + seed) % 251 for i in range(n))
fd = os.open(big, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
for i in range(12):                       # grows past the cap while open
    os.write(fd, pat(256 << 10, i))
os.pwrite(fd, b"HEAD", 0)
fd2 = os.open(small, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd2, pat(100000, 50))
assert os.pread(fd2, 100000, 0) == pat(100000, 50)
want = b"HEAD" + b"".join(pat(256 << 10, i) for i in range(12))[4:]
assert os.pread(fd, len(want) + 1, 0) == want
print("ok")
"""


def test_per_file_cap(tmp_path):
    """cache.file_max: a file that grows past it is written back and leaves
    the cache (its bytes intact), a file already larger is never cached,
    smaller ones are cached."""
    with fresh_manager(start_args=["--file-max", "1M"]) as m:
        big, small = Path(m.backing) / "big", Path(m.backing) / "small"
        prog = tmp_path / "cap.py"
        prog.write_text(CAP_WRITER)
        res = run(m.cmd([sys.executable, prog, big, small]), env=dict(PLAIN_ENV))
        assert res.returncode == 0 and b"ok" in res.stdout, describe(res)
        want = b"HEAD" + b"".join(pattern(256 << 10, i) for i in range(12))[4:]
        assert big.read_bytes() == want  # nothing of it left only in the pool
        st = file_stat(m, big)
        assert st is None or st["valid_bytes"] == 0, st
        assert file_stat(m, small)["valid_bytes"] > 0
        assert cache_json(m, "stat")["bypassed"] > 0
        read_under_chell(m, big)  # already larger: never cached
        st = file_stat(m, big)
        assert st is None or st["valid_bytes"] == 0, st


FLIPPED_WRITER = r"""
import hashlib, os, sys
path, blocks = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
ap = os.open(path + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
p = -1
while p < 1 or not os.path.exists(path + ".stop"):  # until the test has switched enough
    p += 1
    for b in range(blocks):
        os.pwrite(fd, (b"%06d:%06d;" % (p, b)) * 292 + b"\n" * 8, b * 4096)
        if b % 16 == 0:
            os.write(ap, b"%06d:%06d\n" % (p, b))
        assert os.pread(fd, 14, b * 4096) == b"%06d:%06d;" % (p, b)
print(p + 1, hashlib.sha256(os.pread(fd, blocks * 4096 + 1, 0)).hexdigest())
"""


def test_mode_switches_under_a_running_writer(tmp_path):
    """A writer under Chell rewrites a file (pwrite, appends, reads back
    each block) while the directory's mode is switched 40 times through
    all five: every read back is its own last write, and the final bytes
    are the last pass, through the cache and in the backing file after a
    flush."""
    import hashlib
    import itertools
    import time
    blocks = 700  # 2.8 MB, over two chunks; pool 8 MB
    with fresh_manager() as m:
        prog = tmp_path / "fw.py"
        prog.write_text(FLIPPED_WRITER)
        f = Path(m.backing) / "f"
        p = subprocess.Popen(m.cmd([sys.executable, prog, f, blocks]),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(PLAIN_ENV))
        try:
            # 40 switches while it writes (the last one back to write-back)
            for mode in itertools.islice(itertools.cycle(MODES[1:] + MODES[:1]), 40):
                assert p.poll() is None, p.communicate()[1].decode()
                res = cache_cli(m, "mode", m.backing, mode)
                assert res.returncode == 0, describe(res)
                time.sleep(0.01)
        finally:
            Path(str(f) + ".stop").touch()
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
        passes, digest = out.decode().split()
        passes = int(passes)
        want = b"".join((b"%06d:%06d;" % (passes - 1, b)) * 292 + b"\n" * 8 for b in range(blocks))
        assert digest == hashlib.sha256(want).hexdigest()
        m.flush()
        assert f.read_bytes() == want
        log = (Path(str(f) + ".log")).read_bytes()
        assert log == b"".join(b"%06d:%06d\n" % (q, b) for q in range(passes)
                               for b in range(0, blocks, 16))


def test_switches_and_pins_survive_a_restart(tmp_path):
    """A mode switch and a pin made at run time hold after the manager is
    stopped and started again (and after a kill -9): they are kept in the
    pool (modes.state). A damaged line, or a directory gone since, is
    logged with the file and line and skipped; the rest still holds."""
    with fresh_manager() as m:
        sub = Path(m.backing) / "sub"
        sub.mkdir()
        gone = Path(m.backing) / "gone"
        gone.mkdir()
        f = Path(m.backing) / "f"
        f.write_bytes(pattern(1 << 20, 5))
        for args in (("mode", str(sub.resolve()), "write-through"),
                     ("mode", str(gone.resolve()), "read-only"), ("pin", str(f.resolve()))):
            res = cache_cli(m, *args)
            assert res.returncode == 0, describe(res)
        before = cache_json(m, "status")
        m.stop()
        m.start()
        after = cache_json(m, "status")
        assert after["mode_rules"] == before["mode_rules"], (before, after)
        assert {"dir": str(sub.resolve()), "mode": "write-through"} in after["mode_rules"]
        assert after["pins"] == [{"path": str(f.resolve()), "bytes": 1 << 20}], after
        # killed, a directory removed and a line damaged meanwhile
        pid = int((Path(m.pool) / "chelld.pid").read_text().split()[0])
        os.kill(pid, 9)
        gone.rmdir()
        state = Path(m.pool) / "modes.state"
        state.write_text(state.read_text() + "mode sideways /x\n")
        m.start()
        st = cache_json(m, "status")
        assert st["mode_rules"] == [{"dir": str(sub.resolve()), "mode": "write-through"}], st
        assert st["pins"] == [{"path": str(f.resolve()), "bytes": 1 << 20}], st
        log = (Path(m.pool) / "chelld.log").read_text()
        assert f"modes.state line 3: mode {gone.resolve()}: No such file or directory" in log, log
        assert "modes.state line 5: not 'mode MODE PATH' with a known MODE: ignored" in log, log
        # an unpin is kept too; a foreign file is ignored as a whole
        assert cache_cli(m, "unpin", str(f.resolve())).returncode == 0
        m.stop()
        m.start()
        assert cache_json(m, "status")["pins"] == []
        m.stop()
        state.write_text("not chell\nmode read-only " + str(sub.resolve()) + "\n")
        m.start()
        assert cache_json(m, "status")["mode_rules"] == []
        assert "not a modes file of this version" in (Path(m.pool) / "chelld.log").read_text()
