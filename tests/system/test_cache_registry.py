"""Finding the cache manager without --pool (issue 13, item 4).

Every chelld joins a per-user registry of running managers
(src/chelld/registry.h); `chell cache ls` lists it, and a command given no
pool (cache.pool unset) uses the only running manager, refuses to guess
between several, and starts one at the default pool when none runs.
`chell cache start --pool DIR` creates a missing pool directory.

Each test gets its own registry (XDG_RUNTIME_DIR) and a clean environment
without CHELL_* variables, so cache.pool is really unset.
"""
import json
import os
import signal
import time
from pathlib import Path

import pytest

from conftest import CHELL, run

DEFAULT_POOL = Path("/dev/shm/chell-cache")


@pytest.fixture
def reg(tmp_path, workdir):
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHELL_")}
    env["XDG_RUNTIME_DIR"] = str(xdg)
    back = workdir / "back"
    back.mkdir()
    started = []

    class R:
        pass

    r = R()
    r.env, r.back, r.workdir, r.xdg = env, back, workdir, xdg

    def chell(*args, **kw):
        return run([CHELL, *args], env=env, **kw)

    def start(name):
        pool = workdir / name
        res = chell("cache", "start", "--pool", pool, "--size", "8M", "--backing", back)
        assert res.returncode == 0, res.stderr.decode()
        started.append(pool)
        return pool

    r.chell, r.start = chell, start
    # The default pool must not be served by a leftover of another test:
    # "nothing serves the default" is what these cases are about.
    assert chell("cache", "status", "--pool", DEFAULT_POOL).returncode == 1, \
        f"a chelld serves {DEFAULT_POOL}: stop it ('chell cache stop --pool {DEFAULT_POOL}')"
    yield r
    for pool in started:
        chell("cache", "stop", "--pool", pool)


def ls(r, *extra):
    res = r.chell("cache", "ls", "--json", *extra)
    return res.returncode, json.loads(res.stdout)


def test_ls_lists_running_managers_and_drops_dead_ones(reg):
    rc, doc = ls(reg)
    assert rc == 1 and doc["managers"] == []
    assert doc["registry"] == str(reg.xdg / "chell" / "managers")
    assert (reg.xdg / "chell" / "managers").stat().st_mode & 0o777 == 0o700
    a, b = reg.start("poolA"), reg.start("poolB")
    rc, doc = ls(reg)
    assert rc == 0
    assert [m["pool"] for m in doc["managers"]] == [str(a), str(b)]
    pid_b = int((b / "chelld.pid").read_text().split()[0])
    assert {m["pid"] for m in doc["managers"]} >= {pid_b}
    # killed: its entry stays behind, but the pool's lock went with it
    os.kill(pid_b, signal.SIGKILL)
    for _ in range(200):
        if reg.chell("cache", "status", "--pool", b).returncode == 1:
            break
        time.sleep(0.02)
    rc, doc = ls(reg, "--all")
    assert [(m["pool"], m["live"]) for m in doc["managers"]] == [(str(a), True), (str(b), False)]
    rc, doc = ls(reg)  # the stale entry was removed by the previous ls
    assert rc == 0 and [m["pool"] for m in doc["managers"]] == [str(a)]
    assert not (reg.xdg / "chell" / "managers" / str(pid_b)).exists()
    text = reg.chell("cache", "ls").stdout.decode()
    assert str(a) in text and "live" in text
    # a stopped manager leaves the registry itself
    assert reg.chell("cache", "stop", "--pool", a).returncode == 0
    assert ls(reg)[0] == 1 and not any((reg.xdg / "chell" / "managers").iterdir())


def test_run_uses_the_only_running_manager(reg):
    pool = reg.start("only")
    f = reg.back / "f"
    f.write_bytes(b"through the cache\n")
    before = json.loads(reg.chell("cache", "status", "--pool", pool, "--json").stdout)
    res = reg.chell("run", "--mode", "cache", "--path", reg.back, "--", "cat", f)
    assert res.returncode == 0, res.stderr.decode()
    assert res.stdout == b"through the cache\n"
    assert b"started chelld" not in res.stderr
    after = json.loads(reg.chell("cache", "status", "--pool", pool, "--json").stdout)
    assert after["opens"] > before["opens"]  # the program's open went to this manager
    assert reg.chell("cache", "status", "--pool", DEFAULT_POOL).returncode == 1
    # the other subcommands find it too
    st = json.loads(reg.chell("cache", "status", "--json").stdout)
    assert st["running"] and st["pool"] == str(pool)
    assert reg.chell("cache", "stop").returncode == 0
    assert reg.chell("cache", "status", "--pool", pool).returncode == 1


def test_several_managers_are_named_not_guessed(reg):
    a, b = reg.start("poolA"), reg.start("poolB")
    res = reg.chell("run", "--mode", "cache", "--path", reg.back, "--", "true")
    assert res.returncode == 2
    err = res.stderr.decode()
    assert "cache.pool is not set" in err and str(a) in err and str(b) in err
    res = reg.chell("cache", "stat")
    assert res.returncode == 2 and str(a) in res.stderr.decode()
    # naming one is always enough, and a set cache.pool is never second-guessed
    res = reg.chell("run", "--mode", "cache", "--set", f"cache.pool={b}", "--path", reg.back,
                    "--", "true")
    assert res.returncode == 0, res.stderr.decode()
    env = dict(reg.env, CHELL_CACHE_POOL=str(a))
    res = run([CHELL, "cache", "status", "--json"], env=env)
    assert json.loads(res.stdout)["pool"] == str(a)


def test_start_creates_a_missing_pool_directory(reg):
    pool = reg.workdir / "new" / "deeper" / "pool"
    assert not pool.parent.exists()
    reg.start("new/deeper/pool")
    assert (pool / "chelld.pid").exists()
    assert [m["pool"] for m in ls(reg)[1]["managers"]] == [str(pool)]
    # a path that cannot be a directory is refused by name
    blocker = reg.workdir / "file"
    blocker.write_text("x")
    res = reg.chell("cache", "start", "--pool", blocker / "pool", "--size", "8M",
                    "--backing", reg.back)
    assert res.returncode == 2
    assert f"cannot create the pool directory {blocker / 'pool'}" in res.stderr.decode()


def test_a_foreign_registry_directory_is_refused(reg):
    managers = reg.xdg / "chell" / "managers"
    managers.mkdir(parents=True)
    os.chown(managers, 65534, 65534)  # nobody's
    try:
        res = reg.chell("cache", "ls")
        assert res.returncode == 1
        assert "not a directory of this user" in res.stderr.decode()
    finally:
        os.chown(managers, os.getuid(), os.getgid())
