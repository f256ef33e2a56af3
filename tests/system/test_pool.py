"""`chell pool create|check|info`: persistent regions from the command line.

Every damaged file is made from a real region by changing bytes on disk, and
every verdict is checked three ways: the exit status, the plain-words
message, and the --json document. Images with unfinished transactions come
from build/bin/chell_pool_image (tests/fuzz/make_image.c), which leaves them
exactly as a process killed mid-transaction would.
"""
import json
import os
import re

import pytest

from conftest import CHELL, PROGS, run

POOL_IMAGE = PROGS / "chell_pool_image"
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def pool(*args):
    return run([CHELL, "pool", *args], text=True)


def check_json(path, *extra):
    r = pool("check", "--json", *extra, path)
    doc = json.loads(r.stdout)  # must be valid JSON whatever the verdict
    assert doc["path"] == str(path)
    assert isinstance(doc["ok"], bool) and isinstance(doc["problems"], list)
    assert isinstance(doc["unfinished_transactions"], int)
    return r, doc


def info_json(path):
    r = pool("info", "--json", path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture
def region(workdir):
    path = workdir / "region.pool"
    r = pool("create", "--journals", "3", "--entries", "64", "--size", "64K", path)
    assert r.returncode == 0, r.stderr
    return path


def test_help_everywhere():
    for args in (["pool", "--help"], ["help", "pool"], ["pool", "create", "--help"],
                 ["pool", "check", "--help"], ["pool", "info", "--help"]):
        r = run([CHELL, *args], text=True)
        assert r.returncode == 0, (args, r.stderr)
        assert r.stdout.startswith("Usage: chell pool"), args
    top = run([CHELL, "--help"], text=True)
    assert re.search(r"^\s+pool\s", top.stdout, re.M)


@pytest.mark.parametrize("args,needle", [
    ([], "Usage"),
    (["frobnicate", "x"], "unknown subcommand"),
    (["create"], "no region file"),
    (["check"], "no region file"),
    (["info", "a", "b"], "unexpected argument"),
    (["create", "--journals", "0", "p"], "--journals"),
    (["create", "--entries", "x", "p"], "--entries"),
    (["create", "--size", "12Q", "p"], "--size"),
    (["check", "--bogus", "p"], "--bogus"),
])
def test_usage_errors_exit_2(workdir, args, needle):
    r = run([CHELL, "pool", *args], text=True, cwd=workdir)
    assert r.returncode == 2
    assert needle in r.stderr
    assert not (workdir / "p").exists()


def test_create_info_check(region):
    size = region.stat().st_size
    info = info_json(region)
    assert UUID_RE.match(info["uuid"])
    assert (info["journals"], info["journal_entries"]) == (3, 64)
    assert info["heap_size"] >= 64 * 1024
    assert info["file_size"] == size
    # heap, journals and superblock lie inside the file, without overlap
    assert info["heap_offset"] + info["heap_size"] <= size
    assert info["journal_offset"] + 3 * info["journal_size"] <= info["heap_offset"]

    text = pool("info", region)
    assert text.returncode == 0
    assert info["uuid"] in text.stdout and "3 client journals" in text.stdout

    r, doc = check_json(region)
    assert r.returncode == 0
    assert doc == {"path": str(region), "ok": True, "problems": [], "unfinished_transactions": 0}
    plain = pool("check", region)
    assert plain.returncode == 0 and "ok" in plain.stdout


def test_create_never_overwrites(region):
    before = region.read_bytes()
    r = pool("create", region)
    assert r.returncode == 1
    assert "exists" in r.stderr
    assert region.read_bytes() == before


def test_two_regions_have_different_uuids(workdir):
    a, b = workdir / "a", workdir / "b"
    for p in (a, b):
        assert pool("create", "--size", "4K", p).returncode == 0
    assert info_json(a)["uuid"] != info_json(b)["uuid"]


def test_missing_file_is_unreadable_exit_2(workdir):
    r = pool("check", workdir / "nope")
    assert r.returncode == 2
    assert "nope" in r.stderr
    assert pool("info", workdir / "nope").returncode == 2


def damaged(region, off, mask=0x40):
    data = bytearray(region.read_bytes())
    data[off] ^= mask
    region.write_bytes(bytes(data))
    return bytes(data)


def test_superblock_byte_corrupted(region):
    # byte 200: reserved part of the superblock, covered only by its CRC
    image = damaged(region, 200)
    r = pool("check", region)
    assert r.returncode == 1
    assert re.search(r"superblock.*checksum|checksum.*superblock", r.stdout, re.I), r.stdout
    r, doc = check_json(region)
    assert r.returncode == 1 and doc["ok"] is False
    assert any("checksum" in p for p in doc["problems"])
    assert region.read_bytes() == image  # check changed nothing
    info = pool("info", region)
    assert info.returncode == 1 and "checksum" in info.stderr


def test_truncated_file(region):
    size = region.stat().st_size
    os.truncate(region, size - 4096)
    r = pool("check", region)
    assert r.returncode == 1
    assert "size" in r.stdout, r.stdout
    assert str(size - 4096) in r.stdout or str(size) in r.stdout, r.stdout
    r, doc = check_json(region)
    assert r.returncode == 1 and not doc["ok"] and doc["problems"]


def test_not_a_region(workdir):
    path = workdir / "notes.txt"
    path.write_text("these are not the bytes you are looking for\n" * 200)
    r = pool("check", path)
    assert r.returncode == 1
    assert "magic" in r.stdout, r.stdout
    r, doc = check_json(path)
    assert r.returncode == 1 and any("magic" in p for p in doc["problems"])


def test_repair_refuses_corrupt_superblock(region):
    image = damaged(region, 200)
    r = pool("check", "--repair", region)
    assert r.returncode == 1
    assert "refusing to repair" in r.stderr and "checksum" in r.stderr
    assert region.read_bytes() == image
    r, doc = check_json(region, "--repair")
    assert r.returncode == 1 and doc["repair"]["result"] == "refused"
    assert "checksum" in doc["repair"]["reason"]


def test_repair_not_needed_on_clean_region(region):
    image = region.read_bytes()
    r, doc = check_json(region, "--repair")
    assert r.returncode == 0 and doc["repair"]["result"] == "not needed"
    assert region.read_bytes() == image


def test_repair_rolls_back_unfinished_transactions(workdir):
    path = workdir / "crashed.pool"
    made = run([POOL_IMAGE, path, "--journals", "3", "--entries", "16", "--size", "8192",
                "--committed", "20", "--unfinished", "2", "--seed", "11"], text=True)
    assert made.returncode == 0, made.stderr
    crash = json.loads(made.stdout)
    heap_off = info_json(path)["heap_offset"]

    def heap_bytes(t):
        data = path.read_bytes()
        return data[heap_off + t["offset"]:heap_off + t["offset"] + t["length"]].hex()

    # What the crash left: the new bytes are in the file, undo entries say how to go back.
    for t in crash["unfinished"]:
        assert heap_bytes(t) == t["after"]
    image = path.read_bytes()
    r, doc = check_json(path)
    assert doc["unfinished_transactions"] == 2
    assert "2 unfinished transactions" in pool("check", path).stdout
    assert path.read_bytes() == image  # check (and info) recover nothing

    r = pool("check", "--repair", path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rolled back 2 unfinished transactions" in r.stdout
    for t in crash["unfinished"]:
        assert heap_bytes(t) == t["before"]
    r, doc = check_json(path)
    assert r.returncode == 0 and doc["ok"] and doc["unfinished_transactions"] == 0
