"""Cache mode's own calls on a GlusterFS backing store (issue 13).

Where GlusterFS departs from POSIX, the application under cache mode still
gets the POSIX answer (the cache serves it), but Chell's own calls to the
backing file must not rely on what GlusterFS does differently. Skipped
only where GlusterFS cannot run here (the volume fixture of
test_cache_twonode.py).
"""
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import Manager, describe, run
from test_cache_twonode import volume  # noqa: F401 (a fixture)

# An extending write at an offset past the end, on an O_APPEND descriptor
# with RWF_NOAPPEND (write at the offset, not the end): POSIX (ext4, tmpfs)
# leaves a hole and ends the file after the write. The size must be the
# same through the cache and, for a program outside Chell, on the backing
# file; after a flush so must the bytes.
PROG = r'''
import os, sys
p = sys.argv[1]
fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
os.write(fd, b"a" * 100)
n = os.pwritev(fd, [b"xyz"], 200, 0x20)  # RWF_NOAPPEND (Linux 6.9)
print(n, os.fstat(fd).st_size, flush=True)
os.close(fd)
'''


@pytest.fixture
def mgr_on_gluster(volume, tmp_path):  # noqa: F811
    back = Path(tempfile.mkdtemp(prefix="chell-cache-gl-", dir=volume))
    pool = Path(tempfile.mkdtemp(prefix="chell-cache-gl-pool-", dir="/dev/shm"))
    m = Manager(pool, back)
    m.start()
    try:
        yield m
    finally:
        m.stop()
        shutil.rmtree(pool, ignore_errors=True)
        shutil.rmtree(back, ignore_errors=True)


def test_noappend_write_past_the_end_of_an_append_descriptor(mgr_on_gluster, tmp_path):
    m = mgr_on_gluster
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    f = m.backing / "f"
    res = run(m.cmd(["python3", prog, f]), timeout=120)
    assert res.returncode == 0, describe(res)
    assert res.stdout.decode().split() == ["3", "203"]
    assert f.stat().st_size == 203, "the backing file's size is not the size the program saw"
    m.flush()
    assert f.read_bytes() == b"a" * 100 + bytes(100) + b"xyz"
