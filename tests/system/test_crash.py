"""Crash consistency of the persistence core (docs/CRASH_TESTING.md).

Two kinds of crash, one workload (tests/crash/workload.c, a transactional
object store with an allocator, a root table and checksummed objects):

- simulated power failures: chell_crashsim recovers and checks the image
  every persist point would leave, in four crash modes (pending lines lost,
  a random subset written, torn at 8 bytes, plus cache evictions);
- real process crashes: chell_crashproc runs on a region file on /dev/shm,
  is killed with SIGKILL at random moments, and its checker mode recovers
  the region and compares it with the acknowledged commits and a replay.

Each checker is also shown to fail: deliberately broken variants (a drain
dropped from the commit path, a range left out of the undo log) and a
corrupted byte must be reported as violations.

Scale with CHELL_CRASH_TX (simulated workload transactions, default 1200:
over 10,000 crash points) and CHELL_CRASH_KILLS (default 300).
"""
import os
import random
import re
import shlex
import signal
import subprocess
import time

import pytest

from conftest import PROGS, run

CRASHSIM = PROGS / "chell_crashsim"
CRASHPROC = PROGS / "chell_crashproc"
SIM_TX = int(os.environ.get("CHELL_CRASH_TX", "1200"))
KILLS = int(os.environ.get("CHELL_CRASH_KILLS", "300"))


def crashsim(*args):
    r = run([CRASHSIM, *args])
    out = r.stdout.decode()
    assert r.returncode in (0, 1), f"chell_crashsim failed to run: {r.stderr.decode()}\n{out}"
    return r.returncode, out


def tally(out):
    """(crash points tested, crash images, images with violations)."""
    points = int(re.search(r"^crash points tested: (\d+)", out, re.M).group(1))
    m = re.search(r"^total: (\d+) crash images, (\d+) with violations", out, re.M)
    return points, int(m.group(1)), int(m.group(2))


def test_no_violation_at_any_persist_point():
    rc, out = crashsim("--tx", str(SIM_TX), "--seed", "1")
    points, images, viol = tally(out)
    assert rc == 0 and viol == 0, out
    assert points >= SIM_TX * 5  # every drain of every transaction, not a sample
    assert images == 4 * points  # each in all four crash modes
    if SIM_TX >= 1200:
        assert points >= 10000, out


def test_no_violation_with_flush_points_and_other_seeds():
    # A crash between two flushes, too; other seeds change every choice.
    for seed in ("7", "12345"):
        rc, out = crashsim("--tx", "200", "--seed", seed, "--flush-points")
        points, images, viol = tally(out)
        assert rc == 0 and viol == 0 and points > 2000, out


def test_random_points_and_small_journals():
    # Few, short journals: every other transaction reuses the journal the one
    # before the last just ended.
    rc, out = crashsim("--tx", "400", "--random", "1500", "--seed", "3", "--journals", "2",
                       "--entries", "64", "--heap", "32768")
    points, images, viol = tally(out)
    assert rc == 0 and viol == 0 and points == 1501, out


def test_single_journal_reused_by_the_next_transaction():
    rc, out = crashsim("--tx", "400", "--seed", "3", "--journals", "1", "--entries", "64",
                       "--heap", "32768", "--show", "1")
    points, images, viol = tally(out)
    assert rc == 0 and viol == 0, out


@pytest.mark.parametrize("brk", ["missing-fence:1", "missing-fence:2", "missing-undo"])
def test_broken_variant_is_caught_and_reproducible(brk):
    rc, out = crashsim("--tx", "200", "--every", "2", "--break", brk, "--show", "3")
    points, images, viol = tally(out)
    assert rc == 1 and viol > 0, out
    repro = re.search(r"^  reproduce: (chell_crashsim .*)$", out, re.M)
    assert repro, out
    argv = shlex.split(repro.group(1))[1:]
    assert f"--break" in argv
    rc2, out2 = crashsim(*argv)
    assert rc2 == 1, out2
    assert tally(out2)[0] == 1 and tally(out2)[2] == 1, out2


def test_crashsim_usage():
    r = run([CRASHSIM, "--help"])
    assert r.returncode == 0 and b"--break" in r.stdout
    for bad in (["--mode", "sideways"], ["--break", "nothing"], ["--every", "0"], ["extra"]):
        r = run([CRASHSIM, *bad])
        assert r.returncode == 2, bad
        assert r.stderr


# ------------------------------------------------------------ real processes

def proc(*args, **kw):
    return run([CRASHPROC, *args], **kw)


def check(reg, ack):
    r = proc("check", "--file", reg, "--ack", ack)
    out = r.stdout.decode()
    m = re.search(r"^(ok|FAILED) txcount=(\d+) acked=(\d+) unfinished=(-?\d+)", out, re.M)
    assert r.returncode in (0, 1) and m, f"check could not run: {r.stderr.decode()}\n{out}"
    return r.returncode, out, int(m.group(2)), int(m.group(4))


def ack_word(ack):
    try:
        return ack.read_bytes()[:8]
    except FileNotFoundError:
        return b""


def kill_after(args, delay, ack=None):
    """SIGKILL the workload `delay` seconds after it started, or with `ack`
    after its first new acknowledgement (at most 2 s): a start slowed by a
    sanitizer or a loaded machine then does not eat the delay, so the kill
    still lands among the transactions."""
    before = ack_word(ack) if ack else None
    p = subprocess.Popen([str(CRASHPROC), *map(str, args)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    if ack:
        deadline = time.monotonic() + 2
        while ack_word(ack) == before and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.0005)
    time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    _, err = p.communicate(timeout=30)
    return p.returncode, err.decode()


def test_sigkill_at_random_moments(workdir):
    rng = random.Random(int(os.environ.get("CHELL_CRASH_SEED", "20240")))
    reg, ack = workdir / "region", workdir / "ack"
    kills = interrupted = 0
    last = -1
    for i in range(KILLS):
        if i % 4 == 0:  # a fresh region now and then keeps the replays short
            seed = str(rng.randrange(1, 1 << 30))
            # Formatting keeps the old heap bytes: start from an empty file.
            reg.unlink(missing_ok=True)
            r = proc("run", "--file", reg, "--create", "--tx", "1", "--ack", ack, "--seed", seed)
            assert r.returncode == 0, r.stderr.decode()
            last = 1
        rc, err = kill_after(["run", "--file", reg, "--ack", ack, "--seed", seed],
                             rng.uniform(0, 0.015), ack=ack)
        assert rc == -signal.SIGKILL, f"kill {i}: the workload ended by itself ({rc}): {err}"
        kills += 1
        r = proc("check", "--file", reg, "--ack", ack, "--seed", seed)
        out = r.stdout.decode()
        assert r.returncode == 0, f"kill {i} (seed {seed}): {out}{r.stderr.decode()}"
        m = re.search(r"^ok txcount=(\d+) acked=(\d+) unfinished=(-?\d+)", out, re.M)
        n, unfinished = int(m.group(1)), int(m.group(3))
        assert n >= last, f"kill {i}: committed transactions went back from {last} to {n}"
        last = n
        interrupted += unfinished > 0
    print(f"{kills} kills, {interrupted} interrupted a transaction that recovery rolled back")
    assert kills == KILLS
    # The kills must land inside transactions, or recovery is not exercised.
    assert interrupted >= KILLS // 10


def test_sigkill_checker_catches_missing_undo(workdir):
    reg, ack = workdir / "region", workdir / "ack"
    assert proc("run", "--file", reg, "--create", "--tx", "1", "--ack", ack).returncode == 0
    rng = random.Random(5)
    for i in range(60):
        kill_after(["run", "--file", reg, "--ack", ack, "--break", "missing-undo"],
                   rng.uniform(0.001, 0.01))
        rc, out, _, _ = check(reg, ack)
        if rc == 1:
            assert "VIOLATION" in out
            return
    pytest.fail("60 kills of the missing-undo variant and the checker saw nothing")


def test_checker_catches_corruption_and_lost_commits(workdir):
    reg, ack = workdir / "region", workdir / "ack"
    r = proc("run", "--file", reg, "--create", "--tx", "300", "--ack", ack)
    assert r.returncode == 0 and b"txcount=300" in r.stdout, r.stderr
    rc, out, n, _ = check(reg, ack)
    assert rc == 0 and n == 300, out
    # The heap is the end of the file: flip its last byte (a free block).
    with open(reg, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        b = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x40]))
    rc, out, _, _ = check(reg, ack)
    assert rc == 1 and "differs from a replay" in out, out
    # Claim more acknowledged commits than the region holds.
    with open(reg, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        f.write(b)
    ack.write_bytes((302).to_bytes(8, "little"))
    rc, out, _, _ = check(reg, ack)
    assert rc == 1 and "last acknowledged" in out, out


def test_crashproc_usage(workdir):
    assert proc("--help").returncode == 0
    assert proc().returncode == 2
    assert proc("run").returncode == 2
    assert proc("run", "--file", workdir / "x", "--break", "nothing").returncode == 2
