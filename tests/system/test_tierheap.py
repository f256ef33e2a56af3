"""The tiered heap (libchell-tier.so, `chell tier run|stat`, docs/TIERHEAP.md).

Real programs (python3, sort, sqlite3, a multi-threaded C program with a
fork) give the output they give on glibc's malloc under every policy; the
malloc family keeps glibc's contract; DRAM stays within the budget
(anonymous RSS from /proc); and a program whose working set is twice its
memory cgroup's limit completes under `revert`, where plainly it is
OOM-killed.
"""
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD, CHELL, PROGS, run

LIBTIER = BUILD / "lib" / "libchell-tier.so"
POLICIES = ["revert", "preferred", "bind", "interleave"]
MB = 1 << 20

pytestmark = pytest.mark.skipif(not LIBTIER.exists(), reason="libchell-tier.so not built "
                                "(libjemalloc-dev / libnuma-dev missing)")


def clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith("CHELL_") and k != "LD_PRELOAD"}


def tier(policy, argv, dram="8M", slow_size="256M", extra=()):
    """`chell tier run` argv; a small budget so revert really reaches the slow tier."""
    return [str(CHELL), "tier", "run", "--policy", policy, "--dram", dram,
            "--slow-size", slow_size, *extra, "--"] + [str(a) for a in argv]


def same_output(argv, tmp, policies=POLICIES, **kw):
    plain = run(argv, env=clean_env(), cwd=tmp, **kw)
    assert plain.returncode == 0, plain.stderr
    for p in policies:
        r = run(tier(p, argv), env=clean_env(), cwd=tmp, **kw)
        assert r.returncode == 0, (p, r.stderr)
        assert r.stdout == plain.stdout, p
        assert b"chell-tier:" not in r.stderr, (p, r.stderr)
    return plain.stdout


PY_PROG = r"""
import hashlib, json, random, subprocess, sys
random.seed(7)
d = {}
for i in range(200000):
    d["k%d" % random.randrange(10**9)] = [i, str(i) * (i % 7), {"x": i / 3}]
h = hashlib.sha256()
for k in sorted(d):
    h.update(k.encode()); h.update(json.dumps(d[k]).encode())
big = [bytes([i % 251]) * (1 << (i % 18)) for i in range(400)]
s = sum(len(b) for b in big)
# An exec'd descendant: its own heap, on the tiered heap too.
child = subprocess.run([sys.executable, "-c", "print(sum(range(10**6)))"],
                       capture_output=True, text=True).stdout.strip()
print(len(d), h.hexdigest(), s, child)
"""


def test_python3_same_output_every_policy(tmp_path):
    (tmp_path / "p.py").write_text(PY_PROG)
    same_output(["python3", "p.py"], tmp_path)


def test_sort_same_output_every_policy(tmp_path):
    import random
    rnd = random.Random(3)
    lines = ["%08x %s" % (rnd.getrandbits(32), "w" * rnd.randrange(80)) for _ in range(200000)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    out = same_output(["sort", "-S", "64M", "in.txt"], tmp_path)
    assert out.count(b"\n") == 200000


SQL = """
CREATE TABLE t(id INTEGER PRIMARY KEY, g INTEGER, s TEXT);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)
INSERT INTO t SELECT i, i % 97, printf('%.*c', i % 50, 'x') FROM n;
CREATE INDEX tg ON t(g, s);
SELECT g, count(*), sum(length(s)), max(id) FROM t GROUP BY g ORDER BY g LIMIT 20;
SELECT count(DISTINCT s) FROM t;
"""


def test_sqlite3_same_output_every_policy(tmp_path):
    assert shutil.which("sqlite3"), "sqlite3 is missing (scripts/setup.sh installs it)"
    (tmp_path / "q.sql").write_text(SQL)
    same_output(["sh", "-c", "sqlite3 :memory: < q.sql"], tmp_path)


def test_threads_and_fork_same_output_every_policy(tmp_path):
    out = same_output([PROGS / "tierheap_mt"], tmp_path)
    assert b"content ok forks during the run 25/25 fork ok" in out


def test_malloc_family_conformance_every_policy(tmp_path):
    """Alignment, usable size, realloc keeping contents, malloc(0), the
    EINVAL/ENOMEM cases: the same transcript as glibc's malloc."""
    out = same_output([PROGS / "tierheap_conform"], tmp_path)
    assert b": NO\n" not in out


def test_npmalloc_places_on_the_slow_tier(tmp_path):
    r = run(tier("revert", [PROGS / "tierheap_conform", "np"], dram="1G"), env=clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == (b"npmalloc: ok; malloc block in DRAM under revert: yes\n"
                        b"nprealloc(p, 0): NULL\n")


def smaps_anon(pid):
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no Anonymous in smaps_rollup")


def start_paused(cmd):
    """Start a tierheap_ws command (under `chell tier run`), paused after its
    sweep: (proc, stat dict, anonymous RSS, its checksum line)."""
    env = clean_env()
    env["TIERHEAP_WS_PAUSE"] = "1"
    p = subprocess.Popen([str(a) for a in cmd], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = p.stdout.readline()
        assert line.startswith(b"checksum"), p.stderr.read()
        st = run([CHELL, "tier", "stat", "--json", p.pid])
        assert st.returncode == 0, st.stderr
        stat = json.loads(st.stdout)
        anon = smaps_anon(p.pid)
    except BaseException:
        p.kill()
        p.wait()
        raise
    return p, stat, anon, line


def paused_ws(policy, mb, dram, slow_size="512M", threads=1):
    """tierheap_ws MB under the policy, paused: (proc, stat dict, anon)."""
    p, stat, anon, _ = start_paused(tier(policy, [PROGS / "tierheap_ws", mb, 1, threads],
                                         dram=dram, slow_size=slow_size))
    return p, stat, anon


def finish(p):
    """Let a paused tierheap_ws free and exit; what it printed after the pause."""
    out, err = p.communicate(b"\n", timeout=60)
    assert p.returncode == 0, err
    return out


def test_dram_stays_within_the_budget():
    """revert with a 64 MiB budget and a 256 MiB working set: anonymous RSS
    is the budget plus what the same program holds with no heap to speak
    of (stack, libraries, jemalloc's metadata), within 2% of the budget."""
    p, base_stat, base_anon = paused_ws("revert", 1, "64M")
    finish(p)
    p, stat, anon = paused_ws("revert", 256, "64M")
    try:
        assert stat["policy"] == "revert" and stat["dram_budget"] == 64 * MB
        assert stat["slow_bytes"] >= 190 * MB, stat      # the rest went to the slow tier
        # The data extents never passed it (jemalloc's metadata blocks are
        # counted whole in dram_*, but against the budget by resident pages).
        assert stat["dram_peak"] - stat["metadata_bytes"] <= 64 * MB, stat
        assert anon <= base_anon + 64 * MB * 1.02, (anon, base_anon)
        # ...and it is used: untouched metadata address space does not eat
        # it (one 8 MiB growth step and jemalloc's retained tail are the slack).
        assert anon >= base_anon + 64 * MB * 0.75, (anon, base_anon)
    finally:
        finish(p)


def test_dram_stays_within_the_budget_with_threads():
    """Four threads growing four arenas at once: the budget is taken with a
    compare-and-swap, so no two arenas pass it together."""
    p, base_stat, base_anon = paused_ws("revert", 1, "64M", threads=4)
    finish(p)
    for _ in range(3):
        p, stat, anon = paused_ws("revert", 256, "64M", threads=4)
        try:
            assert stat["dram_peak"] - stat["metadata_bytes"] <= 64 * MB, stat
            assert anon <= base_anon + 64 * MB * 1.02, (anon, base_anon)
        finally:
            finish(p)


def test_bind_keeps_the_heap_out_of_dram():
    p, base_stat, base_anon = paused_ws("bind", 1, "1G")
    finish(p)
    p, stat, anon = paused_ws("bind", 128, "1G")
    try:
        assert stat["slow_bytes"] >= 128 * MB, stat
        assert stat["dram_bytes"] == stat["metadata_bytes"], stat  # only jemalloc's own
        assert anon <= base_anon + 4 * MB, (anon, base_anon)
    finally:
        finish(p)


def test_interleave_follows_the_weights():
    p, stat, anon = paused_ws("interleave", 200, "1G")
    try:
        data_dram = stat["dram_bytes"] - stat["metadata_bytes"]
        ratio = data_dram / max(stat["slow_bytes"], 1)
        assert 2.0 <= ratio <= 4.0, stat  # 3:1, give or take one extent
        # The text view says the same.
        text = run([CHELL, "tier", "stat", p.pid])
        assert text.returncode == 0, text.stderr
        lines = dict(l.split(":", 1) for l in text.stdout.decode().splitlines())
        assert lines["policy"].strip() == "interleave (weights 3:1)", lines
        assert lines["pid"].strip() == str(p.pid)
        assert lines["slow tier"].strip().endswith("of 524288 kB, file"), lines
        assert int(lines["DRAM"].split()[0]) >= data_dram // 1024, lines
    finally:
        finish(p)


def test_stat_refuses_a_process_not_on_the_tiered_heap():
    r = run([CHELL, "tier", "stat", os.getpid()])
    assert r.returncode == 1 and b"not on the tiered heap" in r.stderr
    r = run([CHELL, "tier", "stat", "1", "2"])
    assert r.returncode == 2
    r = run([CHELL, "tier", "run", "--policy", "nvmrevert", "--", "true"])
    assert r.returncode == 2 and b"tierheap.policy" in r.stderr
    r = run([CHELL, "tier", "run", "--dram", "lots", "--", "true"])
    assert r.returncode == 2 and b"tierheap.dram" in r.stderr
    r = run([CHELL, "tier", "run", "--", "/nonexistent/prog"])
    assert r.returncode == 127


STAT_DIR = Path("/dev/shm")

EXIT_PROG = r"""
import os, sys
kids = []
for how in ("_exit", "exit"):
    pid = os.fork()
    if pid == 0:
        if how == "_exit":
            os._exit(0)
        sys.exit(0)
    os.waitpid(pid, 0)
    kids.append(pid)
print(os.getpid(), *kids)
"""


def test_exiting_processes_remove_their_counter_file():
    """A process on the tiered heap removes /dev/shm/chell-tierheap.<pid> when
    it ends by exit or by _exit (forked children mostly end by _exit)."""
    r = run(tier("revert", ["python3", "-c", EXIT_PROG]), env=clean_env())
    assert r.returncode == 0, r.stderr
    pids = r.stdout.split()
    assert len(pids) == 3
    for pid in pids:
        assert not (STAT_DIR / f"chell-tierheap.{pid.decode()}").exists(), pid


def test_stat_lists_processes_and_reaps_the_files_of_killed_ones():
    """A killed process cannot remove its counter file: `chell tier stat`
    removes the files of processes that are gone, for the PID it is asked
    about and when it lists every process."""
    killed = []
    for _ in range(2):
        p, stat, _, _ = start_paused(tier("revert", [PROGS / "tierheap_ws", 4, 1, 1], dram="64M"))
        assert stat["pid"] == p.pid
        killed.append(p)
    listed = run([CHELL, "tier", "stat", "--json"])
    assert listed.returncode == 0, listed.stderr
    assert {p.pid for p in killed} <= {e["pid"] for e in json.loads(listed.stdout)}
    for p in killed:
        p.kill()
        p.wait()
        assert (STAT_DIR / f"chell-tierheap.{p.pid}").exists()
    r = run([CHELL, "tier", "stat", killed[0].pid])
    assert r.returncode == 1 and b"is gone" in r.stderr, r.stderr
    assert not (STAT_DIR / f"chell-tierheap.{killed[0].pid}").exists()
    listed = run([CHELL, "tier", "stat"])
    assert listed.returncode == 0, listed.stderr
    assert not (STAT_DIR / f"chell-tierheap.{killed[1].pid}").exists()


# ---------------------------------------------------------------- memory cgroup

MEMCG_V1 = Path("/sys/fs/cgroup/memory")
MEMCG_V2 = Path("/sys/fs/cgroup")


class MemCgroup:
    """A fresh memory cgroup with a limit (v1 memory controller, else v2)."""

    def __init__(self, name, limit):
        if (MEMCG_V1 / "memory.limit_in_bytes").exists():
            self.path = MEMCG_V1 / name
            self.path.mkdir()
            (self.path / "memory.limit_in_bytes").write_text(f"{limit}\n")
            try:
                (self.path / "memory.swappiness").write_text("0\n")
            except OSError:
                pass
        else:
            self.path = MEMCG_V2 / name
            self.path.mkdir()
            (self.path / "memory.max").write_text(f"{limit}\n")
            (self.path / "memory.swap.max").write_text("0\n")

    def enter(self):
        (self.path / "cgroup.procs").write_text(f"{os.getpid()}\n")

    def remove(self):
        for _ in range(40):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.25)


def memcg_usable():
    if os.geteuid() != 0:
        return False
    if (MEMCG_V1 / "memory.limit_in_bytes").exists():
        return os.access(MEMCG_V1, os.W_OK)
    ctl = MEMCG_V2 / "cgroup.subtree_control"
    return ctl.exists() and "memory" in ctl.read_text()


@pytest.mark.skipif(not memcg_usable(), reason="needs root and a memory cgroup controller")
def test_twice_the_cgroup_limit_completes_under_revert():
    """A 256 MiB working set under a 128 MiB memory cgroup: OOM-killed on the
    bare kernel (no swap); under `chell tier run --policy revert` the slow
    tier's pages were allocated by the launcher outside the cgroup, so the
    program completes with the same result as an unlimited run. The DRAM
    budget is `auto`: 3/4 of the cgroup's limit, read by the program."""
    want = run([PROGS / "tierheap_ws", 256, 2], env=clean_env())
    assert want.returncode == 0
    cg = MemCgroup(f"chell-test-tierheap-{os.getpid()}", 128 * MB)
    try:
        plain = run([PROGS / "tierheap_ws", 256, 2], env=clean_env(), preexec_fn=cg.enter,
                    timeout=120)
        assert plain.returncode in (-9, 137), ("not OOM-killed plainly", plain.returncode)
        p, stat, anon, line = start_paused(
            [CHELL, "tier", "run", "--policy", "revert", "--slow-size", "512M",
             "--cgroup", cg.path, "--", PROGS / "tierheap_ws", 256, 2])
        try:
            assert stat["dram_budget"] == 96 * MB, stat
            assert stat["dram_peak"] - stat["metadata_bytes"] <= 96 * MB, stat
            assert stat["slow_bytes"] >= 160 * MB, stat
        finally:
            out = finish(p)
        assert line + out == want.stdout
    finally:
        cg.remove()
