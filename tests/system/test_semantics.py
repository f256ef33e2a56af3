"""Differential POSIX-semantics tests: the kernel is the oracle.

Each tests/progs/sem_* program performs a deterministic scenario in one
semantic area (dup, fork, exec, access checks, concurrent appends, signals,
threads, stdio) and prints a canonical transcript: every call with its
result and errno name, offsets, sizes and content hashes - never paths,
pids or timings. The program runs plainly (the reference) and under
`chell run --mode M --path DIR` for every mode, each time in a fresh tmpfs
directory, and the transcripts and exit statuses must be identical,
descriptor numbers included (Chell hands out the kernel's descriptors).
"""
import difflib
import os
import re
from pathlib import Path

import pytest

from conftest import MODES, PROGS, SEM_PROGS, chell_cmd, run


# A hang (e.g. a deadlock in a signal handler) must fail, not stall the suite.
TIMEOUT = 120

# Identical environment for plain and Chell runs.
BASE_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": os.environ.get("HOME", "/root"),
    "LC_ALL": "C",
    "TZ": "UTC",
}


def prog(name):
    p = PROGS / name
    if not p.exists():
        pytest.fail(f"{p} is not built (tests/progs/CMakeLists.txt)")
    return p


def run_plain(name, d):
    return run([prog(name), d], env=dict(BASE_ENV), timeout=TIMEOUT)


def run_chell(name, mode, d, tmp, extra_env=None):
    """Run under Chell. Trace output goes to files in tmp (not stderr), the
    shadow copies under tmp too, so stderr carries only real complaints."""
    env = dict(BASE_ENV)
    extra = []
    if mode == "direct-lazy":  # direct with sizes published lazily (docs/DIRECT.md)
        mode, extra = "direct", ["--set", "direct.lazy_size=on"]
    if mode == "direct-map0":  # direct mapping from the first read (direct.map_after=0)
        mode, extra = "direct", ["--set", "direct.map_after=0"]
    if mode == "trace":
        tdir = tmp / "trace"
        tdir.mkdir(exist_ok=True)
        extra = ["--trace-file", str(tdir / "trace.%p")]
    if mode == "shadow":
        sdir = tmp / "shadow"
        sdir.mkdir(exist_ok=True)
        env["CHELL_SHADOW_DIR"] = str(sdir)
    if extra_env:
        env.update(extra_env)
    return run(chell_cmd(mode, [d], [prog(name), d], extra), env=env, timeout=TIMEOUT)


def fresh(base, label):
    d = base / label
    d.mkdir()
    return d


def describe(res):
    return (f"exit status {res.returncode}\n--- stderr (last 3000 chars) ---\n"
            + res.stderr.decode(errors="replace")[-3000:])


def diff(ref, got, ref_label, got_label):
    a = ref.decode(errors="replace").splitlines(keepends=True)
    b = got.decode(errors="replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, ref_label, got_label, n=3))


_reference = {}


def reference(name, base):
    """The plain transcript of `name`, computed once per session."""
    if name not in _reference:
        res = run_plain(name, fresh(base, "reference"))
        assert res.returncode == 0, f"{name} failed plainly: {describe(res)}"
        _reference[name] = res
    return _reference[name]


@pytest.mark.parametrize("name", SEM_PROGS)
def test_plain_transcript_is_stable(name, workdir):
    """Without Chell, two runs give the same transcript: otherwise a
    difference under Chell would prove nothing."""
    first = run_plain(name, fresh(workdir, "one"))
    second = run_plain(name, fresh(workdir, "two"))
    assert first.returncode == 0, describe(first)
    assert second.returncode == 0, describe(second)
    assert first.stdout, f"{name} printed no transcript"
    assert first.stdout == second.stdout, diff(first.stdout, second.stdout, "run1", "run2")
    # The transcripts that carry a verdict must say OK on the bare kernel.
    text = first.stdout.decode()
    if "verdict:" in text:
        assert "verdict: OK" in text, text


# direct.lazy_size publishes a size with ftruncate, which stamps mtime and
# ctime when it runs (close, exec...), not when the write did (docs/DIRECT.md,
# "Lazy sizes"). In those transcripts exactly that may differ: a line where
# the kernel says "mtime same, ctime same" may say "advanced" for both; any
# other difference, and a time the kernel advanced that Chell did not, fails.
LAZY_STAMPS = {"sem_times"}
_KERNEL_SAME = b"mtime same, ctime same"
_LAZY_STAMPED = b"mtime advanced, ctime advanced"


def lazy_view(name, ref, got):
    """got with the documented lazy-size stamps put back as the kernel's
    lines, where that is the only difference on the line."""
    if name not in LAZY_STAMPS:
        return got
    a, b = ref.split(b"\n"), got.split(b"\n")
    if len(a) != len(b):
        return got
    return b"\n".join(x if y != x and _KERNEL_SAME in x and y == x.replace(_KERNEL_SAME, _LAZY_STAMPED)
                      else y for x, y in zip(a, b))


@pytest.mark.parametrize("mode", MODES + ["direct", "direct-map0", "direct-lazy"])
@pytest.mark.parametrize("name", SEM_PROGS)
def test_same_transcript_under_chell(name, mode, workdir, tmp_path):
    ref = reference(name, workdir)
    got = run_chell(name, mode, fresh(workdir, "chell"), tmp_path)
    err = got.stderr.decode(errors="replace")
    if "DIVERGENCE" in err:
        # The report's header says what differed; the history is long.
        head = [l for l in err.splitlines() if not l.startswith("  #")][:40]
        pytest.fail("shadow reported a divergence:\n" + "\n".join(head)
                    + "\n--- end of the history ---\n" + err[-2500:])
    out = lazy_view(name, ref.stdout, got.stdout) if mode == "direct-lazy" else got.stdout
    assert out == ref.stdout, (
        f"{name} under --mode {mode} diverges from the kernel:\n"
        + diff(ref.stdout, got.stdout, "plain", f"chell-{mode}") + "\n" + describe(got))
    assert got.returncode == ref.returncode, describe(got)
    if mode == "trace":
        traces = list((tmp_path / "trace").glob("trace.*"))
        assert traces and any(p.stat().st_size > 0 for p in traces), \
            "trace mode wrote no trace for a program that opens files under --path"


# ---------------------------------------------------------------------------
# sem_exec under trace: the exec'd image keeps using the inherited descriptor
# ---------------------------------------------------------------------------

def _has_call(line, call, numbers):
    """A trace line for `call` (pread, pread64...) whose numbers include all of
    `numbers`. Only the call name and the arguments' values are relied on, not
    the exact layout of a trace line."""
    if not re.search(r"\b" + call + r"(64)?\b", line):
        return False
    found = set(int(x) for x in re.findall(r"(?<![\w.])-?\d+(?![\w.])", line))
    return all(n in found for n in numbers)


def test_exec_image_continues_with_inherited_fd(workdir, tmp_path):
    """sem_exec ends by replacing itself (execve without fork); the new image
    preads 13 bytes at 17 from the descriptor of f1 that the old image preads
    11 bytes at 19 from just before the exec. Both calls must appear in the
    trace of the same pid (trace.%p names the file after the pid), the old
    image's first, on the same descriptor."""
    d = fresh(workdir, "chell")
    res = run_chell("sem_exec", "trace", d, tmp_path)
    assert res.returncode == 0, describe(res)
    out = res.stdout.decode()
    m = re.search(r'open\(P\("f1"\), O_RDWR.*\) = (\d+)', out)
    assert m, out[:2000]
    fd_a = int(m.group(1))
    assert "[final] done" in out, out[-2000:]

    files = sorted((tmp_path / "trace").glob("trace.*"))
    assert files, "no trace written"
    matches = []
    for p in files:
        lines = p.read_text(errors="replace").splitlines()
        pre = [i for i, l in enumerate(lines) if _has_call(l, "pread", (fd_a, 11, 19))]
        post = [i for i, l in enumerate(lines) if _has_call(l, "pread", (fd_a, 13, 17))]
        if pre or post:
            matches.append((p.name, pre, post, lines))
    assert matches, ("neither the pre-exec nor the post-exec pread is in the trace; "
                     f"trace files: {[p.name for p in files]}")
    for name, pre, post, lines in matches:
        if pre and post:
            assert pre[0] < post[-1], f"{name}: the new image's pread precedes the old one's"
            # The pid in the file name is the same process before and after exec.
            pid = name.split(".", 1)[1]
            assert pid.isdigit(), name
            return
    detail = "\n".join(f"{n}: pre-exec lines {pre[:3]}, post-exec lines {post[:3]}"
                       for n, pre, post, _ in matches)
    pytest.fail("the pre-exec and post-exec preads are not in the same process's trace "
                "(the trace was lost across exec, or the new image did not adopt the "
                "inherited descriptor):\n" + detail)


def test_exec_with_empty_environment_stays_under_chell(workdir, tmp_path):
    """execle() with an empty environment drops LD_PRELOAD and CHELL_*; Chell
    must carry its settings into the new image anyway, or that image escapes
    it silently (same transcript in posix mode, untraced I/O, unshadowed
    writes). The image started that way writes "from execle-empty-env\\n"
    (22 bytes, a length no other image of sem_exec writes) to the O_APPEND
    descriptor e: that write must be in the trace, in a child's trace file."""
    d = fresh(workdir, "chell")
    res = run_chell("sem_exec", "trace", d, tmp_path)
    assert res.returncode == 0, describe(res)
    out = res.stdout.decode()
    m = re.search(r'open\(P\("f4"\), O_WRONLY.*\) = (\d+)', out)
    assert m, out[:2000]
    fd_e = int(m.group(1))
    hits = []
    for p in sorted((tmp_path / "trace").glob("trace.*")):
        for line in p.read_text(errors="replace").splitlines():
            if _has_call(line, "write", (fd_e, 22)):
                hits.append((p.name, line))
    assert hits, ("the image started by execle() with an empty environment left no "
                  f"trace of its 22-byte write to fd {fd_e}: it ran without Chell")
