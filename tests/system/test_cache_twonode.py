"""Two cache nodes in front of one GlusterFS volume (issue 13, docs/CACHE.md
"Two nodes").

Two chelld (two pools under /dev/shm, standing for two machines) cache the
same backing directory on the volume that scripts/gluster.sh serves. With
`cache.shared` naming that directory, the contract is close-to-open, as
NFS gives: the last close of a file on one node writes its dirty data back
before close returns, and the next open on the other node (its manager's
first registration of the file) revalidates the file against the backing
file's size, mtime and ctime and drops the chunks it had cached of it.
Without the setting cache mode is a write-back cache: the other node reads
what the backing file holds, not the bytes still dirty in the first node's
pool, until that node writes them back.

Each case runs twice: both nodes on scripts/gluster.sh's mount, and each
node on a mount of its own (two FUSE clients, as on two machines; mounted
with NODE_MOUNT_OPTIONS and unmounted at the end).

Skipped only where GlusterFS cannot run here (exit 3 of gluster.sh up).
The volume is left up unless this module's fixture brought it up.
"""
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, Manager, describe, run

GLUSTER = REPO / "scripts" / "gluster.sh"
CHUNK = 2 << 20  # the cache's chunk (CACHE_CHUNK_BYTES)
POOL_SIZE = "64M"  # 32 slots: nothing in this test is evicted or cleaned early

# One program for both nodes: put SRC into PATH at OFF (created if missing,
# never truncated), or get PATH's bytes into DEST (outside the backing
# directory, so not cached). Each opens, does one transfer and closes.
IO_PROG = r'''
import os, sys
op, path, other = sys.argv[1], sys.argv[2], sys.argv[3]
if op == "put":
    data = open(other, "rb").read()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    n = 0
    while n < len(data):
        n += os.pwrite(fd, data[n:], int(sys.argv[4]) + n)
    os.close(fd)
else:
    fd = os.open(path, os.O_RDONLY)
    out = bytearray()
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        out += b
    os.close(fd)
    open(other, "wb").write(out)
'''


@pytest.fixture(scope="module")
def volume():
    was_up = run([GLUSTER, "status"], timeout=60).returncode == 0
    res = run([GLUSTER, "up"], timeout=600)
    if res.returncode == 3:
        pytest.skip(res.stderr.decode(errors="replace").strip().splitlines()[-1])
    assert res.returncode == 0, describe(res)
    yield Path(res.stdout.decode().strip().splitlines()[-1])
    if not was_up:
        run([GLUSTER, "down"], timeout=600)


class Node:
    """One machine: a chelld on its own pool in front of the shared directory."""

    def __init__(self, name, backing, tmp, shared):
        self.name, self.tmp = name, tmp
        self.pool = Path(tempfile.mkdtemp(prefix=f"chell-twonode-{name}-", dir="/dev/shm"))
        self.m = Manager(self.pool, backing, size=POOL_SIZE)
        self.extra = ["--set", f"cache.shared={backing}"] if shared else []
        self.prog = tmp / "io.py"
        self.prog.write_text(IO_PROG)
        self.n = 0

    def _run(self, *args):
        res = run(self.m.cmd([sys.executable, self.prog, *args], extra=self.extra), timeout=300)
        assert res.returncode == 0, f"node {self.name}: " + describe(res)

    def put(self, name, data, off=0):
        """Write data at off into the file `name` of the shared directory."""
        self.n += 1
        src = self.tmp / f"{self.name}-src-{self.n}"
        src.write_bytes(data)
        self._run("put", self.m.backing / name, src, off)

    def get(self, name):
        """The bytes of the file `name` of the shared directory."""
        self.n += 1
        dst = self.tmp / f"{self.name}-dst-{self.n}"
        self._run("get", self.m.backing / name, dst)
        return dst.read_bytes()


# How each node mounts the volume when the nodes have mounts of their own.
# GlusterFS's client keeps attributes (the kernel's FUSE attribute cache and
# the md-cache translator in the glusterfs process, 1 s each) and pages (the
# kernel's page cache, kept across opens) of a file another mount changed:
# plain programs on two default mounts read stale bytes after the other
# mount's close. These options make the mount itself close-to-open
# (docs/CACHE.md, Two nodes); VOL is the volume's name.
NODE_MOUNT_OPTIONS = ("attribute-timeout=0,entry-timeout=0,direct-io-mode=enable,"
                      "xlator-option={vol}-md-cache.md-cache-timeout=0")


@pytest.fixture(scope="module")
def node_mounts(volume):
    """The volume mounted twice more, once per node: each its own FUSE
    client and kernel caches, as on two machines. Unmounted at the end."""
    src = next(line.split()[0] for line in open("/proc/mounts")
               if line.split()[1] == str(volume))
    made = []
    try:
        for name in ("a", "b"):
            mnt = Path(tempfile.mkdtemp(prefix=f"chell-twonode-{name}-", dir="/mnt"))
            made.append(mnt)
            opts = NODE_MOUNT_OPTIONS.format(vol=src.rsplit("/", 1)[-1])
            res = run(["mount", "-t", "glusterfs", "-o", opts, src, mnt], timeout=120)
            assert res.returncode == 0, describe(res)
        yield made
    finally:
        for mnt in made:
            if run(["findmnt", mnt]).returncode == 0:
                run(["umount", mnt], timeout=120)
            mnt.rmdir()


@pytest.fixture
def nodes(volume, tmp_path, request):
    """Two nodes on a fresh directory of the volume. request.param: is
    cache.shared set; do the nodes use mounts of their own (node_mounts)
    rather than the one of scripts/gluster.sh."""
    shared, two_mounts = request.param
    backing = Path(tempfile.mkdtemp(prefix="chell-twonode-", dir=volume))
    backs = [backing, backing]
    if two_mounts:
        backs = [m / backing.name for m in request.getfixturevalue("node_mounts")]
    made = []
    try:
        for name, back in zip(("A", "B"), backs):
            n = Node(name, back, tmp_path, shared)
            n.m.start()
            made.append(n)
        yield backs[0], made[0], made[1]
    finally:
        for n in made:
            try:
                n.m.stop()
            finally:
                shutil.rmtree(n.pool, ignore_errors=True)
        shutil.rmtree(backing, ignore_errors=True)


def pattern(seed, size):
    """Deterministic bytes, different for each seed (no zero runs)."""
    block = bytes(((i * 131 + seed * 17) % 251) + 1 for i in range(4093))
    return (block * (size // len(block) + 1))[:size]


# (size, offset and length of B's overwrite, of A's overwrite): the
# overwrites cross the 2 MB chunk boundary where the file has one.
CASES = [
    (4096, (1000, 100), (0, 4096)),
    (CHUNK + 4096 + 123, (CHUNK - 3000, 10000), (CHUNK + 100, 4000)),
    (5 * CHUNK // 2 + 7, (CHUNK // 2, 2 * CHUNK), (0, CHUNK + 1)),
]


SHARED = pytest.mark.parametrize("nodes", [(True, False), (True, True)], indirect=True,
                                 ids=["one_mount", "two_mounts"])


@SHARED
def test_close_to_open(nodes):
    backing, a, b = nodes
    files = [backing / f"f{i}" for i in range(len(CASES))]
    want = {}
    # A writes every file and closes; B reads each back identically.
    for i, (f, (size, _, _)) in enumerate(zip(files, CASES)):
        want[f] = bytearray(pattern(i, size))
        a.put(f.name, bytes(want[f]))
    for f in files:
        assert b.get(f.name) == want[f], f"B does not read what A wrote and closed in {f.name}"
    # A reads them too, so its pool holds (clean) chunks of every file.
    for f in files:
        assert a.get(f.name) == want[f]
    # B overwrites part of each and closes; A's open revalidates, drops its
    # stale chunks, and reads B's bytes. Then the other way round.
    for rnd, (writer, reader, which) in enumerate(((b, a, 1), (a, b, 2))):
        for i, (f, case) in enumerate(zip(files, CASES)):
            off, n = case[which]
            patch = pattern(100 + 10 * rnd + i, n)
            writer.put(f.name, patch, off)
            want[f][off:off + n] = patch
        for f in files:
            got = reader.get(f.name)
            assert len(got) == len(want[f]), f"{f.name}: size {len(got)} != {len(want[f])}"
            assert got == want[f], (f"node {reader.name} reads stale bytes of {f.name} "
                                    f"after node {writer.name}'s close")
        # and the backing file (the kernel, outside Chell) has them too
        for f in files:
            assert f.read_bytes() == want[f]


@pytest.mark.parametrize("nodes", [(False, False), (False, True)], indirect=True,
                         ids=["one_mount", "two_mounts"])
def test_without_shared_is_write_back(nodes):
    """The documented behaviour without cache.shared: A's closed file stays
    dirty in A's pool; B reads what the backing file holds (the space A's
    extending writes reserved there, zeros), never A's bytes, until A's
    manager writes them back; B's next open then revalidates and reads them."""
    backing, a, b = nodes
    f = backing / "f"
    data = pattern(7, CHUNK + 5000)
    a.put(f.name, data)
    early = b.get(f.name)
    assert early != data, "A's dirty data reached the backing file without a write-back"
    assert early == f.read_bytes(), "B does not read what the backing file holds"
    assert set(early) <= {0}, "B reads bytes that neither A wrote nor the backing file held"
    a.m.flush()  # A's write-back (also done by its cleaner, eviction, fsync or stop)
    assert f.read_bytes() == data
    assert b.get(f.name) == data, "B's open did not revalidate after A's write-back"


# Reads PATH, prints a digest, then again for each line on stdin: one
# process that opens and closes the file several times.
REREAD_PROG = r'''
import hashlib, sys
for _ in iter(sys.stdin.readline, ""):
    with open(sys.argv[1], "rb") as f:
        print(hashlib.sha256(f.read()).hexdigest(), flush=True)
'''


@SHARED
def test_reopen_in_one_process(nodes, tmp_path):
    """A process on A that read the file and closed it reads B's later
    bytes at its next open: closing releases the process's registration, so
    that open is its manager's first again and revalidates."""
    backing, a, b = nodes
    f = backing / "f"
    data = bytearray(pattern(3, CHUNK + 4096))
    a.put(f.name, bytes(data))
    prog = tmp_path / "reread.py"
    prog.write_text(REREAD_PROG)
    p = subprocess.Popen(a.m.cmd([sys.executable, prog, f], extra=a.extra),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def read_once():
            p.stdin.write(b"\n")
            p.stdin.flush()
            return p.stdout.readline().decode().strip()
        assert read_once() == hashlib.sha256(data).hexdigest()
        patch = pattern(4, 9000)
        b.put(f.name, patch, CHUNK - 4500)
        data[CHUNK - 4500:CHUNK + 4500] = patch
        assert read_once() == hashlib.sha256(data).hexdigest(), \
            "a process on A reads stale bytes at its second open"
    finally:
        p.stdin.close()
        assert p.wait(timeout=60) == 0, p.stderr.read().decode(errors="replace")


# Writes stdin's first line (hex) at offset 0 of PATH, closes, says so,
# and keeps running until stdin closes.
WRITE_AND_WAIT_PROG = r'''
import os, sys
data = bytes.fromhex(sys.stdin.readline().strip())
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
os.pwrite(fd, data, 0)
os.close(fd)
print("closed", flush=True)
sys.stdin.read()
'''


@SHARED
def test_visible_when_close_returns(nodes, tmp_path):
    """The write-back is done when close returns, not at the process's exit."""
    backing, a, b = nodes
    f = backing / "f"
    data = pattern(5, CHUNK + 100)
    prog = tmp_path / "write_wait.py"
    prog.write_text(WRITE_AND_WAIT_PROG)
    p = subprocess.Popen(a.m.cmd([sys.executable, prog, f], extra=a.extra),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(data.hex().encode() + b"\n")
        p.stdin.flush()
        assert p.stdout.readline() == b"closed\n"
        assert b.get(f.name) == data, "B does not see A's bytes once A's close returned"
    finally:
        p.stdin.close()
        assert p.wait(timeout=60) == 0, p.stderr.read().decode(errors="replace")
