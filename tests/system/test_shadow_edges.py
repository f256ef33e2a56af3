"""Shadow mode on the edges (issue 9, items 10 and 12): it must never kill the
program it checks nor report a divergence that is not one, and it must clean
up after itself.

Each test runs a program plainly and under `chell run --mode shadow`, and
asserts the same output, a normal exit and no divergence report; the cleanup
tests look at the shadow directory afterwards. Programs call libc through
ctypes, so calls with bad pointers and raw fallocate modes reach Chell's
interposed functions exactly as a C program's would.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from conftest import chell_cmd, run

PY = sys.executable

PRELUDE = textwrap.dedent(r"""
    import ctypes, errno, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    for fn in ("stat", "lstat", "fstat"):
        getattr(libc, fn).argtypes = [ctypes.c_void_p if fn != "fstat" else ctypes.c_int,
                                      ctypes.c_void_p]
    libc.open.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    libc.creat.argtypes = [ctypes.c_void_p, ctypes.c_int]
    libc.pread.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
    PROT_NONE, PROT_READ, PROT_WRITE = 0, 1, 2
    MAP_SHARED, MAP_PRIVATE, MAP_ANON = 1, 2, 0x20

    def res(r):
        return f"{r} {errno.errorcode.get(ctypes.get_errno(), '-')}" if r < 0 else str(r)

    def call(fn, *a):
        ctypes.set_errno(0)
        return res(fn(*a))
""")


def env_without_shadow_dir():
    env = dict(os.environ)
    env.pop("CHELL_SHADOW_DIR", None)
    return env


def plain_and_shadow(data, sdir, script, args=(), extra=(), setup=None):
    """Run script plainly and under shadow (data reset by setup() before
    each run); return (plain result, shadow result)."""
    out = []
    for mode in ("plain", "shadow"):
        if setup:
            setup()
        argv = [PY, script, *[str(a) for a in args]]
        if mode == "shadow":
            argv = chell_cmd("shadow", [data], argv, ["--shadow-dir", str(sdir), *extra])
        out.append(run(argv, env=env_without_shadow_dir()))
    return out


def assert_same_and_clean(plain, shadow, sdir):
    err = shadow.stderr.decode(errors="replace")
    assert plain.returncode == 0, plain.stderr.decode(errors="replace")[-3000:]
    assert shadow.returncode == 0, err[-4000:]
    assert "DIVERGENCE" not in err, err[-4000:]
    assert shadow.stdout == plain.stdout, (plain.stdout.decode(), shadow.stdout.decode())
    assert not list(Path(sdir).glob("divergence.*")), err[-4000:]


def copies(sdir):
    """Shadow copies left in the shadow directory (reports are not copies)."""
    return sorted(p.name for p in Path(sdir).iterdir() if not p.name.startswith("divergence."))


def fresh_dir(d):
    def setup():
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(mode=0o777)
        os.chmod(d, 0o777)
    return setup


@pytest.fixture
def data(workdir):
    d = workdir / "data"
    d.mkdir()
    return d


@pytest.fixture
def sdir(workdir):
    """Shadow dir on tmpfs, like the files."""
    return workdir / "shadow"


@pytest.fixture
def ext4(tmp_path):
    """A loop-mounted ext4 file system (root only), removed afterwards."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4"):
        pytest.skip("needs root and mkfs.ext4 for a loop-mounted ext4")
    img = tmp_path / "ext4.img"
    mnt = tmp_path / "ext4"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(128 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True, capture_output=True)
    r = subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot loop-mount ext4: {r.stderr.decode(errors='replace')}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
        img.unlink()


# ------------------------------------------------------------ bad pointers

BADPTR = PRELUDE + textwrap.dedent(r"""
    d = sys.argv[1]
    bad = libc.mmap(None, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANON, -1, 0)
    minus1 = ctypes.c_void_p(-1 & (2**64 - 1)).value
    f = os.path.join(d, "f").encode()
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"abc")
    buf = ctypes.create_string_buffer(512)
    for p in (bad, minus1):
        if sys.argv[2] == "paths":
            print("stat path", call(libc.stat, p, buf))
            print("lstat path", call(libc.lstat, p, buf))
            print("open path", call(libc.open, p, os.O_RDONLY, 0))
            print("creat path", call(libc.creat, p, 0o644))
        else:
            print("stat buf", call(libc.stat, f, p))
            print("lstat buf", call(libc.lstat, f, p))
            print("fstat buf", call(libc.fstat, fd, p))
    print("fstat good", call(libc.fstat, fd, buf))
    if sys.argv[2] != "paths":
        # buffers that end in an unwritable page: short reads, as plainly
        class IOV(ctypes.Structure):
            _fields_ = [("b", ctypes.c_void_p), ("l", ctypes.c_size_t)]
        for fn in ("read", "write"):
            getattr(libc, fn).argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
            getattr(libc, fn + "v").argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        # pages: read-write, none, read-write, read-only
        m = libc.mmap(None, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0)
        libc.mprotect(m + 4096, 4096, PROT_NONE)
        libc.mprotect(m + 3 * 4096, 4096, PROT_READ)
        os.pwrite(fd, b"z" * 20000, 0)
        for edge in (m + 4096, m + 3 * 4096):
            os.lseek(fd, 0, os.SEEK_SET)
            print("read", call(libc.read, fd, edge - 100, 300), os.lseek(fd, 0, os.SEEK_CUR))
            iov = (IOV * 2)((edge - 200, 100), (edge, 100))
            print("readv", call(libc.readv, fd, iov, 2), os.lseek(fd, 0, os.SEEK_CUR))
            iov = (IOV * 2)((edge - 4096, 100), (edge - 50, 100))
            print("readv", call(libc.readv, fd, iov, 2), os.lseek(fd, 0, os.SEEK_CUR))
            print("pread", call(libc.pread, fd, edge - 10, 300, 5), os.lseek(fd, 0, os.SEEK_CUR))
            print("write", call(libc.write, fd, m + 4096 - 100, 300), os.lseek(fd, 0, os.SEEK_CUR))
            iov = (IOV * 2)((m, 100), (m + 4096, 100))
            print("writev", call(libc.writev, fd, iov, 2), os.fstat(fd).st_size)
    os.close(fd)
    print("done")
""")


def test_bad_stat_buffers_give_efault(data, sdir, tmp_path):
    """stat/lstat/fstat with bad buffers: EFAULT, as plainly, and no false
    divergence (the reference call used the shadow's own buffer and so
    succeeded; now it is the kernel with the application's buffer). Reads
    into buffers that end in an unwritable page are short, as plainly (the
    shadow's own buffer read more)."""
    script = tmp_path / "badptr.py"
    script.write_text(BADPTR)
    plain, shadow = plain_and_shadow(data, sdir, script, [data, "bufs"], setup=fresh_dir(data))
    assert b"fstat buf -1 EFAULT" in plain.stdout
    assert_same_and_clean(plain, shadow, sdir)


def test_bad_path_pointers_give_efault(data, sdir, tmp_path):
    """stat/lstat/open/creat with a path in a PROT_NONE page or at -1. The
    crash was in the Nib (router_route reading the path before any handler
    runs), fixed there (issue 9 item 1); the shadow handler itself reaches
    the path only through the kernel."""
    script = tmp_path / "badptr.py"
    script.write_text(BADPTR)
    plain, shadow = plain_and_shadow(data, sdir, script, [data, "paths"], setup=fresh_dir(data))
    assert b"open path -1 EFAULT" in plain.stdout
    assert_same_and_clean(plain, shadow, sdir)


# ------------------------------------------------------ owners and groups

CREDS = textwrap.dedent(r"""
    import os, sys
    os.umask(0o002)
    d = sys.argv[1]
    sg = os.path.join(d, "sg")
    os.mkdir(sg); os.chown(sg, 0, 1234); os.chmod(sg, 0o2777)
    f = os.path.join(sg, "f")                 # group 1234 from the directory
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o664)
    os.write(fd, b"made by root ")
    st = os.fstat(fd); print("sgid file", st.st_gid, oct(st.st_mode))
    # kept open: the child below opens the same inodes again
    g = os.path.join(d, "g")
    with open(g, "wb") as gf:
        gf.write(b"root's")
    os.chown(g, 4321, 4321)
    gfd = os.open(g, os.O_RDWR)
    os.mkdir(os.path.join(d, "private"), 0o700)
    pid = os.fork()
    if pid == 0:
        os.setgroups([1234]); os.setegid(1234); os.seteuid(4321)
        fd2 = os.open(f, os.O_RDWR)           # allowed through the group only
        os.lseek(fd2, 0, os.SEEK_END); os.write(fd2, b"and by 4321")
        os.lseek(fd2, 0, os.SEEK_SET); print("child reads", os.read(fd2, 100))
        os.close(fd2)
        gfd2 = os.open(g, os.O_RDWR)          # allowed as the new owner
        os.write(gfd2, b"ROOT"); os.close(gfd2)
        h = os.path.join(sg, "h")              # created as 4321 in the sgid dir
        hfd = os.open(h, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o2770)
        os.write(hfd, b"child's file"); st = os.fstat(hfd)
        print("child file", st.st_uid, st.st_gid, oct(st.st_mode & 0o7777))
        os.close(hfd)
        hfd = os.open(h, os.O_RDONLY); print(os.read(hfd, 100)); os.close(hfd)
        try:
            os.open(os.path.join(d, "private", "x"), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            print("private", e.errno)
        sys.stdout.flush()
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    print("child status", st)
    os.lseek(fd, 0, os.SEEK_SET); print("parent reads", os.read(fd, 100))
    os.lseek(gfd, 0, os.SEEK_SET); print("parent reads", os.read(gfd, 100))
    os.close(fd); os.close(gfd)
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="changes user and group: needs root")
def test_setgid_directory_and_changed_credentials(data, workdir, tmp_path):
    """Files created in a set-group-ID directory, opened through their
    group by a process that changed user and group, and files created by
    that process: the copies carry the file's owner, group and mode, and
    shadow.dir (created by Chell) lets every process of the tree keep its
    copies there. Nothing goes unchecked, nothing diverges."""
    script = tmp_path / "creds.py"
    script.write_text(CREDS)
    os.chmod(workdir, 0o755)                 # the child (uid 4321) must get through
    sdir = workdir / "fresh-shadow"          # created by Chell
    plain, shadow = plain_and_shadow(data, sdir, script, [data], setup=fresh_dir(data))
    assert b"child status 0" in plain.stdout and b"and by 4321" in plain.stdout
    assert_same_and_clean(plain, shadow, sdir)
    assert b"not checked" not in shadow.stderr, shadow.stderr.decode(errors="replace")


# ------------------------------------------ file-system-dependent results

FSWORK = PRELUDE + textwrap.dedent(r"""
    import zlib
    d = sys.argv[1]
    KEEP, PUNCH, COLLAPSE, ZERO, INSERT = 1, 2, 8, 0x10, 0x20
    modes = [("punch", PUNCH | KEEP), ("zero", ZERO), ("zero-keep", ZERO | KEEP),
             ("collapse", COLLAPSE), ("insert", INSERT), ("alloc", 0), ("alloc-keep", KEEP)]
    p = os.path.join(d, "f")
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, bytes(range(256)) * 1024)             # 256 KiB of data
    for name, m in modes:
        for off, ln in ((100, 4096), (4096, 8192), (65536, 65536), (5000, 300),
                        (300000, 4096)):
            r = call(libc.fallocate, fd, m, off, ln)
            st = os.fstat(fd)
            os.pwrite(fd, b"W" * 700, (off * 7) % st.st_size)
            data = os.pread(fd, 300000, 0)
            print(name, off, ln, r, st.st_size, zlib.crc32(data))
            try:
                h = os.lseek(fd, 0, os.SEEK_HOLE)
                dd = os.lseek(fd, min(h, st.st_size - 1), os.SEEK_DATA)
            except OSError as e:
                pass
    big = os.open(os.path.join(d, "big"), os.O_RDWR | os.O_CREAT, 0o644)
    for off in (1 << 40, 1 << 44, 1 << 46):                # past ext4's maximum size
        try:
            print("pwrite far", os.pwrite(big, b"x", off))
        except OSError as e:
            print("pwrite far", e.errno)
        try:
            os.ftruncate(big, off); print("ftruncate far ok")
        except OSError as e:
            print("ftruncate far", e.errno)
        try:
            os.truncate(os.path.join(d, "big"), off + 1); print("truncate far ok")
        except OSError as e:
            print("truncate far", e.errno)
        print("size", os.fstat(big).st_size)
    os.ftruncate(big, 0); os.close(big)
    # O_DIRECT: alignment rules differ (tmpfs takes any, ext4 wants blocks)
    import mmap
    od = os.open(os.path.join(d, "od"), os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
    buf = mmap.mmap(-1, 8192)              # page-aligned
    buf[:] = b"d" * 8192
    for off, n in ((0, 100), (4096, 4096), (1, 4096), (8192, 8192), (0, 512)):
        for name, fn in (("write", os.pwritev), ("read", os.preadv)):
            try:
                print("O_DIRECT", name, off, n, fn(od, [memoryview(buf)[:n]], off))
            except OSError as e:
                print("O_DIRECT", name, off, n, e.errno)
        print("O_DIRECT size", os.fstat(od).st_size)
    os.close(od)
    os.lseek(fd, 0, os.SEEK_SET)
    print("stat", os.stat(p).st_size, os.fstat(fd).st_size)
    os.close(fd)
    print("done")
""")


def fswork(data, sdir, tmp_path):
    script = tmp_path / "fswork.py"
    script.write_text(FSWORK)
    plain, shadow = plain_and_shadow(data, sdir, script, [data], setup=fresh_dir(data))
    assert_same_and_clean(plain, shadow, sdir)
    assert copies(sdir) == []


def test_fallocate_modes_shadow_on_tmpfs(data, sdir, tmp_path):
    """Files and copies both on tmpfs: every fallocate mode compares."""
    fswork(data, sdir, tmp_path)


def test_fallocate_modes_file_on_ext4_shadow_on_tmpfs(ext4, sdir, tmp_path):
    """The file on ext4, its copy on tmpfs: collapse/insert range exist on
    one side only, ext4 has a maximum file size: results that differ for
    that reason are not divergences, and the copy keeps following the file."""
    data = ext4 / "data"
    fswork(data, sdir, tmp_path)


def test_files_and_shadow_dir_both_on_ext4(ext4, tmp_path):
    """Same file system: O_DIRECT reads into the shadow's own buffer must be
    aligned like the application's (they were not: EINVAL on the copy)."""
    fswork(ext4 / "data", ext4 / "shadow", tmp_path)


def test_shadow_dir_on_ext4_files_on_tmpfs(data, ext4, tmp_path):
    """The reverse: files on tmpfs, shadow.dir on ext4 - writes, every
    fallocate mode, SEEK_HOLE/SEEK_DATA, stat and fstat, huge offsets."""
    fswork(data, ext4 / "shadow", tmp_path)


FSDIVERGE = PRELUDE + textwrap.dedent(r"""
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"x" * 65536)
    print("collapse", call(libc.fallocate, fd, 8, 4096, 4096), flush=True)  # not on tmpfs
    sys.stdin.readline()              # the test tampers with the copy now
    os.pread(fd, 100, 0)
    print("not reached", flush=True)
""")


def test_report_says_which_difference_came_from_the_file_system(ext4, sdir, tmp_path):
    """A real divergence (the copy changed behind Chell's back) after a
    difference that came from the file systems: the report names both file
    systems and marks the accepted operation in the history."""
    data = ext4 / "data"
    fresh_dir(data)()
    script = tmp_path / "fsdiv.py"
    script.write_text(FSDIVERGE)
    target = data / "f"
    p = subprocess.Popen(chell_cmd("shadow", [data], [PY, script, target],
                                   ["--shadow-dir", str(sdir)]),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env_without_shadow_dir())
    assert p.stdout.readline() == b"collapse 0\n"
    copy = sdir / str(target).replace("%", "%25").replace("/", "%2F").replace("#", "%23")
    with open(copy, "r+b") as f:
        f.write(b"Y")
    out, err = p.communicate(b"go\n", timeout=60)
    err = err.decode(errors="replace")
    assert p.returncode in (-6, 128 + 6), err
    assert "the file is on ext2/3/4, its shadow on tmpfs" in err
    assert re.search(r"fallocate fd \d+ mode=8 off=4096 len=4096 -> test=0 "
                     r"shadow=-EOPNOTSUPP .*differs by file system", err), err


# ------------------------------------------------------------------ mmap

MMAPW = PRELUDE + textwrap.dedent(r"""
    d = sys.argv[1]
    p = os.path.join(d, "f")
    N = 1 << 20
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, N)
    # 1. mapped read-only, made writable by mprotect, stored into
    m = libc.mmap(None, N, PROT_READ, MAP_SHARED, fd, 0)
    assert libc.mprotect(m, N, PROT_READ | PROT_WRITE) == 0
    ctypes.memmove(m + 10, b"mprotect", 8)
    print("1", os.pread(fd, 20, 5))
    # 2. a store into a hole makes data: SEEK_DATA finds it
    ctypes.memmove(m + 500000, b"hole", 4)
    print("2", os.lseek(fd, 0, os.SEEK_DATA) // 4096)
    # 3. the mapping outlives the descriptor; the file is reopened
    os.close(fd)
    ctypes.memmove(m + 30, b"after close", 11)
    fd = os.open(p, os.O_RDWR)
    ctypes.memmove(m + 50, b"after reopen", 12)
    print("3", os.pread(fd, 80, 0))
    os.pwrite(fd, b"written", 100)
    print("3b", bytes(ctypes.string_at(m + 100, 7)))
    libc.munmap(m, N)
    print("4", os.pread(fd, 120, 0), os.fstat(fd).st_size)
    os.close(fd)
    fd = os.open(p, os.O_RDONLY)
    print("5", os.read(fd, 120))
    os.close(fd)
""")


def test_application_mmap_writes_then_reads(data, sdir, tmp_path):
    """Stores through the application's own shared mapping - made writable
    by mprotect, into a hole, after the descriptor is closed and the file
    reopened - then reads and SEEK_DATA through descriptors."""
    script = tmp_path / "mmapw.py"
    script.write_text(MMAPW)
    plain, shadow = plain_and_shadow(data, sdir, script, [data], setup=fresh_dir(data))
    assert b"after reopen" in plain.stdout
    assert_same_and_clean(plain, shadow, sdir)


# --------------------------------------------------------------- cleanup

CLEANUP = textwrap.dedent(r"""
    import os, sys
    d = sys.argv[1]
    P = lambda n: os.path.join(d, n)
    # unlink of a closed file
    with open(P("a"), "wb") as f: f.write(b"a" * 100000)
    os.unlink(P("a"))
    # unlink while open, then the last close
    fd = os.open(P("b"), os.O_RDWR | os.O_CREAT, 0o644); os.write(fd, b"b" * 100000)
    os.unlink(P("b")); os.write(fd, b"more"); os.close(fd)
    # rename over an open file, then over a closed one
    fd = os.open(P("c"), os.O_RDWR | os.O_CREAT, 0o644); os.write(fd, b"c" * 1000)
    with open(P("d"), "wb") as f: f.write(b"d" * 1000)
    os.rename(P("d"), P("c")); os.write(fd, b"x"); os.close(fd)
    with open(P("e"), "wb") as f: f.write(b"e")
    os.rename(P("e"), P("c"))
    # unlinkat through a directory descriptor
    with open(P("g"), "wb") as f: f.write(b"g")
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY); os.unlink("g", dir_fd=dfd); os.close(dfd)
    # a process tree: children keep files open and exit without closing
    for k in range(3):
        if os.fork() == 0:
            fd = os.open(P(f"kid{k}"), os.O_RDWR | os.O_CREAT, 0o644)
            os.write(fd, b"k" * 5000)
            if os.fork() == 0:
                os.write(fd, b"grandchild")
                os._exit(0)
            os._exit(0)
    fd = os.open(P("parent"), os.O_RDWR | os.O_CREAT, 0o644); os.write(fd, b"p")
    for _ in range(3):
        os.wait()
    print(sorted(os.listdir(d)))
    sys.stdout.flush()
    os._exit(0)          # exits with "parent" still open
""")


def test_copies_removed_on_unlink_rename_and_exit(data, sdir, tmp_path):
    """No shadow copy outlives the last open of its file: unlink (closed or
    open), rename over it, unlinkat, a process tree that exits with files
    open. The shadow directory is empty afterwards."""
    script = tmp_path / "cleanup.py"
    script.write_text(CLEANUP)
    plain, shadow = plain_and_shadow(data, sdir, script, [data], setup=fresh_dir(data))
    assert_same_and_clean(plain, shadow, sdir)
    assert copies(sdir) == []
    # shadow.keep=1 keeps them, for inspection
    fresh_dir(data)()
    r = run(chell_cmd("shadow", [data], [PY, script, data],
                      ["--shadow-dir", str(sdir), "--set", "shadow.keep=1"]),
            env=env_without_shadow_dir())
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert "%2Fparent" in " ".join(copies(sdir))


def test_copy_of_open_unlinked_file_goes_at_last_close(data, sdir, tmp_path):
    """While the unlinked file is open its copy is still needed; at the last
    close (here in another process than the one that unlinked) it goes."""
    script = tmp_path / "late.py"
    script.write_text(textwrap.dedent(r"""
        import os, sys
        p = os.path.join(sys.argv[1], "f")
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644); os.write(fd, b"x" * 4096)
        os.unlink(p)
        print(len(os.listdir(sys.argv[2])), flush=True)     # the copy is still there
        if os.fork() == 0:
            os.write(fd, b"child"); os.close(fd); os._exit(0)
        os.close(fd); os.wait()
        print(len(os.listdir(sys.argv[2])), flush=True)
    """))
    fresh_dir(data)()
    sdir.mkdir()
    r = run(chell_cmd("shadow", [data], [PY, script, data, sdir], ["--shadow-dir", str(sdir)]),
            env=env_without_shadow_dir())
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert r.stdout == b"1\n0\n"


# ---------------------------------------------------------- descriptors

FDLIMIT = textwrap.dedent(r"""
    import os, resource, sys
    soft = int(sys.argv[2])
    hard = soft if sys.argv[3] == "same" else resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    fds = []
    try:
        for i in range(100000):
            fds.append(os.open(os.path.join(sys.argv[1], f"f{i}"), os.O_RDWR | os.O_CREAT, 0o644))
            os.write(fds[-1], b"x")
    except OSError as e:
        print("opened", len(fds), "then", e.errno)
    for fd in fds:
        os.close(fd)
""")


def fdlimit(data, sdir, tmp_path, limit=64, hard="keep"):
    """Open files up to a soft RLIMIT_NOFILE of `limit`; the hard limit is
    the same ("same": no room above it without CAP_SYS_RESOURCE) or kept."""
    script = tmp_path / "fdlimit.py"
    script.write_text(FDLIMIT)
    return plain_and_shadow(data, sdir, script, [data, limit, hard], setup=fresh_dir(data))


def test_open_up_to_the_limit_no_false_error(data, sdir, tmp_path):
    """At the descriptor limit the copy cannot be opened: the file goes
    unchecked (logged), the program gets EMFILE from its own open, never a
    divergence or EIO."""
    for limit, hard in [(n, h) for n in (50, 63, 64) for h in ("same", "keep")]:
        # the last free slot falls to the file or to its copy
        plain, shadow = fdlimit(data, sdir, tmp_path, limit, hard)
        err = shadow.stderr.decode(errors="replace")
        assert shadow.returncode == 0 and "DIVERGENCE" not in err, (limit, err[-3000:])
        assert shadow.stdout.startswith(b"opened ") and shadow.stdout.endswith(b" then 24\n")
    assert copies(sdir) == []


def test_open_up_to_the_limit_as_many_as_plainly(data, sdir, tmp_path):
    """Shadow keeps one descriptor per open file description (registered
    with chell_internal_fd); the Nib keeps internal descriptors above the
    application's soft RLIMIT_NOFILE (issue 9 item 8) when the hard limit
    leaves room."""
    plain, shadow = fdlimit(data, sdir, tmp_path, 64, "keep")
    assert shadow.stdout == plain.stdout, (plain.stdout, shadow.stdout)
