"""A reader racing a writer that extends a file never sees a byte that was
not written (tests/progs/eof_race.c), plainly and under every mode.

The kernel publishes a file's new size only once the bytes below it are in
place; a user-space stack must do the same, in threads of one process and
across processes of a tree. Cache mode once published the size (fallocate
on the backing file) before storing the bytes into the pool, and readers
saw zeros below the end of file.

A race is not deterministic: each case runs a few rounds, and the program
reports the first wrong byte it sees. It never passes by luck on the bare
kernel only: the plain runs are the control.
"""
import pytest

from conftest import chell_cmd, run
from test_semantics import BASE_ENV, prog
from test_cache import describe, fresh_manager

ROUNDS = 3
MBYTES = "16"
VARIANTS = ["--threads", "--procs"]


def check(res, what):
    assert res.returncode == 0, f"{what}: {describe(res)}"
    assert b"none unwritten" in res.stdout, f"{what}: {describe(res)}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_plain(variant, workdir, tmp_path):
    """The control: the bare kernel, on tmpfs and on the disk's file system."""
    for d in (workdir, tmp_path):
        for _ in range(ROUNDS):
            check(run([prog("eof_race"), variant, d, MBYTES], env=dict(BASE_ENV)),
                  f"plain in {d}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", ["posix", "trace", "shadow", "direct"])
def test_under_chell(mode, variant, workdir, tmp_path):
    env = dict(BASE_ENV)
    extra = []
    if mode == "trace":
        extra = ["--trace-file", str(tmp_path / "trace.%p")]
    if mode == "shadow":
        (tmp_path / "shadow").mkdir()
        env["CHELL_SHADOW_DIR"] = str(tmp_path / "shadow")
    for _ in range(ROUNDS):
        res = run(chell_cmd(mode, [workdir], [prog("eof_race"), variant, workdir, MBYTES], extra),
                  env=env)
        check(res, f"--mode {mode}")
        assert b"DIVERGENCE" not in res.stderr, describe(res)


@pytest.mark.parametrize("variant", VARIANTS)
def test_under_cache(variant):
    """Cache mode: the bytes go to the pool, the size to the backing file
    and to the tree's shared inode table; both only after the bytes."""
    with fresh_manager() as m:
        for i in range(ROUNDS):
            d = m.backing / f"r{i}"
            d.mkdir()
            check(run(m.cmd([prog("eof_race"), variant, d, MBYTES]), env=dict(BASE_ENV)),
                  "--mode cache")


@pytest.mark.parametrize("variant", VARIANTS)
def test_under_shadow_checking_cache(variant, tmp_path):
    """The same under shadow mode with cache under test: shadow also
    compares every read with its copy."""
    with fresh_manager() as m:
        (tmp_path / "shadow").mkdir()
        env = dict(BASE_ENV, CHELL_SHADOW_DIR=str(tmp_path / "shadow"))
        d = m.backing / "s"
        d.mkdir()
        argv = m.cmd([prog("eof_race"), variant, d, MBYTES])
        assert argv[2:4] == ["--mode", "cache"]
        argv[3:4] = ["shadow", "--shadow-under-test", "cache", "--path", str(d)]
        res = run(argv, env=env)
        check(res, "--mode shadow --shadow-under-test cache")
        assert b"DIVERGENCE" not in res.stderr, describe(res)
