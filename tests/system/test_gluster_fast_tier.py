"""The fast tier never runs on the distributed store (issue 13).

Cache mode's pool and the files direct mode maps are the node-local fast
tier (tmpfs, DAX). On a GlusterFS mount they would be mappings of the
distributed file system's page cache: chelld refuses a pool there, and
`chell run` refuses a direct-mode prefix there, each with a message that
names the file system and what to do instead. Skipped only where GlusterFS
cannot run here (the volume fixture of test_cache_twonode.py).
"""
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import CHELL, describe, run
from test_cache_twonode import volume  # noqa: F401 (a fixture)


@pytest.fixture
def gdir(volume):  # noqa: F811
    d = Path(tempfile.mkdtemp(prefix="chell-fasttier-", dir=volume))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_cache_pool_on_the_distributed_store_is_refused(gdir):
    pool = gdir / "pool"
    res = run([CHELL, "cache", "start", "--pool", pool, "--size", "8M", "--backing", gdir], timeout=60)
    err = res.stderr.decode()
    assert res.returncode == 2, describe(res)
    assert f"pool directory '{pool}' is on fuse.glusterfs, a distributed file system" in err, err
    assert "put the pool on tmpfs" in err
    assert not (pool / "chelld.sock").exists() and not (pool / "meta.pool").exists()


def test_chell_run_does_not_start_a_manager_on_the_distributed_store(gdir):
    pool = gdir / "pool"
    res = run([CHELL, "run", "--mode", "cache", "--set", f"cache.pool={pool}", "--path", gdir,
               "--", "true"], timeout=60)
    assert res.returncode != 0, describe(res)
    assert "is on fuse.glusterfs, a distributed file system" in res.stderr.decode(), describe(res)
    assert not (pool / "meta.pool").exists()


@pytest.mark.parametrize("sub", ["", "not/made/yet"])
def test_direct_mode_on_the_distributed_store_is_refused(gdir, sub):
    prefix = gdir / sub if sub else gdir
    res = run([CHELL, "run", "--mode", "direct", "--path", prefix, "--", "true"], timeout=60)
    err = res.stderr.decode()
    assert res.returncode == 2, describe(res)
    assert f"setting paths: {prefix} is on fuse.glusterfs, a distributed file system, but mode " \
           "direct maps the files themselves" in err, err
    assert f"--mode cache with the pool on tmpfs and --set cache.backing={prefix}" in err


def test_cache_mode_in_front_of_the_store_is_accepted(gdir):
    """The positive control: pool on tmpfs, backing on the volume."""
    pool = Path(tempfile.mkdtemp(prefix="chell-fasttier-pool-", dir="/dev/shm"))
    try:
        res = run([CHELL, "cache", "start", "--pool", pool, "--size", "8M", "--backing", gdir],
                  timeout=60)
        assert res.returncode == 0, describe(res)
        res = run([CHELL, "run", "--mode", "cache", "--set", f"cache.pool={pool}", "--path", gdir,
                   "--", "sh", "-c", f"echo hi > {gdir}/f && cat {gdir}/f"], timeout=60)
        assert res.returncode == 0 and res.stdout == b"hi\n", describe(res)
    finally:
        run([CHELL, "cache", "stop", "--pool", pool], timeout=60)
        shutil.rmtree(pool, ignore_errors=True)
