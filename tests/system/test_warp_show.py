"""`chell warp show FILE` (src/cli/cmd_warp.c): what WARP remembers of a
file in its patterns file - each stored node's state and successor, and the
file's cross-file tuples - stored here through the library's own calls
(tests/progs/warp_patterns_store.c, as the warp handler does at a
checkpoint). Also: nothing stored, a damaged file (exit 1 naming the field,
the file left alone; the library's next open warns once and rebuilds it),
usage errors, and the warp.patterns setting when this build has it.
"""
import json
import os
import re

import pytest

from conftest import CHELL, PROGS, run

STORE = PROGS / "warp_patterns_store"


def store(pat, f, states, succ, *tuples):
    r = run([STORE, pat, f, ",".join(states), ",".join(succ), *tuples])
    assert r.returncode == 0, r.stderr.decode()
    return r


def show(*args, env=None):
    return run([CHELL, "warp", "show", *args], env=env)


@pytest.fixture
def files(workdir):
    a, b = workdir / "a.dat", workdir / "b.dat"
    a.write_bytes(b"a" * 100)
    b.write_bytes(b"b" * 100)
    return workdir / "patterns", a, b


def test_show_text_and_json(files):
    pat, a, b = files
    store(pat, a, ["mapped", "mapped", "buffered", "normal", "mapped"], ["1", "2", "-", "0", "4"],
          f"0x1234,{b},3", f"77,{a},0")
    r = show("--patterns", pat, a)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    st = os.stat(a)
    assert f"file {a} (device {st.st_dev}, inode {st.st_ino}) in {pat}" in out
    assert "5 nodes stored" in out
    rows = re.findall(r"^(\d+)\s+(normal|mapped|buffered)\s+(\S+)$", out, re.M)
    assert rows == [("0", "mapped", "1"), ("1", "mapped", "2"), ("2", "buffered", "-"),
                    ("3", "normal", "0"), ("4", "mapped", "4")]
    sb = os.stat(b)
    assert re.search(rf"^0x0000000000001234\s+{sb.st_dev}:{sb.st_ino}\s+3\s+\d+$", out, re.M), out
    assert re.search(rf"^0x000000000000004d\s+{st.st_dev}:{st.st_ino}\s+0\s+0$", out, re.M), out

    j = json.loads(show("--json", "--patterns", pat, a).stdout)
    assert j["stored"] is True and j["ino"] == st.st_ino and j["dev"] == st.st_dev
    assert [(n["node"], n["state"], n["successor"]) for n in j["nodes"]] == [
        (0, "mapped", 1), (1, "mapped", 2), (2, "buffered", None), (3, "normal", 0), (4, "mapped", 4)]
    t = {x["context"]: x for x in j["tuples"]}
    assert t["0x0000000000001234"]["ino"] == sb.st_ino and t["0x0000000000001234"]["hint_node"] == 3
    assert t["0x000000000000004d"]["ino"] == st.st_ino and t["0x000000000000004d"]["age"] == 0

    # A later store replaces the file's patterns; option after FILE works too.
    store(pat, a, ["buffered"], ["-"])
    j = json.loads(show(a, "--patterns", pat, "--json").stdout)
    assert [(n["state"], n["successor"]) for n in j["nodes"]] == [("buffered", None)]
    assert j["tuples"] == []
    assert "no cross-file tuples" in show("--patterns", pat, a).stdout.decode()


def test_nothing_stored(files):
    pat, a, b = files
    store(pat, a, ["mapped"], ["-"])
    r = show("--patterns", pat, b)
    assert r.returncode == 0 and "no patterns stored" in r.stdout.decode()
    assert json.loads(show("--json", "--patterns", pat, b).stdout)["stored"] is False


def test_damaged_file(files):
    pat, a, b = files
    store(pat, a, ["mapped", "mapped"], ["1", "-"])
    data = bytearray(pat.read_bytes())
    magic = data.index(b"WARPPAT1")
    data[magic + 64 + 192] ^= 0x01  # first entry's first state: its CRC no longer matches
    pat.write_bytes(bytes(data))
    r = show("--patterns", pat, a)
    assert r.returncode == 1, r
    assert f"patterns file {pat}: entry[0].crc" in r.stderr.decode()
    assert pat.read_bytes() == bytes(data)  # only read
    # The library ignores it with one warning naming file and field, rebuilds.
    r = store(pat, b, ["normal"], ["-"])
    warnings = [l for l in r.stderr.decode().splitlines() if "warning" in l]
    assert len(warnings) == 1 and str(pat) in warnings[0] and "entry[0].crc" in warnings[0], warnings
    assert json.loads(show("--json", "--patterns", pat, a).stdout)["stored"] is False
    assert json.loads(show("--json", "--patterns", pat, b).stdout)["stored"] is True
    # Not a patterns file at all.
    (pat.parent / "foreign").write_text("hello\n" * 1000)
    r = show("--patterns", pat.parent / "foreign", a)
    assert r.returncode == 1 and "not a Chell region" in r.stderr.decode()


def test_usage(files):
    pat, a, b = files
    r = run([CHELL, "warp", "--help"])
    assert r.returncode == 0 and b"chell warp show" in r.stdout
    r = show("--help")
    assert r.returncode == 0 and b"--patterns PATH" in r.stdout
    assert b"warp" in run([CHELL, "--help"]).stdout
    assert run([CHELL, "warp"]).returncode == 2
    assert run([CHELL, "warp", "frob"]).returncode == 2
    assert show("--patterns", pat).returncode == 2                 # no FILE
    assert show("--patterns", pat, a, b).returncode == 2           # two FILEs
    assert show("--bogus", a).returncode == 2
    assert show("--patterns", pat, a.parent / "missing").returncode == 2
    assert show("--patterns", pat.parent / "missing", a).returncode == 2


def test_patterns_setting(files):
    keys = json.loads(run([CHELL, "config", "--keys", "--json"]).stdout)
    key = next((k for k in keys if k["key"] == "warp.patterns"), None)
    assert key is not None, "the registry has no warp.patterns setting"
    pat, a, b = files
    store(pat, a, ["mapped"], ["-"])
    env = dict(os.environ)
    env[key["env"]] = str(pat)
    r = show(a, env=env)
    assert r.returncode == 0 and "1 nodes stored" in r.stdout.decode(), r.stderr.decode()
    env[key["env"]] = ""
    assert show(a, env=env).returncode == 2
