"""Per-path routing rules: several stacks in one process (issue 10, item 2).

`--route PREFIX=STACK` (setting `route`) maps path prefixes to stacks, the
longest prefix first; `mode` + `paths` is the one-rule case. These tests
check what `chell config` says each path takes, that one process really
serves each file with its own rule's stack (trace logs, direct's counters),
that each handler in use starts once and unused ones never, and the
random-operation differential generator with two rules in one process
(shadow checking each rule's stack), across fork and exec.
"""
import json
import os
import shlex
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import CHELL, PROGS, describe, fresh_manager, run
from test_randops import randops_argv, randops_outcome, report

# The routing-rule combinations' share of the differential runs: 200,000
# operations in CI, split over the combinations below.
ROUTES_TOTAL = int(os.environ.get("CHELL_ROUTES_OPS", "200000"))


def config(*args, env=None):
    return run([CHELL, "config", *args], env=env, timeout=60)


def test_which_longest_prefix(workdir):
    """Nested prefixes: the longest wins, whatever the order given; the
    `mode` catch-all takes the rest; /proc and shadow.dir never route."""
    a, ab = workdir / "a", workdir / "a" / "b"
    res = config("--route", f"{ab}=trace", "--route", f"{a}=direct", "--mode", "shadow:trace",
                 "--set", f"shadow.dir={workdir}/sh", "--which",
                 ab / "f", a / "f", a / "bb", workdir / "x", "/proc/self/status",
                 workdir / "sh" / "copy")
    assert res.returncode == 0, describe(res)
    lines = res.stdout.decode().splitlines()
    assert lines == [
        f"{ab}/f: trace (rule {ab} -> trace (route))",
        f"{a}/f: direct (rule {a} -> direct (route))",
        f"{a}/bb: direct (rule {a} -> direct (route))",
        f"{workdir}/x: shadow:trace (rule every other file -> shadow:trace (mode))",
        "/proc/self/status: kernel (never routed: a kernel pseudo file system)",
        f"{workdir}/sh/copy: kernel (never routed: shadow.dir)",
    ]
    # The normal dump lists the rules in the order they are tried.
    res = config("--route", f"{a}=direct", "--route", f"{ab}=trace")
    out = res.stdout.decode()
    assert out.index(f"{ab} -> trace (route)") < out.index(f"{a} -> direct (route)"), out
    data = json.loads(config("--json", "--route", f"{a}=direct", "--mode", "trace",
                             "--path", str(ab)).stdout)
    assert data["routes"] == [
        {"prefix": str(ab), "stack": "trace", "from": "paths", "by_mount": False},
        {"prefix": str(a), "stack": "direct", "from": "route", "by_mount": False},
    ]


def test_which_one_rule_forms(workdir):
    """The single mode + paths form is the one-rule case, as before."""
    out = config("--mode", "direct", "--which", workdir / "f").stdout.decode()
    assert out == (f"{workdir}/f: direct if on a tmpfs or DAX mount, else kernel "
                   f"(rule every other file on a tmpfs or DAX mount -> direct (mode))\n")
    out = config("--mode", "trace", "--path", workdir, "--which", workdir / "f",
                 "/tmp").stdout.decode()
    assert out == (f"{workdir}/f: trace (rule {workdir} -> trace (paths))\n"
                   "/tmp: kernel (no rule)\n")
    # with routes, a posix mode takes nothing (the kernel needs no rule)
    out = config("--route", f"{workdir}=trace", "--which", "/tmp").stdout.decode()
    assert out == "/tmp: kernel (no rule)\n"


@pytest.mark.parametrize("args, msg", [
    (["--route", "/x"], "option --route needs PREFIX=STACK, got '/x'"),
    (["--route", "/x=fast"], "setting route (option --route): 'fast' is not a built-in handler "
                             "(posix, trace, shadow, direct, cache, warp), and handlers.dir is empty"),
    (["--route", "/x=trace:direct"], "only shadow takes a handler under test"),
    (["--route", "/x=shadow:shadow"], "shadow cannot check 'shadow': it checks one of "
                                      "posix, trace, direct, cache"),
    (["--route", "/x=direct", "--route", "/x=trace"],
     "setting route: /x is routed to both direct (route) and trace"),
    (["--mode", "shadow"], "mode shadow needs the files to check"),
])
def test_bad_rules(args, msg):
    """A bad rule stops `chell run` before the program starts (exit 2), with
    a message naming the setting."""
    res = run([CHELL, "run", *args, "--", "true"], timeout=60)
    assert res.returncode == 2, describe(res)
    assert msg in res.stderr.decode(), describe(res)


def test_two_stacks_one_process(workdir):
    """direct for one directory, trace for the other, in one process and
    its forked and exec'd children: each file is served by its rule's
    stack only (the trace log names only trace's files; direct counts the
    others' I/O), and each handler starts once."""
    d, t = workdir / "d", workdir / "t"
    d.mkdir()
    t.mkdir()
    stats = workdir / "stats"
    stats.mkdir()
    trace = workdir / "trace.%p"
    script = (f"echo one > {d}/f; echo two > {t}/g; cat {d}/f {t}/g; "
              f"(cat {d}/f > {t}/h) & wait; cat {t}/h; exec cat {d}/f")
    res = run([CHELL, "run", "--route", f"{d}=direct", "--route", f"{t}=trace",
               "--trace-file", trace, "--set", f"stats.file={stats}/s.%p.json",
               "--set", "log.level=info", "--", "sh", "-c", script], timeout=60)
    assert res.returncode == 0, describe(res)
    assert res.stdout.decode() == "one\ntwo\none\none\n"
    err = res.stderr.decode()
    for h in ("direct", "trace", "posix"):
        assert err.count(f"handler {h} started") == err.count("stacks direct, trace active"), err
    assert "handler shadow started" not in err and "handler cache started" not in err, err
    logs = "".join(p.read_text() for p in workdir.glob("trace.*"))
    assert f'open("{t}/g"' in logs and f'open("{t}/h"' in logs, logs
    assert str(d) not in logs, "a direct file went through the trace stack:\n" + logs
    # (counters are written at exit: the shell's own, before its exec, are not)
    counts = [json.loads(p.read_text()) for p in stats.glob("s.*.json")]
    assert sum(c["reads"] for c in counts) >= 3, counts
    assert (d / "f").read_text() == "one\n" and (t / "h").read_text() == "one\n"


def test_each_handler_starts_once(workdir):
    """direct under two stacks (direct, shadow:direct): its proc_init runs
    once; handlers no rule uses (trace, cache) never start."""
    res = run([CHELL, "run", "--route", f"{workdir}/a=direct",
               "--route", f"{workdir}/b=shadow:direct", "--shadow-dir", workdir / "sh",
               "--set", "log.level=info", "--", "true"], timeout=60)
    assert res.returncode == 0, describe(res)
    err = res.stderr.decode()
    assert err.count("handler direct started") == 1, err
    assert err.count("handler shadow started") == 1, err
    assert "handler trace started" not in err and "handler cache started" not in err, err
    assert "stacks direct, shadow:direct active" in err, err


# ------------------------------------------------- the differential generator

# (first rule's stack, second rule's stack, where the second directory is,
# seed). "nested": the second directory lies inside the first, so the
# longest prefix decides; "cache": the second directory is under a chelld's
# backing directory.
COMBOS = [
    ("shadow:direct", "shadow:trace", "sibling", 1001),
    ("shadow:trace", "shadow:direct", "nested", 1002),
    ("shadow:direct", "shadow:cache", "cache", 1003),
    ("trace", "shadow:cache", "cache", 1004),
]


@pytest.mark.parametrize("first, second, where, seed", COMBOS,
                         ids=[f"{a}+{b}-{w}" for a, b, w, _ in COMBOS])
def test_randops_two_rules(request, workdir, first, second, where, seed):
    """chell_randops with its odd files under a second rule's prefix, so one
    process (its forks and exec'd images) drives two stacks at once; shadow
    checks each rule's stack it names against the kernel, and the
    generator checks everything against its own model. 0 divergences."""
    per = ROUTES_TOTAL // len(COMBOS)
    a = workdir / "a"
    a.mkdir()
    shadow = Path(tempfile.mkdtemp(prefix="chell-routes-shadow-", dir="/dev/shm"))
    extra, mgr_ctx = [], None
    try:
        if where == "sibling":
            b = workdir / "b"
        elif where == "nested":
            b = a / "inner"
        else:
            mgr_ctx = fresh_manager()
            m = mgr_ctx.__enter__()
            b = Path(tempfile.mkdtemp(prefix=f"r{seed}-", dir=m.backing))
            # two file systems: the RWF model's answers are per file system
            extra += ["--no-rwf", "--set", f"cache.pool={m.pool}"]
        b.mkdir(exist_ok=True)
        gen = randops_argv(seed, per, a, ["--dir2", str(b)] +
                           [x for x in extra if x == "--no-rwf"])
        cli = [x for x in extra if x != "--no-rwf"]
        cmd = [str(CHELL), "run", "--route", f"{a}={first}", "--route", f"{b}={second}",
               "--shadow-dir", str(shadow), "--trace-file", str(workdir / "trace.%p"),
               *cli, "--"] + gen
        env = dict(os.environ)
        env.pop("CHELL_SHADOW_DIR", None)
        res = run(cmd, env=env, timeout=900)
        m_, out, err, problems = randops_outcome(res, seed, per)
        reports = sorted(shadow.rglob("divergence*"))
        if reports:
            problems.append("shadow wrote a divergence report")
        if problems:
            head = "\n".join(l for l in err.splitlines() if not l.startswith("  op="))[-4000:]
            for p in reports[:1]:
                head += f"\n--- {p} ---\n" + p.read_text(errors="replace")[-3000:]
            pytest.fail(f"randops {first}+{second}: {'; '.join(problems)}\n{head}\n"
                        f"reproduce: {shlex.join(cmd)}", pytrace=False)
        assert int(m_.group(4)) > 0 and int(m_.group(5)) > 0, "no fork or no exec exercised"
        # The trace rule's files, and only those, are in the trace logs.
        if first == "trace":
            logs = "".join(p.read_text(errors="replace") for p in workdir.glob("trace.*"))
            assert f"{a}/f0" in logs and f"{b}/f1" not in logs
        report(request, f"randops routes {first}+{second} ({where}): {m_.group(0)}")
    finally:
        shutil.rmtree(shadow, ignore_errors=True)
        if mgr_ctx:
            mgr_ctx.__exit__(None, None, None)


def test_cache_rule_prefixes_back_a_started_chelld(workdir):
    """A chelld started for a run serves the cache rules' prefixes (when
    cache.backing is empty), not the `paths` of another mode's rule."""
    pmem, data = workdir / "pmem", workdir / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHELL_")}
    env.update(CHELL_MODE="direct", CHELL_PATHS=str(pmem), CHELL_ROUTE=f"{data}=shadow:cache")
    res = run([CHELL, "cache", "start", "-n", "--pool", workdir / "pool"], env=env, timeout=60)
    assert res.returncode == 0, describe(res)
    out = res.stdout.decode()
    assert f"--backing {data}" in out and str(pmem) not in out, out


def test_route_lines_in_a_config_file_append(workdir):
    """`route = PREFIX=STACK` lines in a file append (like `path` lines);
    the environment's CHELL_ROUTE holds them ':'-separated, shadow:NAME
    included; a relative --route prefix is made absolute."""
    conf = workdir / "chell.conf"
    conf.write_text(f"route = {workdir}/a=direct\nroute = {workdir}/b=shadow:trace  # checked\n")
    out = config("--config", conf, "--which", workdir / "a" / "f", workdir / "b" / "g").stdout
    assert out.decode() == (f"{workdir}/a/f: direct (rule {workdir}/a -> direct (route))\n"
                            f"{workdir}/b/g: shadow:trace (rule {workdir}/b -> shadow:trace "
                            f"(route))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHELL_")}
    env["CHELL_ROUTE"] = f"{workdir}/a=shadow:direct:{workdir}/b=cache"
    out = config("--which", workdir / "a" / "f", workdir / "b" / "g", env=env).stdout.decode()
    assert f"{workdir}/a/f: shadow:direct (rule" in out and f"{workdir}/b/g: cache (rule" in out
    res = run([CHELL, "run", "-n", "--route", "rel=trace", "--", "true"], cwd=workdir, timeout=60)
    assert f"CHELL_ROUTE={workdir}/rel=trace\n" in res.stdout.decode(), describe(res)
