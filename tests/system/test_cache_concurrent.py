"""Eight cache-mode clients at once against one chelld (issue 13, item 1):
misses, fills, evictions and write-back of different clients in flight
together, on private and shared files, and the final bytes compared with
the same eight programs run on the bare kernel.

Each client owns a private file (reads, writes, truncates, fsyncs) and a
stripe of each of two shared files (64 KB units u with u % 8 == its index):
it writes only its own stripes, reads anything (reads spanning chunk
boundaries ask for neighbouring chunks in one batched MAP), and checks
every byte it reads of what it owns against its own model. Writes are
disjoint, so the final contents do not depend on the interleaving: the
kernel's run is the oracle. The pool (8M) is a fraction of the 36 MB of
files, so chunks are evicted and revoked under the clients all the time.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import BACKING_ROOT, CHELL, fresh_manager, run

CLIENTS = 8
PRIVATE = 3 << 20
SHARED = 6 << 20
UNIT = 64 << 10

WORKER = r"""
import os, random, sys, time
me, d, start = int(sys.argv[1]), sys.argv[2], sys.argv[3]
N, UNIT, PRIVATE = 8, 64 << 10, 3 << 20
r = random.Random(1000 + me)
while not os.path.exists(start):  # all eight start together
    time.sleep(0.001)
priv = os.open(f"{d}/p{me}", os.O_RDWR)
shared = [os.open(f"{d}/s{j}", os.O_RDWR) for j in range(2)]
model = bytearray(os.pread(priv, PRIVATE, 0))
smodel = [bytearray(os.pread(f, 6 << 20, 0)) for f in shared]

def mine(off, n):
    # the part of [off, off+n) in my stripes, as (start, end) pieces
    out, u = [], off // UNIT
    while u * UNIT < off + n:
        if u % N == me:
            out.append((max(off, u * UNIT), min(off + n, (u + 1) * UNIT)))
        u += 1
    return out

def blob(n):
    b = bytes(r.randrange(256) for _ in range(64))
    return (b * (n // 64 + 1))[:n]

for i in range(700):
    op = r.randrange(10)
    if op < 3:  # private read
        off, n = r.randrange(0, PRIVATE + 8192), r.randrange(1, 600000)
        got = os.pread(priv, n, off)
        assert got == bytes(model[off:off + n]), ("private read", me, i, off, n)
    elif op < 5:  # private write
        off, n = r.randrange(0, PRIVATE), r.randrange(1, 300000)
        data = blob(n)
        assert os.pwrite(priv, data, off) == n
        if len(model) < off:
            model.extend(bytes(off - len(model)))
        model[off:off + n] = data
    elif op == 5:  # private truncate (shorter or longer), or fsync
        if r.randrange(2):
            size = r.randrange(PRIVATE // 2, PRIVATE + 4096)
            os.ftruncate(priv, size)
            del model[size:]
            model.extend(bytes(size - len(model)))
        else:
            os.fsync(priv)
    elif op < 8:  # shared read: anything, checked where it is mine
        j = r.randrange(2)
        off, n = r.randrange(0, 6 << 20), r.randrange(1, 5 << 20)
        got = os.pread(shared[j], n, off)
        assert len(got) == min(n, (6 << 20) - off), ("short shared read", me, i)
        for a, b in mine(off, len(got)):
            assert got[a - off:b - off] == bytes(smodel[j][a:b]), ("shared read", me, i, j, a, b)
    else:  # shared write into my stripes only
        j = r.randrange(2)
        u = r.randrange(0, (6 << 20) // UNIT // N) * N + me
        a = u * UNIT + r.randrange(0, UNIT)
        b = min(u * UNIT + UNIT, a + r.randrange(1, UNIT))
        data = blob(b - a)
        assert os.pwrite(shared[j], data, a) == b - a
        smodel[j][a:b] = data
os.close(priv)
for f in shared:
    os.close(f)
print("ok", me)
"""


def initial_files(d):
    """The starting contents, the same in both runs."""
    for i in range(CLIENTS):
        (d / f"p{i}").write_bytes(bytes((k * 7 + i) % 251 for k in range(PRIVATE)))
    for j in range(2):
        (d / f"s{j}").write_bytes(bytes((k * 13 + j) % 253 for k in range(SHARED)))


def run_clients(argv_of, d, script):
    start = d.parent / (d.name + ".start")
    procs = [subprocess.Popen(argv_of([sys.executable, script, str(i), str(d), str(start)]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(CLIENTS)]
    try:
        time.sleep(0.5)  # let every interpreter reach its start line
        start.write_text("go\n")
        outs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        start.unlink(missing_ok=True)
    for i, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and out == f"ok {i}\n".encode(), (i, err.decode(errors="replace")[-3000:])


@pytest.mark.parametrize("policy", ["lru", "blocks", "arc"])
def test_eight_clients_with_misses_in_flight_match_the_kernel(tmp_path, monkeypatch, policy):
    """Under each replacement: whole chunks (lru, arc), and 64 KB groups
    (blocks: chunks shrunk to their hot groups under the clients)."""
    monkeypatch.setenv("CHELL_CACHE_POLICY", policy)  # read by `chell cache start`
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    plain = Path(tempfile.mkdtemp(prefix="chell-conc-plain-", dir=BACKING_ROOT))
    try:
        initial_files(plain)
        run_clients(lambda argv: argv, plain, script)
        with fresh_manager() as m:
            d = Path(tempfile.mkdtemp(prefix="conc-", dir=m.backing))
            initial_files(d)
            try:
                run_clients(lambda argv: m.cmd(argv), d, script)
            except AssertionError as e:  # with what the manager logged
                log = (Path(m.pool) / "chelld.log").read_text(errors="replace")
                raise AssertionError(f"{e}\n--- chelld.log (end) ---\n{log[-4000:]}") from None
            st = run([CHELL, "cache", "stat", "--pool", m.pool, "--json"])
            stats = json.loads(st.stdout)
            m.flush()
            names = sorted(p.name for p in plain.iterdir())
            assert names == sorted(p.name for p in d.iterdir())
            diverged = [n for n in names if (plain / n).read_bytes() != (d / n).read_bytes()]
            assert diverged == [], f"{len(diverged)} file(s) differ from the kernel's: {diverged}"
            # the workload did what it is for: misses through one manager,
            # evictions under the clients, batched neighbouring misses
            assert stats["workers"] > 1
            assert stats["fills"] > 100 and stats["evictions"] > 0, stats
            assert stats["map_batches"] > 0, stats
            assert stats["policy"] == policy and (policy != "blocks" or stats["shrinks"] > 0), stats
            print(f"fills {stats['fills']}, evictions {stats['evictions']}, "
                  f"at most {stats['fills_inflight_max']} fills at once, "
                  f"{stats['map_batches']} batched misses, policy {stats['policy']}, "
                  f"{stats['shrinks']} chunks shrunk to their hot groups")
    finally:
        shutil.rmtree(plain, ignore_errors=True)
