"""The mapped data path (direct mode) against the kernel: RWF_NOWAIT never
blocks or hangs, and file times follow the mount's atime option.

- A reader that retries preadv2(RWF_NOWAIT) until the kernel says something
  other than success (EAGAIN where data is not ready, EOPNOTSUPP where the
  file system refuses the flag: tmpfs) while writer threads keep the file
  busy. Plainly it ends at once on tmpfs; under direct mode it used to spin
  forever (the flag was accepted and ignored). A hang fails the test at the
  timeout.
- sem_rwf and sem_times on a disk file system under direct mode (--path).
- tests/progs/sem_times under tmpfs mounts with strictatime, noatime,
  relatime and lazytime (the test mounts them: root only): the transcript
  under direct mode must be the kernel's for every option, which Chell
  never reads itself (the kernel applies it to the touches Chell asks for).
- A writer that does not own the file changes mtime and ctime as plainly.
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import PROGS, chell_cmd, run
from test_direct import PLAIN_ENV, describe

HANG_TIMEOUT = 60

NOWAIT_PY = r"""
import errno, os, sys, threading
path = sys.argv[1]
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"x" * (1 << 20))
stop = False
def writer(k):
    w = os.open(path, os.O_WRONLY)
    i = 0
    while not stop:
        os.pwrite(w, bytes([65 + k]) * 4096, (i * 4096 + k * 65536) % (1 << 20))
        i += 1
    os.close(w)
threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
for t in threads:
    t.start()
buf = bytearray(4096)
n = 0
try:
    while True:  # a program that waits for the kernel's answer
        try:
            os.preadv(fd, [buf], (n * 4096) % (1 << 20), os.RWF_NOWAIT)
        except OSError as e:
            print("preadv2(RWF_NOWAIT):", errno.errorcode[e.errno])
            break
        n += 1
finally:
    stop = True
    for t in threads:
        t.join()
"""


def test_nowait_read_never_hangs(workdir, tmp_path):
    script = tmp_path / "nowait.py"
    script.write_text(NOWAIT_PY)
    (workdir / "plain").mkdir()
    (workdir / "data").mkdir()
    plain = run([sys.executable, script, workdir / "plain" / "f"], env=PLAIN_ENV,
                timeout=HANG_TIMEOUT)
    assert plain.returncode == 0, describe(plain)
    try:
        got = run(chell_cmd("direct", [workdir / "data"],
                            [sys.executable, script, workdir / "data" / "f"]),
                  env=PLAIN_ENV, timeout=HANG_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"preadv2(RWF_NOWAIT) never returned anything but success under direct "
                    f"mode within {HANG_TIMEOUT} s; the kernel says: {plain.stdout.decode()}",
                    pytrace=False)
    assert got.returncode == 0, describe(got)
    assert got.stdout == plain.stdout, describe(got)


@pytest.fixture
def mount_tmpfs():
    """mount_tmpfs(options) -> a fresh tmpfs mounted with them; unmounted
    at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = []

    def mount(options):
        d = Path(tempfile.mkdtemp(prefix="chell-mnt-", dir="/tmp"))
        res = run(["mount", "-t", "tmpfs", "-o", f"size=64m,{options}", "tmpfs", d])
        if res.returncode != 0:
            d.rmdir()
            pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
        mounted.append(d)
        return d

    yield mount
    for d in mounted:
        run(["umount", "-l", d])
        d.rmdir()


@pytest.mark.parametrize("options", ["strictatime", "noatime", "relatime", "relatime,lazytime",
                                     "strictatime,lazytime"])
def test_times_follow_mount_options(mount_tmpfs, options):
    mnt = mount_tmpfs(options)
    (mnt / "plain").mkdir()
    (mnt / "data").mkdir()
    sem = PROGS / "sem_times"
    plain = run([sem, mnt / "plain"], env=PLAIN_ENV)
    assert plain.returncode == 0, describe(plain)
    got = run(chell_cmd("direct", [mnt / "data"], [sem, mnt / "data"]), env=PLAIN_ENV)
    assert got.returncode == 0, describe(got)
    assert got.stdout == plain.stdout, (
        f"sem_times on a tmpfs mounted {options}: under direct\n{got.stdout.decode()}\n"
        f"plainly\n{plain.stdout.decode()}")


@pytest.mark.parametrize("name", ["sem_rwf", "sem_times"])
def test_direct_on_a_disk_file_system(name, tmp_path):
    """Direct mode also serves files of any file system named with --path.
    On /tmp (a disk file system here) the kernel takes flags tmpfs refuses
    (RWF_NOWAIT on reads, RWF_DONTCACHE) and leaves atime alone on 0-byte
    reads: the transcripts must still be the kernel's."""
    base = Path(tempfile.mkdtemp(prefix="chell-disk-", dir="/tmp"))
    try:
        (base / "plain").mkdir()
        (base / "data").mkdir()
        plain = run([PROGS / name, base / "plain"], env=PLAIN_ENV)
        assert plain.returncode == 0, describe(plain)
        got = run(chell_cmd("direct", [base / "data"], [PROGS / name, base / "data"]),
                  env=PLAIN_ENV)
        assert got.returncode == 0, describe(got)
        assert got.stdout == plain.stdout, describe(got)
    finally:
        subprocess.run(["rm", "-rf", str(base)])


NON_OWNER_SH = r"""
f=$1
before=$(stat -c '%.9Y %.9Z' "$f")
printf abc | dd of="$f" bs=3 seek=3 conv=notrunc status=none
after=$(stat -c '%.9Y %.9Z' "$f")
set -- $before $after
[ "$3" != "$1" ] && echo "mtime changed" || echo "mtime same"
[ "$4" != "$2" ] && echo "ctime changed" || echo "ctime same"
"""


def test_mtime_after_a_write_by_a_non_owner(workdir):
    """A writer that does not own the file (mode 0666): its mapped writes
    still change mtime and ctime, as its kernel writes would."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run as another user")
    workdir.chmod(0o777)
    script = workdir / "w.sh"
    script.write_text(NON_OWNER_SH)
    script.chmod(0o755)
    out = {}
    for label in ("plain", "data"):
        d = workdir / label
        d.mkdir()
        d.chmod(0o777)
        f = d / "f"
        f.write_bytes(b"x" * 8192)
        f.chmod(0o666)
        os.utime(f, ns=(1000 * 10**9, 1000 * 10**9))
        argv = ["/bin/sh", script, f]
        if label == "data":
            argv = chell_cmd("direct", [d], argv)
        res = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + argv,
                  env=PLAIN_ENV)
        assert res.returncode == 0, describe(res)
        out[label] = res.stdout
    assert out["plain"] == b"mtime changed\nctime changed\n", out["plain"]
    assert out["data"] == out["plain"], out
