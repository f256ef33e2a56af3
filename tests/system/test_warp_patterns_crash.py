"""Crash consistency of WARP's patterns file (docs/WARP.md, "Decisions").

chell_warp_patterns_crash runs pattern stores (batches of 1-3 files in one
transaction; 8 entries, 12 files, so
entries are replaced too; now and then a 512-node file) on a simulated
region and recovers the image a power failure at every persist point would
leave, in four crash modes. After recovery the patterns must check, the
heap must be the one after the last acknowledged store or - for the store
in flight only - after it, and one more store must work. A deliberately
broken library (entries written without their undo record) must be caught,
and its reproducer line must reproduce.
"""
import re
import shlex

from conftest import PROGS, run

CRASH = PROGS / "chell_warp_patterns_crash"


def crash(*args):
    r = run([CRASH, *args], timeout=120)
    out = r.stdout.decode()
    assert r.returncode in (0, 1), f"chell_warp_patterns_crash failed to run: {r.stderr.decode()}\n{out}"
    return r.returncode, out


def tally(out):
    m = re.search(r"crash points tested: (\d+); (\d+) images recovered the store in flight", out)
    t = re.search(r"^total: (\d+) crash images, (\d+) with violations", out, re.M)
    return int(m.group(1)), int(m.group(2)), int(t.group(1)), int(t.group(2))


def test_every_persist_point_recovers_consistently():
    rc, out = crash("--ops", "400", "--seed", "1")
    points, in_flight, images, viol = tally(out)
    assert rc == 0 and viol == 0, out
    assert points > 1000 and images == 4 * points, out
    assert in_flight > 0, out  # crashes late in a store keep it


def test_flush_points_and_another_seed():
    rc, out = crash("--ops", "200", "--seed", "7", "--flush-points")
    points, _, images, viol = tally(out)
    assert rc == 0 and viol == 0 and points > 2000, out


def test_missing_undo_is_caught_and_reproduced():
    rc, out = crash("--ops", "60", "--seed", "2", "--break", "missing-undo", "--show", "1")
    points, _, images, viol = tally(out)
    assert rc == 1 and viol > 0, out
    line = re.search(r"reproduce: (chell_warp_patterns_crash .*)$", out, re.M).group(1)
    rc2, out2 = crash(*shlex.split(line)[1:])
    p2, _, i2, v2 = tally(out2)
    assert rc2 == 1 and p2 == 1 and v2 == 1, out2
