"""Two users and the cache data path: the daemon (root) hands a client a
mapping only with the access the client's own descriptor proves. A read-only
grant is a read-only mapping (a store through it faults), a user who cannot
open the file gets nothing, and nobody can open the pool's chunk files by
name. The hostile client runs as `nobody` through setpriv.
"""
import os

from test_chelld import AS_NOBODY, cache, client, run  # noqa: F401 (fixture)

CHUNK = 2 << 20


def test_read_only_grant_is_a_read_only_mapping(cache):
    pub = cache["back"] / "pub"  # 0644, 5 MB of zeros
    with open(pub, "r+b") as f:
        f.write(b"public data")
    od = cache["dir"] / "out"
    od.mkdir(mode=0o777)
    os.chmod(od, 0o777)  # nobody writes what it read here
    got = od / "got"
    rc, out, p = client(cache["sock"], "hello", f"open:{pub}:ro", "map:last:0:r:0:1",
                        f"read:last:0:11:{got}", "peek:last:0:0", "poke:last:0:0:88",
                        "map:last:0:w:0:1", "truncate:last:0", "stats", user="nobody")
    assert rc == 0, p.stderr
    assert out[2][1]["status"] == "OK" and out[2][1]["acc"] == "r"
    assert out[3][1]["status"] == "OK"
    assert out[4][1] == {"value": str(ord("p"))}
    assert out[5][1] == {"fault": "SIGSEGV"}  # the kernel refuses the store
    assert out[6][1]["status"] == "EACCES" and out[7][1]["status"] == "EACCES"
    assert pub.read_bytes()[:11] == b"public data"
    # root reads the same bytes from the same cached chunk
    rc, out, _ = client(cache["sock"], "hello", f"open:{pub}:ro", f"read:last:0:11:{got}",
                        "stats")
    assert got.read_bytes() == b"public data"
    # one fill (a block at the start of the file and a first read-ahead
    # window of four) served both users
    assert out[-1][1]["fill_bytes"] == str(5 * 4096)


def test_a_user_who_cannot_open_the_file_gets_nothing(cache):
    secret = cache["back"] / "secret"
    # root caches the secret first
    rc, out, _ = client(cache["sock"], "hello", f"open:{secret}:ro", "map:last:0:r:0:1")
    secret_id = out[1][1]["id"]
    assert out[2][1]["status"] == "OK"
    rc, out, _ = client(cache["sock"], "hello", f"open:{secret}:ro",
                        f"open:{secret}:ro:{cache['back'] / 'pub'}",
                        f"map:{secret_id}:0:r:0:1", f"read:{secret_id}:0:9:{cache['dir'] / 'x'}",
                        user="nobody")
    assert out[1][1] == {"local": "EACCES"}
    assert out[2][1]["status"] == "EACCES"
    assert out[3][1]["status"] == "EBADF" and out[4][1]["status"] == "EBADF"
    assert not (cache["dir"] / "x").exists()


def test_chunk_files_cannot_be_opened_by_name(cache):
    pub = cache["back"] / "pub"
    rc, out, _ = client(cache["sock"], "hello", f"open:{pub}:ro", "map:last:0:r:0:1")
    chunk = cache["pool"] / "chunks" / out[2][1]["slot"]
    assert chunk.exists()
    p = run(AS_NOBODY + ["cat", chunk])
    assert p.returncode != 0 and b"Permission denied" in p.stderr
    p = run(AS_NOBODY + ["cat", cache["pool"] / "meta.pool"])
    assert p.returncode != 0


def test_read_write_grant_writes_through_the_mapping(cache):
    shared = cache["back"] / "shared"  # 0666
    src = cache["dir"] / "src"
    src.write_bytes(b"written by nobody")
    os.chmod(src, 0o644)
    rc, out, p = client(cache["sock"], "hello", f"open:{shared}:rw", f"write:last:0:{src}",
                        "flush:last", "flush:all", user="nobody")
    assert rc == 0, p.stderr
    assert [f["status"] for _, f in out[:4]] == ["OK"] * 4
    assert shared.read_bytes() == b"written by nobody"
    assert out[4][1]["status"] == "EPERM"  # flushing everything is for root
