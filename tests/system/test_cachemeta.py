"""Crash consistency of the cache-mode metadata (docs/CACHE_METADATA.md).

chell_cachemeta_crash runs mixed metadata operations (Cnode create/remove/
attributes, chunk map/unmap, valid and dirty marks, check-out, check-in,
cancel) on a simulated region and recovers the image a power failure at
every persist point would leave, in four crash modes. After recovery the
maps, allocators, counts and dirty bits must agree (meta_check), the
logical state must be the one after the last acknowledged operation or -
for the operation in flight only - after it, and one more operation must
work. A deliberately broken library (one range per transaction modified
without an undo record) must be caught, and its reproducer line must
reproduce.

Scale with CHELL_CACHEMETA_OPS (default 3000: over 4000 crash points).
"""
import os
import re
import shlex

from conftest import PROGS, run

CRASH = PROGS / "chell_cachemeta_crash"
OPS = int(os.environ.get("CHELL_CACHEMETA_OPS", "3000"))


def crash(*args):
    r = run([CRASH, *args], timeout=120)
    out = r.stdout.decode()
    assert r.returncode in (0, 1), f"chell_cachemeta_crash failed to run: {r.stderr.decode()}\n{out}"
    return r.returncode, out


def tally(out):
    points = int(re.search(r"crash points tested: (\d+)", out).group(1))
    m = re.search(r"^total: (\d+) crash images, (\d+) with violations", out, re.M)
    return points, int(m.group(1)), int(m.group(2))


def test_every_persist_point_recovers_consistently():
    rc, out = crash("--ops", str(OPS), "--seed", "1")
    points, images, viol = tally(out)
    assert rc == 0 and viol == 0, out
    assert images == 4 * points
    if OPS >= 3000:
        assert points >= 4000, out
    # The workload really exercises the refusals and the in-flight case.
    assert int(re.search(r"\((\d+) refused as predicted\)", out).group(1)) > 0
    assert int(re.search(r"(\d+) recovered the in-flight operation", out).group(1)) > 0


def test_flush_points_and_another_seed():
    rc, out = crash("--ops", "800", "--seed", "7", "--flush-points")
    points, images, viol = tally(out)
    assert rc == 0 and viol == 0 and points > 3000, out


def test_colliding_keys_long_wrapping_clusters():
    # Every key shares one home slot near the end of its table: clusters as
    # long as the population, wrapping around, deletions from their middle.
    rc, out = crash("--ops", "1500", "--seed", "3", "--collide")
    points, images, viol = tally(out)
    assert rc == 0 and viol == 0 and points > 2000, out
    m = re.search(r"longest hash cluster: I2C (\d+), C2F (\d+) slots", out)
    assert int(m.group(1)) >= 10 and int(m.group(2)) >= 20, out


def test_missing_undo_is_caught_and_reproduced():
    rc, out = crash("--ops", "300", "--seed", "2", "--break", "missing-undo", "--show", "1")
    points, images, viol = tally(out)
    assert rc == 1 and viol > 0, out
    assert "VIOLATION at persist point" in out
    line = re.search(r"reproduce: (chell_cachemeta_crash .*)$", out, re.M).group(1)
    argv = shlex.split(line)
    rc2, out2 = crash(*argv[1:])
    p2, i2, v2 = tally(out2)
    assert rc2 == 1 and p2 == 1 and v2 == 1, out2
