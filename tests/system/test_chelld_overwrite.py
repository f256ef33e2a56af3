"""Overwrites (cache/layout.h, "Overwrites"): whole blocks a client stores
while they are invalid, then OVERWRITE has the manager validate them and
mark them dirty, without reading them from the backing file. Driven by the
scripted client; READY/GO files order the steps of two processes, so the
races are forced, not hoped for.
"""
import subprocess
import time

from test_chelld import CLIENT, client
from test_chelld_data import CHUNK, data, ok, small, stats  # noqa: F401 (fixture)


def wait_for(path):
    for _ in range(2000):
        if path.exists():
            return
        time.sleep(0.005)
    raise AssertionError(f"{path} never appeared")


def test_an_overwrite_reads_nothing_and_reaches_the_backing_file(small):
    small["serve"]()
    f = small["back"] / "f"
    orig = data(CHUNK, 1)
    f.write_bytes(orig)
    p = small["dir"] / "p"
    new = data(3 * 4096, 2)
    p.write_bytes(new)
    got = small["dir"] / "got"
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:rw", f"overwrite:last:{8 * 4096}:{p}",
                        "state:last:0", "stats", f"read:last:{7 * 4096}:{5 * 4096}:{got}",
                        "flush:last", "check")
    ok(out)
    assert out[2][1]["fault"] == "0"
    assert out[3][1]["valid"] == "3" and out[3][1]["dirty"] == "3"
    assert out[4][1]["fill_bytes"] == "0"  # the three blocks were never read
    # around them a read fills what it needs: old bytes, then the new ones
    assert got.read_bytes() == orig[7 * 4096:8 * 4096] + new + orig[11 * 4096:12 * 4096]
    assert f.read_bytes() == orig[:8 * 4096] + new + orig[11 * 4096:]


def test_an_overwrite_racing_a_fill_of_the_same_block_loses_neither(small):
    """A stores a block while it is invalid; before A asks OVERWRITE, B
    (another process) reads the block: the fill gives B the old bytes and
    makes the block valid, so A's OVERWRITE is refused and A redoes its
    write the normal way. B read the old bytes, the file ends with A's."""
    small["serve"]()
    f = small["back"] / "f"
    orig = data(CHUNK, 3)
    f.write_bytes(orig)
    p = small["dir"] / "p"
    new = data(4096, 4)
    p.write_bytes(new)
    ready, go, got = small["dir"] / "ready", small["dir"] / "go", small["dir"] / "got"
    a = subprocess.Popen([str(CLIENT), str(small["sock"]), "hello", f"open:{f}:rw",
                          f"overwrite:last:{5 * 4096}:{p}:{ready}:{go}", "flush:last"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(ready)  # A's bytes are in the chunk file, the block still invalid
    rc, out, pb = client(small["sock"], "hello", f"open:{f}:ro",
                         f"read:last:{5 * 4096}:4096:{got}")
    assert rc == 0, pb.stderr
    ok(out)
    assert got.read_bytes() == orig[5 * 4096:6 * 4096]  # B: the old bytes, never A's half-done
    go.write_text("")
    o, e = a.communicate(timeout=30)
    assert a.returncode == 0, e
    lines = o.decode().splitlines()
    assert lines[2].startswith("overwrite status=EAGAIN"), lines
    assert lines[3].startswith("write status=OK"), lines  # redone as a normal write
    assert lines[4].startswith("flush status=OK"), lines
    assert f.read_bytes() == orig[:5 * 4096] + new + orig[6 * 4096:]
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:ro",
                        f"read:last:{5 * 4096}:4096:{got}", "check")
    ok(out)
    assert got.read_bytes() == new


def test_an_overwrite_into_an_evicted_chunk_file_is_refused_and_redone(small):
    """A's stores go to a chunk file that is evicted before A asks
    OVERWRITE (B's chunk needs the whole two-megabyte pool): the (slot,
    incarnation) check refuses, and the redo writes into the new chunk."""
    small["serve"]("--size", "2M")
    f, g = small["back"] / "f", small["back"] / "g"
    orig = data(CHUNK, 5)
    f.write_bytes(orig)
    g.write_bytes(data(CHUNK, 6))
    p = small["dir"] / "p"
    new = data(2 * 4096, 7)
    p.write_bytes(new)
    ready, go = small["dir"] / "ready", small["dir"] / "go"
    a = subprocess.Popen([str(CLIENT), str(small["sock"]), "hello", f"open:{f}:rw",
                          f"overwrite:last:{100 * 4096}:{p}:{ready}:{go}", "flush:last"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(ready)
    rc, out, pb = client(small["sock"], "hello", f"open:{g}:ro", "map:last:0:r:0:512", "stats")
    ok(out)
    assert int(out[-1][1]["evictions"]) >= 1  # A's chunk went for it
    go.write_text("")
    o, e = a.communicate(timeout=30)
    assert a.returncode == 0, e
    lines = o.decode().splitlines()
    assert lines[2].startswith("overwrite status=EAGAIN"), lines
    assert lines[3].startswith("write status=OK") and lines[4].startswith("flush status=OK")
    assert f.read_bytes() == orig[:100 * 4096] + new + orig[102 * 4096:]


def test_overwrites_are_refused_without_write_access_or_on_bad_ranges(small):
    small["serve"]()
    f = small["back"] / "f"
    f.write_bytes(data(CHUNK, 8))
    p = small["dir"] / "p"
    p.write_bytes(data(4096, 9))
    rc, out, _ = client(small["sock"], "hello", f"open:{f}:ro", f"overwrite:last:0:{p}", "stats")
    # a read-only registration gets no writable mapping, so no OVERWRITE either
    assert out[2][1]["status"] == "EACCES"
    assert f.read_bytes() == data(CHUNK, 8)
