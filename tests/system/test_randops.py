"""Seeded random file operations (tests/progs/chell_randops.c), plainly and under Chell.

chell_randops carries its own model of what every operation must return
(contents, sizes, offsets, flags, descriptor numbers) and exits non-zero on
the first disagreement; under `--mode shadow` Chell additionally compares
each operation against a shadow copy and aborts on divergence. A plain run
validates the generator; a run under Chell validates Chell.

Every failure prints a one-line reproducer: the exact command line.

The big shadow run executes CHELL_RANDOPS_OPS operations in total (default
200000), split across several seeds. The edge classes (EDGE_CLASSES: locks,
RWF flags, sendfile/copy_file_range/splice, RLIMIT_NOFILE, failed and short
writes, unshared descriptor tables) are checked plainly on tmpfs and /tmp
(test_plain_edges) and under every mode (test_edges_mode); the 1,000,000
operation runs are scripts/randops_soak.sh's, outside CI.
"""
import os
import subprocess
import re
import shlex
import tempfile
import time
from pathlib import Path

import pytest

from conftest import PROGS, REPO, chell_cmd, run

RANDOPS = PROGS / "chell_randops"
SUMMARY = re.compile(
    r"^randops: seed=(\d+) ops=(\d+) done=(\d+) forks=(\d+) execs=(\d+) threads=(\d+)$", re.M)

BIG_TOTAL = int(os.environ.get("CHELL_RANDOPS_OPS", "200000"))
# (seed, extra generator arguments) of the big shadow run; the total is split evenly.
BIG_SEEDS = [
    (101, []),
    (202, []),
    (303, ["--files", "8", "--max-size", "64K", "--threads", "3", "--procs", "4"]),
    (404, ["--max-size", "8192", "--files", "2"]),  # tiny files: EOF, holes, truncation
]


# The operation classes beyond plain file I/O, each with its own switch
# (--no-CLASS): byte-range locks, preadv2/pwritev2 RWF flags, sendfile /
# copy_file_range / splice, RLIMIT_NOFILE, failed and short writes, and a
# thread that unshares its descriptor table.
EDGE_CLASSES = ["locks", "rwf", "copy", "limits", "badwrite", "unshare"]
NO_EDGES = [f"--no-{c}" for c in EDGE_CLASSES]

_kernel_answers = {}


def kernel_answers(d):
    """The bare kernel's answers to every RWF flag on d's file system, from
    `chell_randops --probe` run plainly (under Chell the probe would see
    Chell, and Chell re-adds itself to every exec, so the generator cannot
    probe the kernel from inside). One probe per file system."""
    dev = os.stat(d).st_dev
    if dev not in _kernel_answers:
        env = {k: v for k, v in os.environ.items()
               if k != "LD_PRELOAD" and not k.startswith("CHELL_")}
        res = run([RANDOPS, "--probe", "--dir", d], env=env, timeout=60)
        if res.returncode != 0:
            pytest.fail(f"chell_randops --probe --dir {d}: {res.stderr.decode(errors='replace')}")
        _kernel_answers[dev] = res.stdout.decode().strip()
    return _kernel_answers[dev]


def randops_argv(seed, ops, d, extra=(), edges=False):
    """The generator's command line for the existing directory d.

    edges: also the EDGE_CLASSES (with the kernel's RWF answers for d's file
    system). Off by default, so the long runs under Chell (test_shadow_big,
    test_mode_small, and the shadow-under-test runs of test_direct.py and
    test_cache.py) keep their scope; the edge classes run in every mode in
    test_edges_mode and in scripts/randops_soak.sh."""
    if not RANDOPS.exists():
        pytest.fail(f"{RANDOPS} is not built (tests/progs/CMakeLists.txt)")
    extra = list(extra) + ([] if edges else NO_EDGES)
    argv = [str(RANDOPS), "--seed", str(seed), "--ops", str(ops), "--dir", str(d)] + extra
    if "--no-rwf" not in extra:
        argv += ["--kernel", kernel_answers(d)]
    return argv


def randops_outcome(res, seed, ops):
    """(summary match, stdout, stderr, problems) of a finished chell_randops
    run of `ops` operations with `seed` (problems: [] if it ran them all and
    exited 0 with no divergence on stderr)."""
    out, err = res.stdout.decode(errors="replace"), res.stderr.decode(errors="replace")
    m = SUMMARY.search(out)
    problems = []
    if res.returncode != 0:
        problems.append(f"exit status {res.returncode}")
    if not m or (int(m.group(1)), int(m.group(3))) != (seed, ops):
        problems.append("not every operation ran")
    if "DIVERGENCE" in err:
        problems.append("shadow reported a divergence on stderr")
    return m, out, err, problems


def run_randops(mode, seed, ops, base, extra=(), timeout=600, mgr=None, edges=False):
    """Run chell_randops plainly (mode None) or under `chell run --mode MODE`.

    base: a fresh directory; the files go to base/data, shadow copies and
    reports to base/shadow, traces to base/trace (outside the routed prefix).
    Cache mode (mgr: a conftest Manager) puts the files under the manager's
    backing directory instead. Returns (summary match, stdout, stderr,
    elapsed seconds). Fails with a reproducer on any error.
    """
    data = base / "data"
    if mode == "cache":
        data = Path(tempfile.mkdtemp(prefix=f"r{seed}-", dir=mgr.backing))
    else:
        data.mkdir()
    argv = randops_argv(seed, ops, data, extra, edges)
    shadow = base / "shadow"
    trace = base / "trace"
    if mode is None:
        cmd = argv
    else:
        cli = []
        if mode == "shadow":
            shadow.mkdir()
            cli = ["--shadow-dir", str(shadow)]
        elif mode == "trace":
            trace.mkdir()
            cli = ["--trace-file", str(trace / "trace.%p")]
        elif mode == "cache":
            cli = ["--set", f"cache.pool={mgr.pool}", "--set", f"cache.backing={mgr.backing}"]
        elif mode == "direct-lazy":  # sizes published lazily (docs/DIRECT.md)
            cli = ["--set", "direct.lazy_size=on"]
        cmd = chell_cmd("direct" if mode == "direct-lazy" else mode, [data], argv, cli)
    # one line that works after the test's temporary directories are gone
    # (cache mode: with a chelld serving the same pool and backing directory)
    dirs = [data] + ([shadow] if mode == "shadow" else []) + ([trace] if mode == "trace" else [])
    repro = shlex.join(["mkdir", "-p"] + [str(x) for x in dirs]) + " && " + \
        shlex.join(str(c) for c in cmd)
    if mode == "cache":
        repro = f"(chelld on {mgr.pool} in front of {mgr.backing}) " + repro
    env = dict(os.environ)
    env.pop("CHELL_SHADOW_DIR", None)  # the command line says where
    t0 = time.monotonic()
    try:
        res = run(cmd, env=env, timeout=timeout)
    except Exception as exc:  # timeout: a hang is a failure too
        pytest.fail(f"chell_randops did not finish: {exc}\nreproduce: {repro}", pytrace=False)
    elapsed = time.monotonic() - t0
    out = res.stdout.decode(errors="replace")
    err = res.stderr.decode(errors="replace")
    problems = []
    rc = res.returncode
    if rc != 0:
        how = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"
        if rc > 128:
            how += f" (signal {rc - 128}?)"
        problems.append(how)
    m = SUMMARY.search(out)
    if not m:
        problems.append("no summary line on stdout")
    elif (int(m.group(1)), int(m.group(2)), int(m.group(3))) != (seed, ops, ops):
        problems.append(f"summary does not account for every operation: {m.group(0)}")
    if "DIVERGENCE" in err:
        problems.append("shadow reported a divergence on stderr")
    if shadow.exists():
        reports = sorted(p.name for p in shadow.rglob("divergence*"))
        if reports:
            problems.append(f"divergence report(s) in {shadow}: {reports}")
            for p in sorted(shadow.rglob("divergence*"))[:2]:
                err += f"\n--- {p} ---\n" + p.read_text(errors="replace")[-4000:]
    if problems:
        pytest.fail(f"chell_randops failed ({'; '.join(problems)}) after {elapsed:.1f}s\n"
                    f"--- stderr (last 6000 chars) ---\n{err[-6000:]}\n"
                    f"--- stdout ---\n{out[-2000:]}\n"
                    f"reproduce: {repro}", pytrace=False)
    return m, out, err, elapsed


def report(request, line):
    """A line in pytest's terminal output even when output is captured."""
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(line)
    else:
        print(line)


def fresh(base, label):
    d = base / label
    d.mkdir()
    return d


# ---------------------------------------------------------------- plainly


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_plain_model(workdir, seed):
    """Without Chell the generator's own model must agree with the kernel."""
    m, _, err, _ = run_randops(None, seed, 20000, fresh(workdir, "r"), edges=True)
    assert f"randops: seed={seed} ops=20000" in err  # parameters announced at start
    assert int(m.group(4)) > 0, "no fork was exercised"
    assert int(m.group(5)) > 0, "no exec was exercised"
    assert int(m.group(6)) > 0, "no thread was exercised"


def test_plain_restricted(workdir):
    """Every feature switch off, tiny files: the single-process core alone."""
    m, _, _, _ = run_randops(None, 7, 20000, fresh(workdir, "r"),
                             ["--no-fork", "--no-exec", "--no-threads", "--no-stdio",
                              "--files", "2", "--max-size", "4096"])
    assert m.group(4, 5, 6) == ("0", "0", "0")


@pytest.mark.parametrize("fs", ["tmpfs", "tmp"])
@pytest.mark.parametrize("cls", EDGE_CLASSES)
def test_plain_edges(workdir, cls, fs):
    """One class of edge operations alone, plainly: the generator's model of
    it must be the kernel's, on tmpfs (posix, trace, shadow, direct) and on
    the file system of /tmp (where cache mode's backing files live)."""
    others = [f"--no-{c}" for c in EDGE_CLASSES if c != cls]
    if fs == "tmpfs":
        run_randops(None, 31, 10000, fresh(workdir, "r"), others, edges=True)
    else:
        with tempfile.TemporaryDirectory(prefix="chell-randops-", dir="/tmp") as d:
            run_randops(None, 31, 10000, Path(d), others, edges=True)


def test_plain_deterministic(workdir):
    """A seed names one run: same sequence of compound operations every time."""
    a, _, _, _ = run_randops(None, 42, 8000, fresh(workdir, "a"), edges=True)
    b, _, _, _ = run_randops(None, 42, 8000, fresh(workdir, "b"), edges=True)
    assert a.group(0) == b.group(0)


def test_plain_detects_foreign_change(workdir):
    """The model really checks: a file changed behind the generator's back
    (by a concurrent outside writer) must make it fail, not pass."""
    base = fresh(workdir, "r")
    data = base / "data"
    data.mkdir()
    argv = randops_argv(5, 400000, data, ["--no-fork", "--no-exec", "--no-threads",
                                           "--files", "1"])
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    target = data / "f0"
    deadline = time.monotonic() + 60
    try:
        while p.poll() is None and time.monotonic() < deadline:
            if target.exists():
                try:
                    with open(target, "r+b") as f:
                        f.write(b"\xa5" * 65536)  # bytes the model never wrote
                except OSError:
                    pass
            time.sleep(0.01)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, f"external corruption went unnoticed: {out!r}"
    assert b"randops: FAIL" in err


# ---------------------------------------------------------------- under Chell


@pytest.mark.slow
def test_shadow_big(request, workdir):
    """>= 200k operations (CHELL_RANDOPS_OPS) under the shadow handler, several seeds."""
    per = max(1000, BIG_TOTAL // len(BIG_SEEDS))
    total = 0
    for seed, extra in BIG_SEEDS:
        m, _, _, elapsed = run_randops("shadow", seed, per, fresh(workdir, f"s{seed}"), extra)
        total += int(m.group(3))
        report(request, f"randops shadow: {m.group(0)} in {elapsed:.1f}s")
    report(request, f"randops shadow: {total} operations executed in total")
    assert total >= BIG_TOTAL


@pytest.mark.parametrize("mode", ["posix", "trace"])
def test_mode_small(request, workdir, mode):
    seeds = [11, 12]
    total = 0
    for seed in seeds:
        base = fresh(workdir, f"{mode}{seed}")
        m, _, _, elapsed = run_randops(mode, seed, 15000, base)
        total += int(m.group(3))
        report(request, f"randops {mode}: {m.group(0)} in {elapsed:.1f}s")
        if mode == "trace":
            # the handler was really in the path: it logged the operations
            traced = sum(p.stat().st_size for p in (base / "trace").iterdir())
            assert traced > 0, "trace mode wrote no trace"
    assert total == 15000 * len(seeds)


# ------------------------------------------------- every mode, CI-sized
#
# The edge classes (EDGE_CLASSES) with everything else, a few thousand
# operations per mode. A failure names the operation, the seed and the
# command that reproduces it; scripts/randops_soak.sh runs the same for
# 1,000,000 operations outside CI.

EDGE_SEEDS = [21, 22]
EDGE_OPS = 3000


@pytest.mark.parametrize("mode", ["posix", "trace", "shadow", "direct", "direct-lazy", "cache"])
def test_edges_mode(request, workdir, mode):
    mgr = request.getfixturevalue("mgr") if mode == "cache" else None
    for seed in EDGE_SEEDS:
        m, _, _, elapsed = run_randops(mode, seed, EDGE_OPS, fresh(workdir, f"{mode}{seed}"),
                                       mgr=mgr, edges=True)
        report(request, f"randops {mode} (edges): {m.group(0)} in {elapsed:.1f}s")
        assert int(m.group(3)) == EDGE_OPS


def test_soak_script(workdir):
    """scripts/randops_soak.sh: segments, progress, the final count (the
    mechanics; which classes pass under which mode is test_edges_mode's)."""
    res = run([REPO / "scripts" / "randops_soak.sh", "--mode", "posix", "--ops", "3000",
               "--segment", "1500", "--seed", "5", "--", "--no-copy", "--no-unshare"], timeout=300)
    out = res.stdout.decode(errors="replace")
    assert res.returncode == 0, out + res.stderr.decode(errors="replace")
    assert "seed 5: progress" in out and "seed 6: ok, 1500 operations" in out, out
    assert out.rstrip().endswith("randops soak: mode=posix ops=3000 divergences=0"), out
