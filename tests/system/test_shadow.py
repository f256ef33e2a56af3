"""The shadow handler: it must stay silent on correct runs and fail loudly
(SIGABRT, a report with the history) on a real inconsistency.

The inconsistencies are produced for real, not through a test hook: a plain
process (outside Chell) changes the shadow copy behind Chell's back while
the program under shadow keeps the file open, so the next comparison sees
the handled file and its copy disagree.
"""
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import chell_cmd, run

PY = sys.executable


def mangle(path):
    """Shadow file name of an absolute path (see src/handlers/shadow_name.c)."""
    return (str(path).replace("%", "%25").replace("/", "%2F").replace("#", "%23"))


@pytest.fixture
def sdir(workdir):
    """Shadow dir on tmpfs, like the files: same file-system type on both sides."""
    d = workdir / "shadow"
    d.mkdir()
    return d


@pytest.fixture
def data(workdir):
    d = workdir / "data"
    d.mkdir()
    return d


KEEP = ["--set", "shadow.keep=1"]   # copies stay after the last close, to be compared here


def shadow_run(data, sdir, argv, extra=(), **kw):
    env = dict(os.environ)
    env.pop("CHELL_SHADOW_DIR", None)
    env.update(kw.pop("env", {}))
    cmd = chell_cmd("shadow", [data], argv, ["--shadow-dir", str(sdir), *extra])
    return run(cmd, env=env, **kw)


def reports(sdir):
    return sorted(sdir.glob("divergence.*.txt"))


WORKLOAD = textwrap.dedent(r"""
    import os, sys
    d = sys.argv[1]
    p = os.path.join(d, "f")
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    assert os.write(fd, b"hello world\n" * 1000) == 12000
    os.lseek(fd, 5, os.SEEK_SET)
    assert os.read(fd, 6) == b" world"
    os.pwrite(fd, b"XYZ", 100000)                 # leaves a hole
    assert os.fstat(fd).st_size == 100003
    os.lseek(fd, 0, os.SEEK_HOLE); os.lseek(fd, 20000, os.SEEK_DATA)
    os.ftruncate(fd, 50000); os.ftruncate(fd, 70000)
    os.posix_fallocate(fd, 0, 200000)
    os.lseek(fd, 0, os.SEEK_END); os.write(fd, b"tail")
    os.fsync(fd); os.fdatasync(fd)
    os.readv(fd, [bytearray(10), bytearray(3000)])
    os.pread(fd, 100, 199990)
    os.preadv(fd, [bytearray(7)], 3)
    os.pwritev(fd, [b"ab", b"cd"], 7)
    os.set_blocking(fd, False)
    fd2 = os.open(p, os.O_WRONLY | os.O_APPEND)    # second description, write-only
    os.write(fd2, b"appended")
    os.pwrite(fd2, b"P", 0)                        # Linux: appends anyway
    fd3 = os.dup(fd2); os.close(fd2); os.write(fd3, b"!"); os.close(fd3)
    os.truncate(p, 1234)
    assert os.stat(p).st_size == 1234
    with open(p, "rb") as f:
        data = f.read()
    pid = os.fork()
    if pid == 0:                                   # shares the description
        os.lseek(fd, 0, os.SEEK_SET); os.write(fd, b"child"); os._exit(0)
    os.waitpid(pid, 0)
    assert os.lseek(fd, 0, os.SEEK_CUR) == 5
    os.close(fd)
    g = os.open(os.path.join(d, "g"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(g, b"new file"); os.close(g)
    try:
        os.open(os.path.join(d, "missing"), os.O_RDONLY)
    except FileNotFoundError:
        pass
    print("ok", len(data))
""")


def test_correct_run_is_silent_and_copies_match(data, sdir, tmp_path):
    script = tmp_path / "work.py"
    script.write_text(WORKLOAD)
    res = shadow_run(data, sdir, [PY, script, data], extra=KEEP)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-4000:]
    assert res.stdout.decode().strip() == "ok 1234"
    assert b"DIVERGENCE" not in res.stderr
    assert reports(sdir) == []
    # The shadow copies ended up identical to the files.
    for name in ("f", "g"):
        real = data / name
        copy = sdir / mangle(real)
        assert copy.read_bytes() == real.read_bytes(), name
    assert not (sdir / mangle(data / "missing")).exists()


def test_under_test_trace_stack(data, sdir, tmp_path):
    """shadow.under_test=trace: the traced stack is what is checked."""
    script = tmp_path / "work.py"
    script.write_text(WORKLOAD)
    tr = tmp_path / "trace.%p"
    res = shadow_run(data, sdir, [PY, script, data],
                     extra=["--shadow-under-test", "trace", "--trace-file", str(tr)])
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-4000:]
    traces = "".join(p.read_text(errors="replace") for p in tmp_path.glob("trace.*"))
    assert "pwrite" in traces and "ftruncate" in traces


DIVERGE = textwrap.dedent(r"""
    import os, sys
    fd = os.open(sys.argv[1], os.O_RDWR)
    os.write(fd, b"0123456789")
    print("ready", flush=True)
    sys.stdin.readline()              # the test tampers with the shadow now
    op = sys.argv[2]
    if op == "read":
        os.lseek(fd, 0, os.SEEK_SET)
        os.read(fd, 100)
    elif op == "fstat":
        os.fstat(fd)
    elif op == "write":
        os.write(fd, b"abc")
    print("not reached", flush=True)
""")


def start_and_tamper(data, sdir, tmp_path, op, tamper):
    target = data / "victim"
    target.write_bytes(b"abcdefghijklmnopqrstuvwxyz\n")
    script = tmp_path / "diverge.py"
    script.write_text(DIVERGE)
    env = dict(os.environ)
    env.pop("CHELL_SHADOW_DIR", None)
    cmd = chell_cmd("shadow", [data], [PY, script, target, op], ["--shadow-dir", str(sdir)])
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    assert p.stdout.readline() == b"ready\n"
    copy = sdir / mangle(target)
    assert copy.exists(), "no shadow copy was made"
    tamper(copy)                       # a plain process: Chell sees nothing
    out, err = p.communicate(b"go\n", timeout=60)
    return p.returncode, out.decode(), err.decode(errors="replace"), target


def aborted(rc):
    """Died of SIGABRT: `chell run` either execs the program (the caller
    sees the signal) or waits for it and exits with 128+6."""
    return rc in (-signal.SIGABRT, 128 + signal.SIGABRT)


def flip_byte(copy, at=13):
    with open(copy, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x20]))


def test_detects_changed_data_on_read(data, sdir, tmp_path):
    rc, out, err, target = start_and_tamper(data, sdir, tmp_path, "read", flip_byte)
    assert aborted(rc), (rc, err)
    assert "not reached" not in out
    assert "DIVERGENCE" in err
    assert "data differs at file offset 13" in err
    rep = reports(sdir)
    assert len(rep) == 1
    text = rep[0].read_text()
    pid = int(re.search(r"divergence\.(\d+)\.txt", rep[0].name).group(1))
    assert f"DIVERGENCE in pid {pid}" in text
    assert f"file:      {target}" in text
    assert "operation: read" in text
    # expected byte is the tampered shadow ('n' ^ 0x20 = 'N'), got the file's 'n'
    assert re.search(r"expected \(shadow\) at 13: 4e", text)
    assert re.search(r"got \(under test\) at 13: 6e", text)
    # The history, oldest first: the open, the write, the seek, the read.
    hist = text.split("oldest first):\n", 1)[1].splitlines()
    ops = [re.search(r"#\d+ tid \d+ (\w+)", h).group(1) for h in hist]
    assert ops == ["open", "write", "lseek", "read"], hist
    assert "len=10" in hist[1] and "test=10 shadow=10" in hist[1]


def test_detects_size_change_on_fstat(data, sdir, tmp_path):
    def shrink(copy):
        os.truncate(copy, 3)
    rc, out, err, _ = start_and_tamper(data, sdir, tmp_path, "fstat", shrink)
    assert aborted(rc), (rc, err)
    assert "fstat: st_size 27 under test, 3 on the shadow" in err
    assert len(reports(sdir)) == 1


def test_detects_offset_divergence_on_write(data, sdir, tmp_path):
    # Replacing the copy by another file: the write lands in the old
    # (unlinked) copy, fine; but pre-growing the copy changes what an
    # O_APPEND-free write sees only in size, so check size/offset reports.
    def grow(copy):
        with open(copy, "ab") as f:
            f.write(b"extra bytes")
    rc, out, err, _ = start_and_tamper(data, sdir, tmp_path, "write", grow)
    assert aborted(rc), (rc, err)
    assert "write: file size is 27 under test, 38 on the shadow" in err


def test_report_path_setting_expands_pid(data, sdir, tmp_path):
    rp = tmp_path / "rep-%p.txt"
    target = data / "victim"
    target.write_bytes(b"abcdefghijklmnopqrstuvwxyz\n")
    script = tmp_path / "diverge.py"
    script.write_text(DIVERGE)
    env = dict(os.environ)
    env.pop("CHELL_SHADOW_DIR", None)
    cmd = chell_cmd("shadow", [data], [PY, script, target, "read"],
                    ["--shadow-dir", str(sdir), "--set", f"shadow.report={rp}"])
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    assert p.stdout.readline() == b"ready\n"
    flip_byte(sdir / mangle(target), 2)
    _, err = p.communicate(b"go\n", timeout=60)
    assert aborted(p.returncode)
    reps = list(tmp_path.glob("rep-*.txt"))
    assert len(reps) == 1 and re.fullmatch(r"rep-\d+\.txt", reps[0].name)
    assert "data differs at file offset 2" in reps[0].read_text()
    assert reports(sdir) == []


def test_copy_refreshed_at_first_open(data, sdir, tmp_path):
    """Changes made outside Chell between runs are not divergences."""
    f = data / "f"
    f.write_bytes(b"first version\n")
    r1 = shadow_run(data, sdir, ["cat", f], extra=KEEP)
    assert r1.returncode == 0 and r1.stdout == b"first version\n"
    f.write_bytes(b"changed outside chell, and longer\n")   # plain write
    r2 = shadow_run(data, sdir, ["cat", f], extra=KEEP)
    assert r2.returncode == 0, r2.stderr.decode(errors="replace")
    assert r2.stdout == b"changed outside chell, and longer\n"
    assert (sdir / mangle(f)).read_bytes() == f.read_bytes()


CONCURRENT = textwrap.dedent(r"""
    import os, sys
    p = os.path.join(sys.argv[1], "shared")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 4096)
    os.close(fd)
    kids = []
    for k in range(3):
        pid = os.fork()
        if pid == 0:
            # each child: its own description, same bytes, different content
            fd = os.open(p, os.O_RDWR)
            for i in range(1000):
                os.pwrite(fd, bytes([65 + k]) * 512, (i % 8) * 512)
                os.lseek(fd, (i % 8) * 512, os.SEEK_SET)
                os.read(fd, 512)
            os.close(fd)
            os._exit(0)
        kids.append(pid)
    bad = 0
    for pid in kids:
        _, st = os.waitpid(pid, 0)
        bad += st != 0
    print("children failed:", bad)
""")


def test_concurrent_writers_same_file_no_false_divergence(data, sdir, tmp_path):
    """Three processes, three descriptions, overlapping writes to one file.
    Without the per-inode lock the primary and shadow halves interleave in
    different orders and the copies diverge."""
    script = tmp_path / "conc.py"
    script.write_text(CONCURRENT)
    res = shadow_run(data, sdir, [PY, script, data], extra=KEEP)
    err = res.stderr.decode(errors="replace")
    assert res.returncode == 0, err[-4000:]
    assert res.stdout == b"children failed: 0\n", err[-4000:]
    assert reports(sdir) == []
    assert (sdir / mangle(data / "shared")).read_bytes() == (data / "shared").read_bytes()


def test_unwritable_shadow_dir_refuses_mode(data, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    bad = blocker / "shadow"
    cmd = chell_cmd("shadow", [data], ["true"],
                    ["--shadow-dir", str(bad), "--set", "on_error=abort"])
    env = dict(os.environ)
    env.pop("CHELL_SHADOW_DIR", None)
    res = run(cmd, env=env)
    err = res.stderr.decode(errors="replace")
    assert res.returncode == 2, err
    assert f"cannot create shadow.dir {bad}" in err
