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


def pytest_report_header(config):
    return f"chell build: {BUILD}"


@pytest.fixture(scope="session", autouse=True)
def _require_build():
    if not CHELL.exists() or not LIBCHELL.exists():
        pytest.exit(f"chell is not built in {BUILD}; run scripts/test.sh", returncode=2)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long differential runs (scaled by env)")
