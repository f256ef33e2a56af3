"""WARP mode (docs/WARP.md): the kernel is the oracle.

- Every sem_* transcript under `--mode warp`: as it is, with node states
  flipped at random points (warp.test_flip) on small nodes, and with the
  buffer used regardless of outside processes (warp.outside=trust).
- Real programs (cp, cat, sort, tar, sqlite3, python3) produce byte-identical
  files under warp and plainly.
- The shadow differential: chell_randops under `--mode shadow
  --shadow-under-test warp`, with forced state changes at random points,
  forks, exec, threads, several processes and truncation by path from
  other processes; every operation compared with the kernel
  (CHELL_WARP_RANDOPS_OPS operations in total, 200,000 by default).
- A process outside Chell sees a buffered write at its own open.
- SIGKILLed writers with a DRAM buffer: every fsync'd byte is there after.
"""
import hashlib
import json
import os
import random
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import CHELL, PROGS, SEM_PROGS, chell_cmd, run
from test_randops import SUMMARY, randops_argv

TIMEOUT = 120
BASE_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": os.environ.get("HOME", "/root"),
    "LC_ALL": "C",
    "TZ": "UTC",
}

# Small nodes, so the files of the tests have many, and a state change at
# about one node access in twenty.
FLIP = ["--set", "warp.node_size=16K", "--set", "warp.test_flip=50000"]
CONFIGS = {
    "warp": [],
    "warp-flip": FLIP,
    "warp-trust-flip": FLIP + ["--set", "warp.outside=trust"],
}


def prog(name):
    p = PROGS / name
    if not p.exists():
        pytest.fail(f"{p} is not built (tests/progs/CMakeLists.txt)")
    return p


def load_stats(d):
    return [json.loads(p.read_text()) for p in sorted(Path(d).glob("stats.*.json"))]


def total(stats, key):
    return sum(s.get(key, 0) for s in stats)


def describe(res):
    return (f"exit status {res.returncode}\n--- stdout ---\n"
            + res.stdout.decode(errors="replace")[-3000:]
            + "\n--- stderr ---\n" + res.stderr.decode(errors="replace")[-3000:])


# ---------------------------------------------------------------------------
# sem transcripts
# ---------------------------------------------------------------------------

_reference = {}


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("name", SEM_PROGS)
def test_same_transcript_under_warp(name, config, workdir, request):
    if name == "sem_times" and config.endswith("flip"):
        # Known and open (docs/TESTING.md "WARP"): a background write-back
        # (checkpoint, idle reclaim) of a buffered block is a kernel write,
        # which sets mtime and ctime at write-back time, not at the
        # application's write (about 1 run in 80 shows "mtime advanced,
        # ctime advanced" after a write of 0 bytes); the plain warp config
        # checks sem_times strictly.
        request.applymarker(pytest.mark.xfail(reason="open: a background write-back publishes mtime/ctime "
                                              "(docs/TESTING.md)", strict=False))
    if name not in _reference:
        d = workdir / "ref"
        d.mkdir()
        res = run([prog(name), d], env=dict(BASE_ENV), timeout=TIMEOUT)
        assert res.returncode == 0, describe(res)
        _reference[name] = res
    ref = _reference[name]
    d = workdir / "warp"
    d.mkdir()
    got = run(chell_cmd("warp", [d], [prog(name), d], CONFIGS[config]), env=dict(BASE_ENV),
              timeout=TIMEOUT)
    assert got.stdout == ref.stdout, describe(got)
    assert got.returncode == ref.returncode, describe(got)


# ---------------------------------------------------------------------------
# real programs
# ---------------------------------------------------------------------------

SCRIPT = r"""
set -e
cd "$1"
head -c 3000000 /dev/urandom > src.bin
seq 1 200000 | shuf --random-source=src.bin > lines.txt
cp src.bin copy.bin
cat src.bin lines.txt > cat.bin
sort -n lines.txt > sorted.txt
mkdir -p tree/sub && cp lines.txt tree/a && cp src.bin tree/sub/b
tar -cf t.tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner tree
mkdir -p untar && tar -xf t.tar -C untar
sqlite3 db.sqlite "create table t(k integer primary key, v text);
  with recursive c(x) as (select 1 union all select x+1 from c where x<20000)
  insert into t select x, hex(x*7919) from c; update t set v = v || 'z' where k % 3 = 0;
  delete from t where k % 7 = 0; vacuum;"
sqlite3 db.sqlite "select count(*), sum(length(v)) from t" > db.txt
python3 -c "
import os
with open('py.bin', 'wb') as f:
    for i in range(3000):
        f.write(os.urandom(0) + bytes([i % 251]) * (i % 700 + 1))
with open('py.bin', 'r+b') as f:
    f.seek(12345); f.write(b'x' * 70000); f.truncate(500000)
"
"""


def run_script(d, extra=None):
    argv = ["bash", "-c", SCRIPT, "script", str(d)]
    if extra is not None:
        argv = chell_cmd("warp", [d], argv, extra)
    res = run(argv, env=dict(BASE_ENV), timeout=300)
    assert res.returncode == 0, describe(res)


def digests(d):
    out = {}
    for p in sorted(d.rglob("*")):
        if p.is_file() and p.name != "src.bin":
            out[str(p.relative_to(d))] = p.read_bytes()
    return out


@pytest.mark.parametrize("config", ["warp", "warp-trust-flip"])
def test_real_programs_byte_identical(workdir, config, tmp_path):
    plain, under = workdir / "plain", workdir / "warp"
    plain.mkdir()
    under.mkdir()
    st = tmp_path / "st"
    st.mkdir()
    run_script(plain)
    # the same random source: copy the plain run's, then let the script
    # regenerate everything else from it
    script_src = SCRIPT.replace('head -c 3000000 /dev/urandom > src.bin', 'test -f src.bin')
    (under / "src.bin").write_bytes((plain / "src.bin").read_bytes())
    argv = chell_cmd("warp", [under], ["bash", "-c", script_src, "script", str(under)],
                     CONFIGS[config] + ["--set", f"stats.file={st}/stats.%p.json"])
    res = run(argv, env=dict(BASE_ENV), timeout=300)
    assert res.returncode == 0, describe(res)
    a, b = digests(plain), digests(under)
    assert sorted(a) == sorted(b)
    for k in a:
        if k == "db.sqlite":
            continue  # sqlite's file header counts changes; its content is checked by db.txt
        assert a[k] == b[k], f"{k} differs under {config}"
    stats = load_stats(st)
    assert total(stats, "writes") > 0 and total(stats, "reads") > 0
    if config == "warp-trust-flip":
        assert total(stats, "buffered_writes") > 0, "nothing was buffered"
        assert total(stats, "flips") > 0


# ---------------------------------------------------------------------------
# the shadow differential
# ---------------------------------------------------------------------------

WARP_TOTAL = int(os.environ.get("CHELL_WARP_RANDOPS_OPS", "200000"))
# (seed, chell settings, generator arguments). Trust mode buffers whatever
# the other opens are (the randops files are opened many times, which breaks
# any lease); the lease runs check the default mode's paths. Seeds whose
# sequence reaches the SEEK_DATA divergence that direct mode shows as well
# on these small files (test_direct.py, RANDOPS_RUNS) are not used, nor
# seeds whose several processes on one file make the shadow checker itself
# report a SEEK_DATA/SEEK_HOLE difference under --shadow-under-test trace
# (kernel only): 4 and 8 with the 4-process arguments below at 125,000
# operations, the per-run count of the 1,000,000-operation run.
TRUST = ["--set", "warp.outside=trust"]
WARP_RUNS = [
    (1, TRUST + FLIP, [], False),
    (3, TRUST + FLIP, [], False),
    (9, TRUST + ["--set", "warp.node_size=8K", "--set", "warp.test_flip=100000"],
     ["--files", "8", "--max-size", "64K", "--threads", "3", "--procs", "4"], False),
    (5, TRUST + FLIP, ["--max-size", "8192", "--files", "2"], False),
    (6, FLIP, [], False),
    (7, TRUST + FLIP, ["--no-fork"], False),
    # lease mode in one process (threads, exec): light files promoted to
    # the buffer file by the flips to buffered while other threads move
    # bytes of them (docs/WARP.md, "Light files")
    (8, FLIP, ["--no-fork"], False),
    # the edge classes too: byte-range locks, RWF flags, in-kernel copies,
    # limits, bad buffers, unshared tables
    (21, TRUST + FLIP, [], True),
    (22, FLIP, [], True),
]


def run_randops_warp(seed, ops, base, settings, extra, edges):
    data, shadow, stats = base / "data", base / "shadow", base / "stats"
    for p in (data, shadow, stats):
        p.mkdir(parents=True)
    argv = randops_argv(seed, ops, data, extra, edges=edges)
    cmd = chell_cmd("shadow", [data], argv,
                    ["--shadow-under-test", "warp", "--shadow-dir", str(shadow),
                     "--set", f"stats.file={stats}/stats.%p.json"] + settings)
    repro = shlex.join(["mkdir", "-p", str(data), str(shadow), str(stats)]) + " && " + \
        shlex.join(str(c) for c in cmd)
    env = dict(os.environ)
    env.pop("CHELL_SHADOW_DIR", None)
    res = run(cmd, env=env, timeout=600)
    out, err = res.stdout.decode(errors="replace"), res.stderr.decode(errors="replace")
    problems = []
    if res.returncode != 0:
        problems.append(f"exit status {res.returncode}")
    m = SUMMARY.search(out)
    if not m:
        problems.append("no summary line")
    elif (int(m.group(1)), int(m.group(3))) != (seed, ops):
        problems.append(f"not every operation ran: {m.group(0)}")
    if "DIVERGENCE" in err:
        problems.append("shadow reported a divergence")
    for p in sorted(shadow.glob("divergence*"))[:1]:
        problems.append(f"report {p.name}")
        err += f"\n--- {p.name} ---\n" + p.read_text(errors="replace")[:4000]
    if problems:
        pytest.fail(f"chell_randops under shadow/warp failed ({'; '.join(problems)})\n"
                    f"--- stderr ---\n{err[-6000:]}\nreproduce: {repro}", pytrace=False)
    return m, load_stats(stats)


def test_randops_shadow_warp(request, workdir):
    """>= CHELL_WARP_RANDOPS_OPS random operations, each checked against the
    kernel, with node states changed at random points."""
    per = max(1000, -(-WARP_TOTAL // len(WARP_RUNS)))
    done = flips = buffered = 0
    for seed, settings, extra, edges in WARP_RUNS:
        t0 = time.monotonic()
        m, stats = run_randops_warp(seed, per, workdir / f"r{seed}", settings, extra, edges)
        done += int(m.group(3))
        flips += total(stats, "flips")
        buffered += total(stats, "buffered_writes")
        assert total(stats, "reads") > 0 and total(stats, "writes") > 0, stats
        print(f"\nrandops shadow/warp: {m.group(0)} [{' '.join(settings + extra)}] "
              f"{'edges ' if edges else ''}flips={total(stats, 'flips')} buffered_writes={total(stats, 'buffered_writes')} "
              f"in {time.monotonic() - t0:.1f}s")
    print(f"randops shadow/warp: {done} operations in total")
    assert done >= WARP_TOTAL
    assert flips > 100 and buffered > 100, (flips, buffered)



def test_randops_shadow_warp_seed22_full_run(workdir):
    """Seed 22 (lease mode, forced flips, the edge classes: a thread that
    unshares its descriptor table, O_APPEND writes) at the per-run count of
    the 1,000,000-operation run, where it diverged in 2 of 11 runs before
    (about 10 of 65 in this work's repetitions): an append read the
    kernel's offset back after a hole probe of another thread or process
    had moved it (koff_lock), and warp's own descriptors were used on a
    thread whose table is private, where the numbers are other files
    (chell_fdt_private). After: 0 in 34 runs (docs/TESTING.md, "WARP")."""
    m, stats = run_randops_warp(22, 125000, workdir / "r22", FLIP, [], True)
    assert int(m.group(3)) == 125000
    assert total(stats, "flips") > 0 and total(stats, "buffered_writes") > 0, stats

# ---------------------------------------------------------------------------
# a process outside Chell
# ---------------------------------------------------------------------------

WRITER = r"""
import os, sys
path, go, back = sys.argv[1:4]
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"a" * 65536)          # grows the file; buffered (write-only opens start so)
os.pwrite(fd, b"B" * 8192, 8192)    # whole blocks into the buffer
os.pwrite(fd, b"C" * 4096, 32768)
with open(go, "w") as f:            # the outside reader may go
    f.write("go\n")
with open(back) as f:               # ... and has read the file
    f.read()
os.close(fd)
"""

READER = r"""
import sys
path, go, back = sys.argv[1:4]
with open(go) as f:
    f.read()
with open(path, "rb") as f:         # the open waits for the lease to go
    data = f.read()
sys.stdout.write(f"{data[8192:8200].decode()} {data[32768:32776].decode()} {len(data)}\n")
with open(back, "w") as f:
    f.write("done\n")
"""


def outside_read(workdir, tmp_path, settings):
    d = workdir / "data"
    d.mkdir()
    go, back, st = tmp_path / "go", tmp_path / "back", tmp_path / "st"
    os.mkfifo(go)
    os.mkfifo(back)
    st.mkdir()
    # The reader is started by the test, not under Chell: a process outside
    # Chell (Chell re-adds itself to every exec of its own children).
    reader = subprocess.Popen(["python3", "-c", READER, str(d / "f"), str(go), str(back)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(BASE_ENV))
    w = run(chell_cmd("warp", [d], ["python3", "-c", WRITER, d / "f", go, back],
                      settings + ["--set", f"stats.file={st}/stats.%p.json"]),
            env=dict(BASE_ENV), timeout=60)
    out, err = reader.communicate(timeout=60)
    assert w.returncode == 0, describe(w)
    assert reader.returncode == 0, err.decode()
    return out.decode().strip(), load_stats(st)


def test_outside_process_sees_buffered_write_at_its_open(workdir, tmp_path):
    seen, stats = outside_read(workdir, tmp_path, [])
    assert seen == "BBBBBBBB CCCCCCCC 65536"
    # the bytes were buffered, under a lease, which the reader's open broke
    assert total(stats, "buffered_writes") > 0, stats
    assert total(stats, "leases") >= 1, stats


def test_trust_mode_outside_process_may_see_old_bytes(workdir, tmp_path):
    """The control: without the lease (warp.outside=trust), the same reader
    sees what the tier has, the file grown but the buffered bytes not yet
    written back - so the test above can fail."""
    seen, stats = outside_read(workdir, tmp_path, ["--set", "warp.outside=trust",
                                                    "--set", "warp.checkpoint_ms=100000"])
    assert total(stats, "buffered_writes") > 0, stats
    assert seen != "BBBBBBBB CCCCCCCC 65536", seen


# ---------------------------------------------------------------------------
# killed writers
# ---------------------------------------------------------------------------

KILLER = PROGS / "cache_killer"
KILLS = int(os.environ.get("CHELL_WARP_KILLS", "60"))
BLOCKS = 2048


def killer(file, log, seed, stripe, settings):
    argv = [KILLER, "run", "--file", file, "--log", log, "--seed", seed, "--blocks", BLOCKS,
            "--grow", "--stripe", stripe, "--batch", random.choice([1, 4, 16])]
    argv = chell_cmd("warp", [file.parent], argv, settings)
    return subprocess.Popen([str(a) for a in argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def kill(p):
    alive = p.poll() is None
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()
    return alive


def verify(file, logs, settings=None):
    argv = [KILLER, "verify", "--file", file] + sum((["--log", l] for l in logs), [])
    if settings is not None:
        argv = chell_cmd("warp", [file.parent], argv, settings)
    r = run(argv, timeout=300)
    out = r.stdout.decode()
    assert r.returncode == 0, out[-3000:] + r.stderr.decode()
    return out


@pytest.mark.parametrize("mode", ["trust", "lease"])
def test_every_fsynced_byte_survives_killed_writers(workdir, tmp_path, mode):
    """Writers under warp with a DRAM buffer (nodes forced to buffered often)
    are SIGKILLed at random points; every acknowledged (fsync'd) block is
    checked, by the kernel alone and through warp, as the kills go on. Trust
    mode: two writers share the buffer; lease mode: one writer (a second
    open would break the lease)."""
    settings = ["--set", f"warp.outside={mode}", "--set", "warp.node_size=64K",
                "--set", "warp.test_flip=200000"]
    d = workdir / "data"
    d.mkdir()
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    file = d / "data"
    nw = 2 if mode == "trust" else 1
    logs = [logs_dir / f"w{i}.log" for i in range(nw)]
    rng = random.Random(int(os.environ.get("CHELL_WARP_SEED", "7")))
    kills = rounds = 0
    while kills < KILLS:
        rounds += 1
        ws = [killer(file, logs[i], rng.randrange(1 << 30), f"{i}/{nw}", settings) for i in range(nw)]
        time.sleep(rng.uniform(0.05, 0.3))
        for w in ws:
            time.sleep(rng.uniform(0, 0.05))
            kills += kill(w)
        for w in ws:
            err = w.stderr.read().decode()
            assert not err.strip(), err
        verify(file, logs)  # the kernel alone: every fsync'd byte is on the tier
        if rounds % 4 == 0:
            verify(file, logs, settings)  # through warp (recovers a killed buffer)
    print(f"\nwarp kill test ({mode}): {kills} kill points in {rounds} rounds")
    verify(file, logs, settings)
    verify(file, logs)
    # no buffer file is left behind once nobody uses the file
    st = os.stat(file)
    assert not Path(f"/dev/shm/chell-warp.{st.st_dev:x}.{st.st_ino}").exists()


# ---------------------------------------------------------------------------
# the model at work, and what `chell stat` shows of it
# ---------------------------------------------------------------------------

def stat_json(st):
    r = run([CHELL, "stat", "--json", *sorted(str(p) for p in Path(st).glob("stats.*.json"))], timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def test_read_write_file_gets_buffered_under_lease(workdir, tmp_path):
    """A file opened read-write (nodes start normal) and written at random
    in 4 KB pieces: under the default warp.outside=lease the checkpoints
    judge its nodes although no lease is held yet, the model picks
    buffered, the next write takes the lease and the writes go to the
    buffer. Every byte is verified by chell_filebench (it reads the file
    back). Before: no checkpoint ran without a lease, nothing was buffered."""
    st = tmp_path / "st"
    st.mkdir()
    fb = prog("chell_filebench")
    res = run(chell_cmd("warp", [workdir], [fb, "randwrite", "--dir", workdir / "f", "--seconds", "1.5",
                                            "--iosize", "4k", "--file-size", "8m"],
                        ["--set", "tier.model=pcm", "--set", f"stats.file={st}/stats.%p.json"]),
              env=dict(BASE_ENV), timeout=TIMEOUT)
    assert res.returncode == 0, describe(res)
    t = stat_json(st)["total"]
    assert t["checkpoints"] > 0, t
    assert t["leases"] >= 1, t
    assert t["buffered_writes"] > 0, t
    assert t["writeback_bytes"] > 0, t


NODE_COUNTS = r"""
import os, sys, time
fds = [os.open(os.path.join(sys.argv[1], n), os.O_RDONLY) for n in ("a", "b")]
for _ in range(40):                 # read both files for several checkpoints
    for fd in fds:
        os.pread(fd, 65536, 0)
    time.sleep(0.02)
for fd in fds:
    os.close(fd)
"""


def test_stat_counts_nodes_of_every_file_and_accuracy(workdir, tmp_path):
    """Two files of 4 nodes each, read together: `chell stat` counts the
    nodes of both (8, the sum over files of each one's last checkpoint;
    before, the last file checkpointed: 4) and derives accuracy_pct =
    accurate / accesses. (Trust mode: checkpoints ran there before too.)"""
    for n in ("a", "b"):
        (workdir / n).write_bytes(os.urandom(65536))
    st = tmp_path / "st"
    st.mkdir()
    res = run(chell_cmd("warp", [workdir], ["python3", "-c", NODE_COUNTS, workdir],
                        ["--set", "warp.node_size=16K", "--set", "warp.outside=trust",
                         "--set", f"stats.file={st}/stats.%p.json"]),
              env=dict(BASE_ENV), timeout=TIMEOUT)
    assert res.returncode == 0, describe(res)
    t = stat_json(st)["total"]
    assert t["checkpoints"] >= 2, t
    assert t["nodes_normal"] + t["nodes_mapped"] + t["nodes_buffered"] == 8, t
    assert t["accesses"] > 0
    assert t["accuracy_pct"] == round(100.0 * t["accurate"] / t["accesses"], 1), t
    text = run([CHELL, "stat", *sorted(str(p) for p in st.glob("stats.*.json"))], timeout=60).stdout.decode()
    assert "accuracy_pct" in text


CHAIN = r"""
import os, sys
d = sys.argv[1]
for n in sorted(os.listdir(d)):         # one file after the other, as grep -r
    fd = os.open(os.path.join(d, n), os.O_RDONLY)
    while os.read(fd, 1024):
        pass
    os.close(fd)
"""


def test_cross_file_chain_predicts_a_restarted_program(workdir, tmp_path):
    """40 files read one after the other (each closed before the next is
    opened, as grep -r does), twice, with warp.patterns. The first run
    cannot predict any file's first access (nothing recorded yet): 40 of
    its accesses are inaccurate. The second, from the tuples the first
    recorded (src/handlers/warp/chain.c) and stored from the queue at exit
    (learn.c), predicts every one but the very first file's. Before the
    chain was wired in, both runs had the same 40 misses."""
    d = workdir / "tree"
    d.mkdir()
    for i in range(40):
        (d / f"f{i:02d}").write_bytes(os.urandom(3000 + 100 * i))
    pat = tmp_path / "warp.patterns"
    got = []
    for r in range(2):
        st = tmp_path / f"st{r}"
        st.mkdir()
        res = run(chell_cmd("warp", [workdir], ["python3", "-c", CHAIN, d],
                            ["--set", f"warp.patterns={pat}", "--set", f"stats.file={st}/stats.%p.json"]),
                  env=dict(BASE_ENV), timeout=TIMEOUT)
        assert res.returncode == 0, describe(res)
        t = stat_json(st)["total"]
        got.append((t["accurate"], t["accesses"]))
    (first, n1), (again, n2) = got
    assert n1 == n2 and n1 >= 40 * 3, got
    assert first == n1 - 40, got
    assert again == n2 - 1, got


# ---------------------------------------------------------------------------
# Chell's own files under a routed path
# ---------------------------------------------------------------------------

def test_patterns_file_inside_the_routed_path(workdir):
    """warp.patterns lies inside the --path warp serves: the persistence
    core opens it by its libc names, and the Nib must route none of Chell's
    own files (chell_internal_files_enter) - before, the store at the last
    close opened the patterns file through warp itself, which stored
    patterns at its close ... and hung on its own lock. Two runs: the second
    loads what the first stored (and stores again); the file is Chell's,
    not one warp keeps patterns of."""
    data = workdir / "a"
    data.write_bytes(os.urandom(3 * 65536))
    pat = workdir / "warp.patterns"
    settings = ["--set", "warp.node_size=64K", "--set", f"warp.patterns={pat}"]
    for _ in range(2):
        res = run(chell_cmd("warp", [workdir], ["cat", data], settings), env=dict(BASE_ENV), timeout=60)
        assert res.returncode == 0, describe(res)
        assert res.stdout == data.read_bytes()
    show = run([CHELL, "warp", "show", "--json", "--patterns", pat, data], timeout=60)
    assert show.returncode == 0, show.stderr.decode()
    j = json.loads(show.stdout)
    assert j["stored"] and len(j["nodes"]) == 3, j
    own = run([CHELL, "warp", "show", "--json", "--patterns", pat, pat], timeout=60)
    assert own.returncode == 0 and not json.loads(own.stdout)["stored"], own.stdout.decode()



def warp_buffers():
    return {p.name for p in Path("/dev/shm").glob("chell-warp.*")}


def test_no_buffer_file_left_when_it_cannot_be_set_up(workdir):
    """sem_limits opens files under a small RLIMIT_FSIZE, where a new buffer
    file cannot be sized (the file is then served without a buffer): the
    buffer file warp created for it must not stay in /dev/shm (before: one
    was left per such open). Buffers are named by the tier file's identity,
    so a name that appears during the run and stays is this run's."""
    before = warp_buffers()
    res = run(chell_cmd("warp", [workdir], [prog("sem_limits"), workdir]), env=dict(BASE_ENV),
              timeout=TIMEOUT)
    assert res.returncode == 0, describe(res)
    left = warp_buffers() - before
    assert not left, f"buffer files left behind: {sorted(left)}"


# ---------------------------------------------------------------------------
# light files (docs/WARP.md "Light files"): no buffer file for a file a
# process opened read-only while nobody buffers it
# ---------------------------------------------------------------------------

LIGHT = r"""
import os, sys
p = sys.argv[1]
st = os.stat(p)
name = f"/dev/shm/chell-warp.{st.st_dev:x}.{st.st_ino}"
r = os.open(p, os.O_RDONLY)
a = os.pread(r, 4, 0)
light = os.path.exists(name)
w = os.open(p, os.O_RDWR)             # a writable description of the same light file
os.pwrite(w, b"ZZZZ", 8192)
b = os.pread(r, 4, 8192)
still = os.path.exists(name)
os.close(w)
os.close(r)
print(a.decode(), light, still, b.decode(), os.path.exists(name))
"""


def test_light_files_make_no_buffer_file(workdir, tmp_path):
    """Read-only and read-write opens of a file nobody buffers make no
    buffer file (they are light), and the bytes are the kernel's."""
    f = workdir / "f"
    f.write_bytes(b"A" * 65536)
    st = tmp_path / "st"
    st.mkdir()
    res = run(chell_cmd("warp", [workdir], ["python3", "-c", LIGHT, f],
                        ["--set", f"stats.file={st}/stats.%p.json"]), env=dict(BASE_ENV), timeout=TIMEOUT)
    assert res.returncode == 0, describe(res)
    assert res.stdout.decode().split() == ["AAAA", "False", "False", "ZZZZ", "False"], describe(res)
    t = stat_json(st)["total"]
    assert t["light_files"] >= 1 and t["light_promotions"] == 0, t
    assert f.read_bytes()[8192:8196] == b"ZZZZ"


FORKED = r"""
import os, random, sys, time
p, seconds = sys.argv[1], float(sys.argv[2])
size = 8 << 20
fd = os.open(p, os.O_RDWR)            # light: no buffer file exists
def writes(seed, n=None):
    rnd, t, i = random.Random(seed), time.time(), 0
    while (n is None and time.time() - t < seconds) or (n is not None and i < n):
        yield i, rnd.randrange(size // 4096) * 4096, bytes([i % 251 + 1]) * 4096
        i += 1
rd, wr = os.pipe()
pid = os.fork()
if pid == 0:                          # shares fd's description with the light parent
    n = 0
    for n, off, data in writes(1):
        os.pwrite(fd, data, off)
    os.write(wr, f"{os.getpid()} {n + 1}".encode())
    os._exit(0)
os.waitpid(pid, 0)
child, n = os.read(rd, 100).decode().split()
expect = bytearray(b"\0" * size)
for i, off, data in writes(1, int(n)):
    expect[off:off + 4096] = data
assert os.pread(fd, size, 0) == expect, "the parent does not read the child's writes"
for i, off, data in writes(2):        # alone with the description now: may be buffered
    os.pwrite(fd, data, off)
    expect[off:off + 4096] = data
assert os.pread(fd, size, 0) == expect, "the parent does not read its own writes"
os.close(fd)
print(child)
"""


def test_shared_light_description_is_not_leased(workdir, tmp_path):
    """A writable description of a light file shared by fork: the child's
    writes are not buffered (the lease needs the description's only
    descriptor, and the parent, light, would not see a buffer), and the
    parent reads every byte the child wrote; once the child is gone the
    parent's own random writes take the lease and are buffered (the rule
    refuses only while the description is shared)."""
    f = workdir / "f"
    f.write_bytes(b"\0" * (8 << 20))
    st = tmp_path / "st"
    st.mkdir()
    res = run(chell_cmd("warp", [workdir], ["python3", "-c", FORKED, f, "2"],
                        ["--set", "tier.model=pcm", "--set", f"stats.file={st}/stats.%p.json"]),
              env=dict(BASE_ENV), timeout=TIMEOUT)
    assert res.returncode == 0, describe(res)
    child = res.stdout.decode().split()[-1]
    per = {p.name.split(".")[1]: json.loads(p.read_text()) for p in st.glob("stats.*.json")}
    assert child in per, (child, sorted(per))
    c = per.pop(child)
    assert c.get("leases", 0) == 0 and c.get("buffered_writes", 0) == 0, c
    parent = [v for v in per.values() if v.get("light_files")]
    assert parent and parent[0]["leases"] >= 1 and parent[0]["buffered_writes"] > 0, per
    assert parent[0]["light_promotions"] >= 1, parent[0]


HOLDER = r"""
import hashlib, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.pread(fd, 4096, 0)
print("ready", os.getpid(), fd, flush=True)
sys.stdin.readline()                  # the writer has finished
data = b""
while len(data) < os.fstat(fd).st_size:
    data += os.pread(fd, 1 << 20, len(data))
print(hashlib.sha256(data).hexdigest(), flush=True)
"""


def randwrite_under_warp(workdir, st):
    fb = prog("chell_filebench")
    res = run(chell_cmd("warp", [workdir], [fb, "randwrite", "--dir", workdir, "--seconds", "1.5",
                                            "--iosize", "4k", "--file-size", "8m"],
                        ["--set", "tier.model=pcm", "--set", f"stats.file={st}/stats.%p.json"]),
              env=dict(BASE_ENV), timeout=TIMEOUT)
    assert res.returncode == 0, describe(res)
    return stat_json(st)["total"]


def test_light_reader_keeps_a_writer_from_buffering(workdir, tmp_path):
    """Why light files are safe: a light reader in one process holds a
    read-only description, so a writer in another process cannot take the
    lease and buffers nothing while the reader has the file open; the
    reader, which has no buffer file, reads every byte the writer wrote.
    Control: the same writer alone takes the lease and buffers (so the
    first half of the test can fail)."""
    st0 = tmp_path / "st0"
    st0.mkdir()
    alone = randwrite_under_warp(workdir, st0)
    assert alone["leases"] >= 1 and alone["buffered_writes"] > 0, alone
    assert alone["light_promotions"] >= 1, alone  # it started light: no buffer file

    f = workdir / "largefile1"           # chell_filebench's file: O_TRUNC keeps the inode
    f.write_bytes(b"\0" * (8 << 20))
    st_r = tmp_path / "st_r"
    st_r.mkdir()
    holder = subprocess.Popen(chell_cmd("warp", [workdir], ["python3", "-c", HOLDER, f],
                                        ["--set", f"stats.file={st_r}/stats.%p.json"]),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=dict(BASE_ENV))
    try:
        ready = holder.stdout.readline().split()
        assert ready[:1] == [b"ready"], ready
        # the file as the kernel has it, through the holder's descriptor
        # (chell_filebench removes its file when it is done)
        kernel_view = open(f"/proc/{int(ready[1])}/fd/{int(ready[2])}", "rb")
        st_w = tmp_path / "st_w"
        st_w.mkdir()
        t = randwrite_under_warp(workdir, st_w)
        out, err = holder.communicate(b"go\n", timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert holder.returncode == 0, err.decode()
    assert t["leases"] == 0 and t["buffered_writes"] == 0, t
    with kernel_view:
        assert out.decode().strip() == hashlib.sha256(kernel_view.read()).hexdigest()
    assert stat_json(st_r)["total"]["light_files"] >= 1


THREADED = r"""
import os, random, sys, threading, time
p, seconds = sys.argv[1], float(sys.argv[2])
size, blk = 8 << 20, 4096
fd = os.open(p, os.O_RDWR)            # light at first, one description for both threads
last = [{}, {}]

def writer(i):
    rnd, t, n = random.Random(i), time.time(), 0
    while time.time() - t < seconds:
        b = rnd.randrange(size // blk // 2) * 2 + i      # thread i owns blocks b % 2 == i
        data = (b"%d:%d;" % (i, n)) * (blk // 8)
        data = data[:blk].ljust(blk, b".")
        os.pwrite(fd, data, b * blk)
        last[i][b] = data
        n += 1
        if n % 64 == 0:                                  # and read some back meanwhile
            r = os.pread(fd, blk, b * blk)
            assert r == data, f"thread {i} block {b}: read back differs"

ts = [threading.Thread(target=writer, args=(i,)) for i in (0, 1)]
for t in ts: t.start()
for t in ts: t.join()
os.close(fd)
print(sum(len(x) for x in last))
with open(sys.argv[3], "w") as out:
    for i in (0, 1):
        for b, data in last[i].items():
            out.write(f"{b} {data[:32].decode()}\n")
"""


def test_light_file_promoted_while_threads_write(workdir, tmp_path):
    """Two threads write one description of a light file at random (pcm
    model): the model picks buffered, the file is promoted to the buffer
    file and leased while the other thread keeps writing, and every
    block's last write is what the kernel has after the close."""
    f = workdir / "f"
    f.write_bytes(b"\0" * (8 << 20))
    st, log = tmp_path / "st", tmp_path / "log"
    st.mkdir()
    res = run(chell_cmd("warp", [workdir], ["python3", "-c", THREADED, f, "2", log],
                        ["--set", "tier.model=pcm", "--set", f"stats.file={st}/stats.%p.json"]),
              env=dict(BASE_ENV), timeout=TIMEOUT)
    assert res.returncode == 0, describe(res)
    t = stat_json(st)["total"]
    assert t["light_promotions"] >= 1 and t["leases"] >= 1 and t["buffered_writes"] > 0, t
    data = f.read_bytes()
    lines = log.read_text().splitlines()
    assert lines
    for line in lines:
        b, head = line.split(" ", 1)
        got = data[int(b) * 4096:int(b) * 4096 + 32].decode(errors="replace")
        assert got == head, f"block {b}: the kernel has {got!r}, the last write was {head!r}"
