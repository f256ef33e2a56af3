"""What chelld's descriptors let others do (docs/CHELLD.md, "Descriptors").

A descriptor of a file is visible to every other user of it: a write
descriptor makes exec of the file fail with ETXTBSY and a remount
read-only fail with EBUSY; any descriptor makes an unmount of the file
system under a backing directory fail with EBUSY. chelld once kept a
read-write descriptor of every file it had cached, clean ones included,
until `flush --drop`. Now it keeps read-only ones, only while a client has
the file open or it holds dirty blocks, at most --max-fds of the latter,
and a write descriptor only for a write-back. (Leases: tests/progs/
sem_lease.c, a transcript run under every mode.)
"""
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import BACKING_ROOT, CHELL, run
from test_cache import PLAIN_ENV, describe, fresh_manager


def chelld_pid(pool):
    return int((Path(pool) / "chelld.pid").read_text().split()[0])


def held(pool, under):
    """chelld's descriptors of files under `under`: [(path, access mode)]."""
    pid = chelld_pid(pool)
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            flags = next(l for l in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines()
                         if l.startswith("flags:"))
        except (OSError, StopIteration):
            continue  # closed meanwhile
        if target.startswith(str(under) + "/"):
            out.append((target, int(flags.split()[1], 8) & 3))
    return out


def flush(m, *files):
    res = run([CHELL, "cache", "flush", "--pool", m.pool, "--quiet", *files], timeout=120)
    assert res.returncode == 0, describe(res)


def test_a_program_written_under_cache_mode_runs(tmp_path):
    """`cp prog DIR/bin/ && DIR/bin/prog` under cache mode, then the same
    program run plainly (outside Chell) after a flush: never ETXTBSY, and
    the bytes the kernel executes are the ones written."""
    echo = shutil.which("echo", path="/bin:/usr/bin")
    with fresh_manager() as m:
        bindir = m.backing / "bin"
        bindir.mkdir()
        prog = bindir / "prog"
        res = run(m.cmd(["sh", "-c", f"cp {echo} {prog} && {prog} written-and-run"]),
                  env=dict(PLAIN_ENV))
        assert res.returncode == 0 and res.stdout == b"written-and-run\n", describe(res)
        # chelld holds no write descriptor of it (the cp is done)
        assert all(acc == os.O_RDONLY for _, acc in held(m.pool, m.backing)), \
            held(m.pool, m.backing)
        flush(m)
        res = run([prog, "plain"], env=dict(PLAIN_ENV))
        assert res.returncode == 0 and res.stdout == b"plain\n", describe(res)
        assert prog.read_bytes() == Path(echo).read_bytes()
        # and overwriting it while chelld caches it works too
        res = run(m.cmd(["sh", "-c", f"cp {echo} {prog}.new && mv {prog}.new {prog} && {prog} again"]),
                  env=dict(PLAIN_ENV))
        assert res.returncode == 0 and res.stdout == b"again\n", describe(res)


def test_descriptors_are_read_only_bounded_and_released(tmp_path):
    """Files written under cache mode and closed: chelld keeps a read-only
    descriptor of each while it holds dirty blocks, at most --max-fds of
    them (the least recently used beyond that is written back and closed),
    and none once everything is written back."""
    pool = tempfile.mkdtemp(prefix="chell-cache-pool-", dir="/dev/shm")
    backing = Path(tempfile.mkdtemp(prefix="chell-cache-back-", dir=BACKING_ROOT))
    try:
        res = run([CHELL, "cache", "start", "--pool", pool, "--size", "64M", "--backing", backing,
                   "--max-fds", "8"])
        assert res.returncode == 0, describe(res)
        # 20 files one after the other, then 20 open at once (registered:
        # not among the bounded descriptors until they are closed)
        script = ("import os, sys\n"
                  "d = sys.argv[1]\n"
                  "for i in range(20):\n"
                  "    with open(f'{d}/f{i}', 'wb') as f:\n"
                  "        f.write(bytes([65 + i % 26]) * (10000 + i))\n"
                  "    if i == 10:\n"
                  "        g = open(f'{d}/f0', 'rb'); g.read()\n"
                  "fs = [open(f'{d}/f{i}', 'wb') for i in range(20, 40)]\n"
                  "for i, f in enumerate(fs, 20):\n"
                  "    f.write(bytes([65 + i % 26]) * (10000 + i)); f.flush()\n"
                  "for f in fs:\n"
                  "    f.close()\n"
                  "print(len(os.listdir(d)))\n")
        argv = [str(CHELL), "run", "--mode", "cache", "--set", f"cache.pool={pool}",
                "--set", f"cache.backing={backing}", "--", "python3", "-c", script, str(backing)]
        res = run(argv, env=dict(PLAIN_ENV))
        assert res.returncode == 0 and res.stdout == b"40\n", describe(res)
        h = held(pool, backing)
        assert 0 < len(h) <= 8, h
        assert all(acc == os.O_RDONLY for _, acc in h), h
        res = run([CHELL, "cache", "flush", "--pool", pool, "--quiet"])
        assert res.returncode == 0, describe(res)
        assert held(pool, backing) == []
        for i in range(40):
            assert (backing / f"f{i}").read_bytes() == bytes([65 + i % 26]) * (10000 + i), i
        # reading them back through the cache still works (descriptors reopened)
        res = run(argv[:argv.index("--") + 1] + ["cat"] + [str(backing / f"f{i}") for i in range(40)],
                  env=dict(PLAIN_ENV))
        assert res.returncode == 0, describe(res)
        assert res.stdout == b"".join(bytes([65 + i % 26]) * (10000 + i) for i in range(40))
        assert held(pool, backing) == []
    finally:
        run([CHELL, "cache", "stop", "--pool", pool, "--quiet"], timeout=120)
        shutil.rmtree(pool, ignore_errors=True)
        shutil.rmtree(backing, ignore_errors=True)


def can_mount():
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    d = tempfile.mkdtemp(prefix="chell-mnt-probe-")
    try:
        ok = run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", d]).returncode == 0
        if ok:
            run(["umount", d])
        return ok
    finally:
        os.rmdir(d)


@pytest.mark.skipif(not can_mount(), reason="needs root and mount(8)")
def test_unmount_and_remount_below_a_backing_directory(tmp_path):
    """A file system mounted below a backing directory, written and read
    under cache mode: once its data is written back it can be remounted
    read-only and unmounted while chelld runs, and chelld keeps working."""
    with fresh_manager() as m:
        mnt = m.backing / "mnt"
        mnt.mkdir()
        assert run(["mount", "-t", "tmpfs", "-o", "size=16m", "none", mnt]).returncode == 0
        try:
            res = run(m.cmd(["sh", "-c", f"seq 1 20000 > {mnt}/a && cat {mnt}/a > {mnt}/b && wc -l {mnt}/b"]),
                      env=dict(PLAIN_ENV))
            assert res.returncode == 0 and res.stdout.split()[0] == b"20000", describe(res)
            # dirty data, no client: chelld holds read-only descriptors only,
            # which do not keep a remount read-only from succeeding ...
            assert all(acc == os.O_RDONLY for _, acc in held(m.pool, mnt))
            flush(m)
            assert held(m.pool, mnt) == []
            res = run(["mount", "-o", "remount,ro", mnt])
            assert res.returncode == 0, describe(res)
            res = run(m.cmd(["cat", f"{mnt}/b"]), env=dict(PLAIN_ENV))
            assert res.returncode == 0 and res.stdout.count(b"\n") == 20000, describe(res)
            assert run(["mount", "-o", "remount,rw", mnt]).returncode == 0
        finally:
            res = run(["umount", mnt])
        assert res.returncode == 0, describe(res)
        # chelld is fine: another file under the backing directory
        res = run(m.cmd(["sh", "-c", f"echo still > {m.backing}/c && cat {m.backing}/c"]),
                  env=dict(PLAIN_ENV))
        assert res.returncode == 0 and res.stdout == b"still\n", describe(res)
        out = m.client("stats")
        assert "status=OK" in out or "pid" in out, out
