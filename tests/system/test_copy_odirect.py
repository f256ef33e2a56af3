"""copy_file_range and sendfile on O_DIRECT descriptors under cache mode.

Issue 9, item 6: a file under the cache's backing directory on ext4, opened
with O_DIRECT, takes a 40 KB write at 0x15000, an FALLOC_FL_INSERT_RANGE of
28 KB at 0xe000 and a 60 KB write at 0x18000; copy_file_range of 36 KB from
0x1c000 to 0x28000 then failed with EINVAL under cache mode (the emulation's
bounce buffer was not aligned, which O_DIRECT requires), where the kernel
copies. The script below runs that sequence and every other data-changing
fallocate mode (collapse, zero, punch, insert, plain allocation), aligned and
unaligned copies, sendfile, copies at the descriptor's offset and to another
file, buffered writes read back through O_DIRECT, and a cached descriptor
holding dirty data switched to O_DIRECT with F_SETFL, printing each result
and the file's contents. Under `chell run --mode cache` it must print what
it prints plainly. The backing directory and the plain twin live under /tmp,
which must support O_DIRECT (tmpfs before 6.6 does not): the test is skipped
where it does not.
"""
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import run
from test_cache import PLAIN_ENV, describe, fresh_manager

SCRIPT = r'''
import ctypes, fcntl, hashlib, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_COLLAPSE_RANGE = 1, 2, 8
FALLOC_FL_ZERO_RANGE, FALLOC_FL_INSERT_RANGE = 0x10, 0x20
d = sys.argv[1]

def buf(n, seed):
    m = mmap.mmap(-1, n)  # page aligned, as O_DIRECT wants
    m.write(bytes((seed + i * 7) % 251 for i in range(n)))
    return m

def say(what, f):
    try:
        r = f()
    except OSError as e:
        r = "-1 " + (os.strerror(e.errno) if e.errno else "?")
    print(what, "=", r, flush=True)

def fall(fd, mode, off, n):
    r = libc.fallocate(fd, mode, off, n)
    if r < 0:
        raise OSError(ctypes.get_errno(), "fallocate")
    return r

def dread(fd, n, off):
    m = buf(n, 0)
    r = os.preadv(fd, [m], off)
    return f"{r} bytes {hashlib.sha256(m[:r]).hexdigest()[:16]}"

def digest(path, flags=0):
    fd = os.open(path, os.O_RDONLY | flags)
    m = mmap.mmap(-1, 1 << 20)
    h, total = hashlib.sha256(), 0
    while True:
        n = os.preadv(fd, [m], total)
        if n <= 0:
            break
        h.update(m[:n])
        total += n
    os.close(fd)
    return f"{total} bytes {h.hexdigest()[:16]}"

f = os.path.join(d, "f")
fd = os.open(f, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
# the sequence of issue 9, item 6
say("pwrite 40K at 0x15000", lambda: os.pwrite(fd, buf(0xa000, 1), 0x15000))
say("insert 28K at 0xe000", lambda: fall(fd, FALLOC_FL_INSERT_RANGE, 0xe000, 0x7000))
say("pwrite 60K at 0x18000", lambda: os.pwrite(fd, buf(0xf000, 2), 0x18000))
say("copy_file_range 36K 0x1c000 -> 0x28000",
    lambda: os.copy_file_range(fd, fd, 0x9000, 0x1c000, 0x28000))
say("size", lambda: os.fstat(fd).st_size)
say("content", lambda: digest(f, os.O_DIRECT))
# every other data-changing fallocate mode on the O_DIRECT descriptor
say("collapse 8K at 0x4000", lambda: fall(fd, FALLOC_FL_COLLAPSE_RANGE, 0x4000, 0x2000))
say("zero 12K at 0x10000", lambda: fall(fd, FALLOC_FL_ZERO_RANGE, 0x10000, 0x3000))
say("zero keep-size past EOF", lambda: fall(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 0x40000, 0x3000))
say("punch 8K at 0x20000", lambda: fall(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0x20000, 0x2000))
say("insert unaligned", lambda: fall(fd, FALLOC_FL_INSERT_RANGE, 0x1001, 0x1000))
say("collapse past EOF", lambda: fall(fd, FALLOC_FL_COLLAPSE_RANGE, 0x100000, 0x1000))
say("allocate past EOF", lambda: fall(fd, 0, 0x30000, 0x4000))
say("size", lambda: os.fstat(fd).st_size)
say("content", lambda: digest(f, os.O_DIRECT))
# O_DIRECT copies: aligned ones copy, unaligned ones are the kernel's EINVAL
say("copy_file_range aligned", lambda: os.copy_file_range(fd, fd, 0x4000, 0x0, 0x38000))
say("copy_file_range unaligned", lambda: os.copy_file_range(fd, fd, 100, 0x3, 0x39000))
say("sendfile aligned", lambda: os.sendfile(fd, fd, 0x1000, 0x2000))
say("offset", lambda: os.lseek(fd, 0, os.SEEK_CUR))
say("copy_file_range at the offsets", lambda: os.copy_file_range(fd, fd, 0x1000, None, 0x3c000))
say("offset", lambda: os.lseek(fd, 0, os.SEEK_CUR))
g = os.path.join(d, "g")
gd = os.open(g, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
say("copy_file_range to another file", lambda: os.copy_file_range(fd, gd, 0x10000, 0x8000, 0x2000))
say("sendfile to another file", lambda: os.sendfile(gd, fd, 0x20000, 0x3000))
os.close(gd)
os.close(fd)
# buffered writes through the cache, then O_DIRECT reads see them
bd = os.open(g, os.O_RDWR)
say("buffered pwrite", lambda: os.pwrite(bd, b"x" * 5000, 0x1800))
os.close(bd)
# a cached descriptor switched to O_DIRECT (F_SETFL) with dirty data
k = os.path.join(d, "k")
kd = os.open(k, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
say("buffered pwrite 12K", lambda: os.pwrite(kd, bytes(buf(0x3000, 5)), 0))
say("F_SETFL O_DIRECT", lambda: fcntl.fcntl(kd, fcntl.F_SETFL, os.O_DIRECT))
say("O_DIRECT pread", lambda: dread(kd, 0x2000, 0x1000))
say("copy_file_range after F_SETFL", lambda: os.copy_file_range(kd, kd, 0x2000, 0, 0x4000))
say("punch after F_SETFL", lambda: fall(kd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0x1000, 0x1000))
os.close(kd)
say("content k", lambda: digest(k))
say("size", lambda: os.stat(f).st_size)
say("content f", lambda: digest(f, os.O_DIRECT))
say("content g direct", lambda: digest(g, os.O_DIRECT))
say("content g buffered", lambda: digest(g))
'''


def o_direct_supported(d):
    try:
        fd = os.open(os.path.join(d, ".odirect-probe"), os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    os.unlink(os.path.join(d, ".odirect-probe"))
    return True


def test_odirect_copies_and_fallocate_under_cache(tmp_path):
    script = tmp_path / "odirect_ops.py"
    script.write_text(SCRIPT)
    plain = Path(tempfile.mkdtemp(prefix="chell-odirect-plain-", dir="/tmp"))
    try:
        if not o_direct_supported(plain):
            pytest.skip("/tmp does not support O_DIRECT")
        ref = run([sys.executable, script, plain], env=dict(PLAIN_ENV), timeout=120)
        assert ref.returncode == 0, describe(ref)
        assert "copy_file_range 36K 0x1c000 -> 0x28000 = 36864" in ref.stdout.decode(), describe(ref)
        with fresh_manager() as m:
            d = Path(tempfile.mkdtemp(prefix="t-", dir=m.backing))
            got = run(m.cmd([sys.executable, script, d]), env=dict(PLAIN_ENV), timeout=120)
            assert got.returncode == ref.returncode, describe(got)
            assert got.stdout.decode() == ref.stdout.decode(), (
                "O_DIRECT under cache mode differs from the kernel:\n--- plain ---\n"
                + ref.stdout.decode() + "--- cache ---\n" + got.stdout.decode()
                + "\n" + describe(got))
    finally:
        shutil.rmtree(plain, ignore_errors=True)
