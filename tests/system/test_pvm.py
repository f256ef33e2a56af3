"""pVM, the persistent object store (docs/PVM.md): the `chell pvm` commands,
the power-failure simulation over object-store transactions, SIGKILL of
writers sharing a pool, and a damaged application.

Scale: CHELL_PVM_KILLS (default 1000 kills; 100 when CI is set) and
CHELL_PVM_CRASH_OPS (default 2200 operations: over 10,000 crash points).
"""
import json
import os
import re
import shlex
import struct

import pytest

from conftest import CHELL, PROGS, run

CRASH = PROGS / "chell_pvm_crash"
KILLER = PROGS / "chell_pvm_killer"
KILLS = int(os.environ.get("CHELL_PVM_KILLS", "100" if os.environ.get("CI") else "1000"))
CRASH_OPS = int(os.environ.get("CHELL_PVM_CRASH_OPS", "2200"))
SUBS = ["stat", "ls", "cat", "put", "rm", "history", "check", "import", "export"]


@pytest.fixture
def pool(tmp_path):
    # The pool lives on tmpfs, like a real one; tmp_path holds the trees.
    p = f"/dev/shm/chell_test_pvm.{os.getpid()}.{tmp_path.name}.pool"
    yield p
    for f in (p,):
        if os.path.exists(f):
            os.unlink(f)


def pvm(*args, input=None, timeout=120):
    return run([CHELL, "pvm", *map(str, args)], input=input, timeout=timeout)


# ------------------------------------------------------------ CLI


def test_help_everywhere_and_usage_errors():
    r = pvm("--help")
    assert r.returncode == 0 and b"import" in r.stdout
    for s in SUBS:
        r = pvm(s, "--help")
        assert r.returncode == 0, s
        assert r.stdout.startswith(b"Usage: chell pvm " + s.encode()), s
        assert b"Exit status" in r.stdout, s
    assert pvm().returncode == 2
    assert pvm("frobnicate").returncode == 2
    assert pvm("ls", "--pool", "/nonexistent").returncode == 2  # --app missing
    assert pvm("cat", "--app", "a").returncode == 2  # OBJECT missing
    assert pvm("stat", "--repair").returncode == 2  # not an option of stat
    assert pvm("history", "--app", "a", "--keep", "500", "x").returncode == 2


def test_put_cat_ls_rm_stat(pool, tmp_path):
    data = bytes(range(256)) * 41 + b"tail"
    src = tmp_path / "src"
    src.write_bytes(data)
    assert pvm("put", "--pool", pool, "--app", "demo", "blob", src).returncode == 0
    assert pvm("put", "--pool", pool, "--app", "demo", "from-stdin", input=b"hello\n").returncode == 0
    r = pvm("cat", "--pool", pool, "--app", "demo", "blob")
    assert r.returncode == 0 and r.stdout == data
    assert pvm("cat", "--pool", pool, "--app", "demo", "from-stdin").stdout == b"hello\n"
    # Replacing is atomic and keeps the name.
    assert pvm("put", "--pool", pool, "--app", "demo", "blob", input=b"short").returncode == 0
    assert pvm("cat", "--pool", pool, "--app", "demo", "blob").stdout == b"short"
    ls = json.loads(pvm("ls", "--pool", pool, "--app", "demo", "--json").stdout)
    assert sorted(o["name"] for o in ls) == ["blob", "from-stdin"]
    assert {o["name"]: o["size"] for o in ls} == {"blob": 5, "from-stdin": 6}
    st = json.loads(pvm("stat", "--pool", pool, "--json").stdout)
    for k in ("capacity", "size", "used", "free", "largest_free_extent", "free_extents", "fragmentation"):
        assert k in st, k
    assert st["free"] == st["size"] - st["used"] and st["largest_free_extent"] <= st["free"]
    (app,) = st["applications"]
    assert app["name"] == "demo" and app["objects"] == 2 and app["bytes"] == 11 and not app["damaged"]
    assert b"Fragmentation" in pvm("stat", "--pool", pool).stdout
    assert pvm("put", "--pool", pool, "--app", "other", "x", input=b"x").returncode == 0
    st = json.loads(pvm("stat", "--pool", pool, "--app", "other", "--json").stdout)
    assert [a["name"] for a in st["applications"]] == ["other"] and st["used"] > 0
    r = pvm("stat", "--pool", pool, "--app", "other")
    assert r.returncode == 0 and b"other" in r.stdout and b"demo" not in r.stdout
    r = pvm("stat", "--pool", pool, "--app", "nope")
    assert r.returncode == 1 and b'no application "nope"' in r.stderr
    assert pvm("rm", "--pool", pool, "--app", "other", "x").returncode == 0
    assert pvm("rm", "--pool", pool, "--app", "demo", "blob").returncode == 0
    r = pvm("rm", "--pool", pool, "--app", "demo", "blob")
    assert r.returncode == 1 and b"blob" in r.stderr
    assert pvm("cat", "--pool", pool, "--app", "demo", "blob").returncode == 1
    assert pvm("ls", "--pool", pool, "--app", "nobody").returncode == 1
    r = pvm("check", "--pool", pool, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True


def test_pool_setting_is_the_default(pool):
    env = dict(os.environ, CHELL_PVM_POOL=pool)
    r = run([CHELL, "pvm", "put", "--app", "a", "x"], input=b"via setting", env=env)
    assert r.returncode == 0, r.stderr
    assert os.path.exists(pool)
    assert pvm("cat", "--pool", pool, "--app", "a", "x").stdout == b"via setting"


def test_history_keep_list_restore(pool):
    base = ["--pool", pool, "--app", "h"]
    assert pvm("put", *base, "doc", input=b"one").returncode == 0
    assert pvm("history", *base, "--keep", "2", "doc").returncode == 0
    for v in (b"two", b"three", b"four"):
        assert pvm("put", *base, "doc", input=v).returncode == 0
    h = json.loads(pvm("history", *base, "--json", "doc").stdout)
    assert h["keep"] == 2 and h["version"] == 4
    assert [k["version"] for k in h["kept"]] == [3, 2]  # N = 2: version 1 dropped
    assert pvm("history", *base, "--restore", "1", "doc").returncode == 1
    assert pvm("history", *base, "--restore", "2", "doc").returncode == 0
    assert pvm("cat", *base, "doc").stdout == b"two"


def test_import_export_round_trip_of_a_real_tree(pool, tmp_path):
    # A real tree: documentation files of several packages, nested, small
    # and large, plus an empty file and names with spaces.
    tree = tmp_path / "tree"
    import shutil
    n = 0
    for d in sorted(os.listdir("/usr/share/doc"))[:40]:
        s = os.path.join("/usr/share/doc", d)
        if os.path.isdir(s) and not os.path.islink(s):
            shutil.copytree(s, tree / d, symlinks=True, ignore_dangling_symlinks=True)
            n += 1
    (tree / "with space").mkdir(parents=True)
    (tree / "with space" / "empty file").write_bytes(b"")
    (tree / "big.bin").write_bytes(os.urandom(3 << 20))
    files = {}
    for root, dirs, fs in os.walk(tree):
        for f in fs:
            p = os.path.join(root, f)
            if os.path.isfile(p) and not os.path.islink(p):
                files[os.path.relpath(p, tree)] = open(p, "rb").read()
    assert len(files) > 20
    r = pvm("import", "--pool", pool, "--app", "tree", tree)
    links = [p for p in tree.rglob("*") if p.is_symlink()]
    assert r.returncode == (1 if links else 0), r.stderr
    assert f"imported {len(files)} files".encode() in r.stderr
    # Progress on a non-terminal: plain percentage lines.
    assert re.search(rb"^\s+\d+%\s+\d+/\d+ files$", r.stderr, re.M), r.stderr
    out = tmp_path / "out"
    r = pvm("export", "--pool", pool, "--app", "tree", out)
    assert r.returncode == 0, r.stderr
    got = {}
    for root, dirs, fs in os.walk(out):
        for f in fs:
            p = os.path.join(root, f)
            got[os.path.relpath(p, out)] = open(p, "rb").read()
    assert got.keys() == files.keys()
    for k in files:
        assert got[k] == files[k], k
    assert pvm("check", "--pool", pool).returncode == 0


def test_export_refuses_names_leaving_dest(pool, tmp_path):
    assert pvm("put", "--pool", pool, "--app", "evil", "../escape", input=b"x").returncode == 0
    assert pvm("put", "--pool", pool, "--app", "evil", "ok/file", input=b"y").returncode == 0
    r = pvm("export", "--pool", pool, "--app", "evil", tmp_path / "dest")
    assert r.returncode == 1 and b"../escape" in r.stderr
    assert not (tmp_path / "escape").exists()
    assert (tmp_path / "dest" / "ok" / "file").read_bytes() == b"y"


def test_damaged_application_is_refused_others_stay_usable(pool):
    assert pvm("put", "--pool", pool, "--app", "good", "fine", input=b"fine").returncode == 0
    assert pvm("put", "--pool", pool, "--app", "bad", "victim", input=b"v" * 100).returncode == 0
    # The object descriptor: name at byte 64, size at byte 16.
    img = bytearray(open(pool, "rb").read())
    at = img.find(b"victim\0")
    assert at > 64
    img[at - 64 + 16: at - 64 + 24] = struct.pack("<Q", 1 << 40)
    open(pool, "r+b").write(img)
    r = pvm("ls", "--pool", pool, "--app", "bad")
    assert r.returncode == 1
    assert b'object table slot' in r.stderr and b"field size" in r.stderr and b"victim" in r.stderr
    assert pvm("cat", "--pool", pool, "--app", "good", "fine").stdout == b"fine"
    assert pvm("put", "--pool", pool, "--app", "good", "more", input=b"m").returncode == 0
    r = pvm("check", "--pool", pool)
    assert r.returncode == 1 and b"field size" in r.stdout
    st = json.loads(pvm("stat", "--pool", pool, "--json").stdout)
    assert {a["name"]: a["damaged"] for a in st["applications"]} == {"good": False, "bad": True}


def test_example_two_writers_disjoint_and_shared(tmp_path):
    # examples/pvm/two_writers.c, built as a user would against the build
    # tree: two processes, each its own journal, updating an object each
    # and a shared one concurrently; nothing is lost.
    import subprocess
    from conftest import BUILD
    repo = os.path.join(os.path.dirname(__file__), "..", "..")
    exe = tmp_path / "two_writers"
    subprocess.run(["make", "-s", "-C", os.path.join(repo, "examples", "pvm"), f"CHELL={os.path.abspath(repo)}",
                    f"BUILD={BUILD}", f"OUT={exe}"], check=True)
    pool = f"/dev/shm/chell_test_pvm_demo.{os.getpid()}.pool"
    r = run([exe, pool, "3000"], timeout=120)
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr.decode()
    assert "writer 0: 3000 transactions committed" in out and "writer 1: 3000 transactions committed" in out
    assert "own-0 = 3000, own-1 = 3000, counter = 6000: ok" in out
    assert not os.path.exists(pool)


# ------------------------------------------------------------ crashes


def test_power_failure_at_every_persist_point():
    r = run([CRASH, "--ops", str(CRASH_OPS), "--seed", "7"], timeout=600)
    out = r.stdout.decode()
    m = re.search(r"(\d+) persist points checked, (\d+) crash images, (\d+) violations", out)
    assert r.returncode == 0 and m and int(m.group(3)) == 0, out
    if CRASH_OPS >= 2200:
        assert int(m.group(1)) >= 10000, out


def test_broken_variant_is_caught_and_reproduced():
    r = run([CRASH, "--ops", "300", "--break", "missing-undo", "--show", "1"], timeout=300)
    out = r.stdout.decode()
    assert r.returncode == 1 and "violation at point" in out, out
    m = re.search(r"(\d+) violations", out)
    assert int(m.group(1)) > 0
    line = re.search(r"reproduce: (chell_pvm_crash .*)$", out, re.M).group(1)
    r2 = run([CRASH, *shlex.split(line)[1:]], timeout=300)
    assert r2.returncode == 1 and "violation at point" in r2.stdout.decode()


def test_sigkill_of_writers_sharing_a_pool(pool):
    r = run([KILLER, "--pool", pool, "--kills", str(KILLS), "--writers", "3", "--check-every", "50"], timeout=900)
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr.decode()
    m = re.search(r"(\d+) kills, 3 writers, (\d+) checks, (\d+) committed transactions, no violation", out)
    assert m and int(m.group(1)) == KILLS and int(m.group(3)) > KILLS, out
    # The killer removes its pool and acknowledgement files itself.
    assert not os.path.exists(pool)
    for w in range(3):
        assert not os.path.exists(f"{pool}.ack{w}"), w


def test_shared_library_exports_the_header_calls_only():
    import subprocess
    from conftest import BUILD
    lib = BUILD / "lib" / "libchell-pvm.so"
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    exported = {l.split()[-1] for l in out.splitlines() if l.split()[-1].startswith("pvm_")}
    header = open(os.path.join(os.path.dirname(__file__), "..", "..", "include", "chell", "pvm.h")).read()
    declared = set(re.findall(r"^\w[\w ]*?\**(pvm_\w+)\(", header, re.M))
    assert exported == declared
    others = [l.split()[-1] for l in out.splitlines() if not l.split()[-1].startswith("pvm_")
              and l.split()[1] in "TDB"]
    assert not others, others
