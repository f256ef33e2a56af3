"""Smoke test of the cache-mode benchmark driver (scripts/bench_cache.py).

Runs the two short sections (hit latency and Berkeley DB, ~15 s) of the
--quick profile and checks the shape of what it reports and that it leaves
nothing behind (loop device, mount, cgroups, pools). No timing is checked:
a loaded CI machine must not turn a slow run into a failure. Needs root and
loop devices (the driver builds its slow device from a loop-mounted image);
skipped otherwise.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUILD, REPO

SCRIPT = REPO / "scripts" / "bench_cache.py"


def _skip_reason():
    if os.geteuid() != 0:
        return "needs root (loop device, mount)"
    for tool in ("losetup", "mkfs.ext4", "fio"):
        if not shutil.which(tool):
            return f"{tool} not installed"
    if not Path("/dev/loop-control").exists():
        return "no loop devices"
    for prog in ("chell", "chell_bench_lat", "chell_bench_bdbsync"):
        if not (BUILD / "bin" / prog).exists():
            return f"{prog} not built"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


def _leftovers():
    """Anything of the driver's still around: attached images, mounts,
    memory cgroups, pools on /dev/shm."""
    out = []
    r = subprocess.run(["losetup", "-a"], capture_output=True, text=True)
    out += [l for l in r.stdout.splitlines() if "chell-bench-cache-img-" in l]
    out += [l for l in Path("/proc/mounts").read_text().splitlines() if "chell-bench-cache-img-" in l]
    memcg = Path("/sys/fs/cgroup/memory")
    if memcg.is_dir():
        out += [str(p) for p in memcg.glob("chell-bench-cache-*")]
    out += [str(p) for p in Path("/dev/shm").glob("chell-bench-cache-*")]
    return out


def test_quick_lat_and_bdb(tmp_path):
    before = _leftovers()
    r = subprocess.run([sys.executable, str(SCRIPT), "--build", str(BUILD), "--quick", "--only", "lat,bdb",
                        "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "out" / "cache.json").read_text())
    assert res["config"]["cache_arm_mode"] == "cache", res["config"].get("fallback_reason")
    assert res["problems"] == []
    assert res["device"]["loop_direct_io"] is True

    lat = res["lat"]["summary"]
    for op in ("read", "write"):
        for arm in ("pagecache", "cache", "direct", "memcpy"):
            assert lat[op][f"{arm}_ns"] > 0, (op, arm)
    # The cache arm was served by chelld: the file was filled into the pool.
    assert res["lat"]["cache_counters"]["fills"] > 0

    bdb = res["bdb"]["summary"]
    assert [b["threads"] for b in bdb] == [1, 2, 4]
    for b in bdb:
        assert b["pagecache_ops_s"] > 0 and b["cache_ops_s"] > 0
    for run in res["bdb"]["raw"]:
        assert run["data"]["provider"]["fdatasync"].startswith("libchell") == (run["arm"] == "cache")

    names = [t["target"] for t in res["targets"]]
    assert len(names) == len(set(names)) and all(t["pass"] in (True, False, None) for t in res["targets"])
    # the sections that ran give verdicts; the others' targets are there, undecided
    ran = [t for t in res["targets"] if t["target"].startswith(("4 KB read hit", "4 KB write hit", "Berkeley DB"))]
    assert len(ran) == 5 and all(t["pass"] in (True, False) for t in ran), ran
    assert all(t["pass"] is None for t in res["targets"] if t not in ran), res["targets"]
    md = (tmp_path / "out" / "cache.md").read_text()
    assert "4 KB hit latency" in md and "Berkeley DB" in md

    # The report is a pure function of the JSON.
    r2 = subprocess.run([sys.executable, str(SCRIPT), "--from-json", str(tmp_path / "out" / "cache.json"),
                         "--out", str(tmp_path / "again")], capture_output=True, text=True, timeout=120)
    assert r2.returncode == 0, r2.stderr[-2000:]
    assert (tmp_path / "again" / "cache.md").read_text() == md

    assert _leftovers() == before
