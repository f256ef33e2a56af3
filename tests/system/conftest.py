"""Shared fixtures for the system tests: locate the build, run programs under Chell.

The build directory is $CHELL_BUILD_DIR or <repo>/build. Tests run real,
unmodified programs twice - plainly and under `chell run` - and compare.
"""
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("CHELL_BUILD_DIR", REPO / "build")).resolve()
CHELL = BUILD / "bin" / "chell"
LIBCHELL = BUILD / "lib" / "libchell.so"
PROGS = BUILD / "bin"  # test programs from tests/progs land here too

MODES = ["posix", "trace", "shadow"]

# Every differential semantics program: tests/progs/sem_*.c (CMake builds each
# one too), so a new transcript is one new file and runs under every mode.
SEM_PROGS = sorted(p.stem for p in (REPO / "tests" / "progs").glob("sem_*.c"))


def chell_cmd(mode, paths, argv, extra=()):
    """argv prefixed with `chell run --mode MODE --path P...`."""
    cmd = [str(CHELL), "run", "--mode", mode]
    for p in paths:
        cmd += ["--path", str(p)]
    cmd += list(extra)
    return cmd + ["--"] + [str(a) for a in argv]


def run(argv, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("timeout", 300)
    return subprocess.run([str(a) for a in argv], **kw)


@pytest.fixture
def workdir():
    """A fresh directory on tmpfs (the fast tier) for the test's files."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="chell-test-", dir=base) as d:
        yield Path(d)


@pytest.fixture
def shadow_env(tmp_path):
    """Environment that puts shadow copies and reports in a fresh directory on
    the same kind of file system as the work directory (tmpfs), so results
    that depend on the file system (holes, fallocate) compare like for like."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    d = tempfile.mkdtemp(prefix="chell-shadow-", dir=base)
    env = dict(os.environ)
    env["CHELL_SHADOW_DIR"] = d
    yield env
    shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------ cache mode

# Where cache mode's backing directories (the slow storage) are made: /tmp,
# or a GlusterFS mount (scripts/test.sh runs the cache suites again with
# CHELL_TEST_BACKING_ROOT set to scripts/gluster.sh's mount point).
BACKING_ROOT = os.environ.get("CHELL_TEST_BACKING_ROOT", "/tmp")
CACHE_POOL_SIZE = "8M"  # 4 chunk slots: smaller than the test files, so evictions happen


def describe(res):
    return (f"exit status {res.returncode}\n--- stdout ---\n"
            + res.stdout.decode(errors="replace")[-3000:]
            + "\n--- stderr ---\n" + res.stderr.decode(errors="replace")[-3000:])


class Manager:
    """A chelld serving `pool` in front of `backing`."""

    def __init__(self, pool, backing, size=CACHE_POOL_SIZE, start_args=()):
        self.pool, self.backing, self.size = Path(pool), Path(backing), size
        self.start_args = list(start_args)  # more `chell cache start` options

    def start(self):
        res = run([CHELL, "cache", "start", "--pool", self.pool, "--size", self.size,
                   "--backing", self.backing, *self.start_args], timeout=60)
        assert res.returncode == 0, describe(res)

    def stop(self):
        res = run([CHELL, "cache", "stop", "--pool", self.pool], timeout=120)
        assert res.returncode == 0, describe(res)

    def client(self, *ops):
        """tests/progs/chelld_client on the manager's socket."""
        res = run([PROGS / "chelld_client", self.pool / "chelld.sock", "hello", *ops], timeout=120)
        assert res.returncode == 0, describe(res)
        return res.stdout.decode()

    def flush(self):
        """Write back every file. ENOENT is chelld's answer when some cached
        file was deleted meanwhile (sqlite's journal): the others are still
        written, which the callers check by content."""
        out = self.client("flush:all")
        assert "flush status=OK" in out or "flush status=ENOENT" in out, out

    def cmd(self, argv, extra=()):
        return [str(CHELL), "run", "--mode", "cache", "--set", f"cache.pool={self.pool}",
                "--set", f"cache.backing={self.backing}", *extra, "--"] + [str(a) for a in argv]


class fresh_manager:
    """A chelld on a new pool and backing directory, stopped and removed on exit.

    One per test (starting one takes a fraction of a second), so a test
    never depends on what an earlier one left in the small pool. start_args:
    more `chell cache start` options (a cache mode, its settings)."""

    def __init__(self, start_args=(), size=CACHE_POOL_SIZE):
        self.start_args, self.size = start_args, size

    def __enter__(self):
        self.pool = tempfile.mkdtemp(prefix="chell-cache-pool-", dir="/dev/shm")
        self.backing = tempfile.mkdtemp(prefix="chell-cache-back-", dir=BACKING_ROOT)
        self.m = Manager(self.pool, self.backing, self.size, self.start_args)
        try:
            self.m.start()
        except BaseException:  # nothing may stay behind when it cannot start
            shutil.rmtree(self.pool, ignore_errors=True)
            shutil.rmtree(self.backing, ignore_errors=True)
            raise
        return self.m

    def __exit__(self, *exc):
        try:
            self.m.stop()
        finally:
            shutil.rmtree(self.pool, ignore_errors=True)
            shutil.rmtree(self.backing, ignore_errors=True)


@pytest.fixture
def mgr():
    with fresh_manager() as m:
        yield m


def pytest_report_header(config):
    return f"chell build: {BUILD}"


@pytest.fixture(scope="session", autouse=True)
def _require_build():
    if not CHELL.exists() or not LIBCHELL.exists():
        pytest.exit(f"chell is not built in {BUILD}; run scripts/test.sh", returncode=2)


@pytest.fixture(scope="session", autouse=True)
def _tier_state():
    """The tier model keeps a per-boot DRAM calibration and bandwidth budget
    (chell-tier-dram.BOOT, chell-tier-budget.MODEL.BOOT) in tier.state,
    /dev/shm by default, where they outlive the run. Every test's programs
    inherit CHELL_TIER_STATE pointing at a directory of the session's own,
    removed at its end (a test that sets tier.state itself still wins)."""
    if "CHELL_TIER_STATE" in os.environ:
        yield
        return
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="chell-test-tier-state-", dir=base) as d:
        os.environ["CHELL_TIER_STATE"] = d
        try:
            yield
        finally:
            del os.environ["CHELL_TIER_STATE"]


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long differential runs (scaled by env)")
