"""chelld, the cache manager daemon: lifecycle (`chell cache start|status|stop`),
its socket protocol, and access control against an unprivileged client.

The daemon runs as root (as the tests do); the hostile client runs as
`nobody` through setpriv. The client must prove access to a backing file by
passing a descriptor it opened itself; these tests try to get around that.
"""
import json
import errno
import os
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import CHELL, PROGS, run

CHELLD = PROGS / "chelld"
CLIENT = PROGS / "chelld_client"
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]

MAGIC = 0x4C4C4843
HELLO, STATS = 1, 4
PROTO = 3  # protocol version (3: batched MAP)
CHUNK = 2 << 20


def start(pool, backings, size="64M", extra=()):
    argv = [CHELL, "cache", "start", "--pool", pool, "--size", size]
    for b in backings:
        argv += ["--backing", b]
    return run(argv + list(extra), timeout=30)


def stop(pool):
    return run([CHELL, "cache", "stop", "--pool", pool, "--timeout", "20"], timeout=30)


def status(pool):
    return run([CHELL, "cache", "status", "--pool", pool, "--json"], timeout=30)


def client(sock, *ops, user=None):
    """Run chelld_client; returns (exit code, list of (op, {field: value}))."""
    argv = (AS_NOBODY if user == "nobody" else []) + [str(CLIENT), str(sock)] + list(ops)
    p = run(argv, timeout=30)
    lines = []
    for line in p.stdout.decode().splitlines():
        op, _, rest = line.partition(" ")
        fields = {}
        # detail="..." is last and may contain spaces
        if ' detail="' in " " + rest:
            rest, _, det = (" " + rest).partition(' detail="')
            fields["detail"] = det.rstrip('"')
        for kv in rest.split():
            k, _, v = kv.partition("=")
            fields[k] = v
        lines.append((op, fields))
    return p.returncode, lines, p


def gone(pid):
    """The process has exited (a zombie waiting for init to reap it counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_gone(pid):
    for _ in range(500):
        if gone(pid):
            return True
        time.sleep(0.01)
    return False


def daemon_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def settle_fds(pid, want=None):
    """The daemon's descriptor count once it equals want (or, without want,
    stops changing), giving up after 5 s."""
    last = daemon_fds(pid)
    for _ in range(100):
        time.sleep(0.05)
        n = daemon_fds(pid)
        if n == want or (want is None and n == last):
            return n
        last = n
    return last


@pytest.fixture
def cache(workdir):
    """A pool and a backing directory served by chelld; files in the backing
    directory: secret (root, 0600), pub (0644, 5 MB), shared (0666), and a
    symlink `escape` pointing outside to `outside` (0644)."""
    os.chmod(workdir, 0o755)  # nobody must reach the socket and the files
    pool, back = workdir / "pool", workdir / "back"
    pool.mkdir()
    back.mkdir()
    (back / "secret").write_text("root only\n")
    os.chmod(back / "secret", 0o600)
    with open(back / "pub", "wb") as f:
        f.truncate(5_000_000)
    os.chmod(back / "pub", 0o644)
    (back / "shared").write_text("anyone may write\n")
    os.chmod(back / "shared", 0o666)
    (workdir / "outside").write_text("not under a backing directory\n")
    os.chmod(workdir / "outside", 0o644)
    (back / "escape").symlink_to(workdir / "outside")
    p = start(pool, [back])
    assert p.returncode == 0, p.stderr.decode()
    info = json.loads(status(pool).stdout)
    yield {"pool": pool, "back": back, "dir": workdir, "sock": pool / "chelld.sock",
           "pid": info["pid"]}
    if (pool / "chelld.pid").exists():
        r = stop(pool)
        assert r.returncode == 0, r.stderr.decode()
    log = (pool / "chelld.log").read_text()
    assert "ERROR: AddressSanitizer" not in log and "runtime error" not in log, log


# ---------------------------------------------------------------- access control

def test_nobody_cannot_pass_another_files_descriptor_as_the_protected_file(cache):
    secret, pub = cache["back"] / "secret", cache["back"] / "pub"
    rc, out, p = client(cache["sock"], "hello", f"open:{secret}:ro",
                        f"open:{secret}:ro:{pub}", f"open:{secret}:rw:{cache['back'] / 'shared'}",
                        "stats", user="nobody")
    assert rc == 0, p.stderr
    # the kernel itself refuses nobody the file, so there is no descriptor to pass
    assert out[1] == ("open", {"local": "EACCES"})
    # a descriptor of a file nobody may open, labelled with the protected path
    assert out[2][1]["status"] == "EACCES" and "inode mismatch" in out[2][1]["detail"]
    assert out[3][1]["status"] == "EACCES" and "inode mismatch" in out[3][1]["detail"]
    assert out[4][1]["opens"] == "0" and int(out[4][1]["opens_refused"]) == 2
    # the daemon logged who asked (SO_PEERCRED)
    assert "uid 65534" in (cache["pool"] / "chelld.log").read_text()


def test_o_path_descriptor_of_the_protected_file_is_refused(cache):
    # O_PATH needs only search permission on the directory, so nobody CAN get
    # one for the 0600 file and it has the right inode; it must not count.
    secret = cache["back"] / "secret"
    rc, out, _ = client(cache["sock"], "hello", f"open:{secret}:opath", user="nobody")
    assert rc == 0
    assert out[1][1]["status"] == "EACCES" and "O_PATH" in out[1][1]["detail"]


def test_root_client_gets_the_protected_file(cache):
    # positive control: the same request with a real descriptor is granted
    secret = cache["back"] / "secret"
    rc, out, _ = client(cache["sock"], "hello", f"open:{secret}:rw", "map:last:0:w")
    assert rc == 0
    assert out[1][1]["status"] == "OK" and out[1][1]["access"] == "rw"
    assert out[2][1] == {"status": "OK", "size": "10", "offset": "0", "length": "10",
                         "chunk": str(CHUNK), "slot": "0", "acc": "rw", "bypass": "0"}


def test_read_only_descriptor_cannot_get_write_access(cache):
    pub = cache["back"] / "pub"
    rc, out, _ = client(cache["sock"], "hello", f"open:{pub}:ro", "map:last:1:w",
                        "map:last:1:r", "map:last:2:r", "map:last:3:r", "stats", user="nobody")
    assert rc == 0
    assert out[1][1]["status"] == "OK" and out[1][1]["access"] == "r"
    assert out[1][1]["size"] == "5000000"
    assert out[2][1]["status"] == "EACCES"
    # reads are answered with the backing file's size and the chunk's offset
    assert out[3][1] == {"status": "OK", "size": "5000000", "offset": str(CHUNK),
                         "length": str(CHUNK), "chunk": str(CHUNK), "slot": "0", "acc": "r",
                         "bypass": "0"}
    assert out[4][1]["offset"] == str(2 * CHUNK) and out[4][1]["length"] == str(5000000 - 2 * CHUNK)
    assert out[5][1]["length"] == "0"  # past the end
    assert out[6][1]["maps"] == "3" and out[6][1]["maps_refused"] == "1"


def test_write_only_and_read_write_descriptors(cache):
    shared = cache["back"] / "shared"
    rc, out, _ = client(cache["sock"], "hello", f"open:{shared}:wo", "map:last:0:w",
                        "map:last:0:r", f"open:{shared}:rw", "map:last:0:w", user="nobody")
    assert rc == 0
    assert out[1][1]["access"] == "w"
    # a mapping is always readable, so a write-only descriptor gets neither
    assert out[2][1]["status"] == "EACCES" and out[3][1]["status"] == "EACCES"
    assert out[4][1]["access"] == "rw" and out[5][1]["status"] == "OK"


def test_paths_outside_the_backing_directories_are_refused(cache):
    d, back = cache["dir"], cache["back"]
    rc, out, _ = client(cache["sock"], "hello", f"open:{d / 'outside'}:ro",
                        f"open:{back / 'escape'}:ro", f"open:{back}/../outside:ro",
                        f"open:{back}:ro", "open:relative/pub:ro:" + str(back / "pub"),
                        f"open-nofd:{back / 'pub'}", user="nobody")
    assert rc == 0
    st = [f.get("status") for _, f in out[1:]]
    assert st[:3] == ["EPERM", "EPERM", "EPERM"]  # direct, via a symlink, via ..
    assert st[3] == "EINVAL"  # a directory descriptor
    assert st[4] == "EINVAL"  # not absolute
    assert st[5] == "EBADF"   # no descriptor at all


def test_file_ids_are_cnodes_usable_only_where_registered(cache):
    pub, shared = cache["back"] / "pub", cache["back"] / "shared"
    rc, out, _ = client(cache["sock"], "hello", f"open:{pub}:ro", "map:last:0:r",
                        f"open:{shared}:ro")
    fid = out[1][1]["id"]
    assert out[2][1]["status"] == "OK" and out[3][1]["id"] != fid
    # another connection that did not register the file cannot use its id
    rc, out, _ = client(cache["sock"], "hello", f"map:{fid}:0:r", "map:77:0:r", user="nobody")
    assert out[1][1]["status"] == "EBADF" and out[2][1]["status"] == "EBADF"
    # registering it gives the same id (the file's Cnode)
    rc, out, _ = client(cache["sock"], "hello", f"open:{pub}:ro", user="nobody")
    assert out[1][1]["id"] == fid


def test_refused_descriptors_are_closed_in_the_daemon(cache):
    secret, pub = cache["back"] / "secret", cache["back"] / "pub"
    client(cache["sock"], "hello", "bye")  # warm up
    # The daemon closes a departed client's socket when it gets to it, so
    # counts are compared once they settle (a leak of 60 never would).
    before = settle_fds(cache["pid"])
    ops = ["hello"] + [f"open:{secret}:ro:{pub}", f"open:{secret}:opath", "raw:fd-on-stats"] * 20
    rc, out, _ = client(cache["sock"], *ops, user="nobody")
    assert rc == 0 and len(out) == 61
    assert settle_fds(cache["pid"], before) == before


# ------------------------------------------------------------ malformed input

RAW = {
    "short": "EBADMSG", "badmagic": "EBADMSG", "oversize": "EMSGSIZE", "unknown": "ENOSYS",
    "badlen": "EBADMSG", "wrongsize": "EBADMSG", "badversion": "EPROTONOSUPPORT",
    "fd-on-stats": "EBADF", "garbage": "EBADMSG",
}


def test_malformed_messages_get_error_replies_and_the_daemon_keeps_serving(cache):
    ops = ["stats"] + ["hello"] + [f"raw:{k}" for k in RAW] + ["hello:7", "stats"]
    rc, out, p = client(cache["sock"], *ops, user="nobody")
    assert rc == 0, p.stdout
    assert out[0][1]["status"] == "EPROTO" and out[0][1]["error_reply"] == "1"  # HELLO first
    for (op, f), want in zip(out[2:2 + len(RAW)], RAW.values()):
        assert op == "raw" and f["error_reply"] == "1" and f["status"] == want, (f, want)
    assert out[-2][1]["status"] == "EPROTONOSUPPORT" and out[-2][1]["version"] == "3"  # protocol 3: batched MAP
    assert out[-1][1]["status"] == "OK"  # the same connection still works
    assert int(out[-1][1]["malformed"]) == len(RAW) + 1
    # and so does everyone else
    rc, out, _ = client(cache["sock"], "hello", f"open:{cache['back'] / 'pub'}:ro", "bye")
    assert rc == 0 and [f["status"] for _, f in out] == ["OK", "OK", "OK"]


def test_client_vanishing_mid_conversation_does_not_hurt(cache):
    # start clients that die (SIGKILL) between requests
    procs = [subprocess.Popen([CLIENT, cache["sock"], "hello", "sleep:5000"],
                              stdout=subprocess.DEVNULL) for _ in range(5)]
    time.sleep(0.3)
    for p in procs:
        p.kill()
        p.wait()
    rc, out, _ = client(cache["sock"], "hello", "stats")
    assert rc == 0 and out[1][1]["status"] == "OK"


# ----------------------------------------------------------------- lifecycle

def test_start_errors_are_clear(workdir):
    pool, back = workdir / "pool", workdir / "back"
    pool.mkdir()
    back.mkdir()
    # chelld itself refuses a missing pool directory (`chell cache start`
    # creates it first: test_cache_registry.py)
    p = run([CHELLD, "--pool", workdir / "nope", "--size", "64M", "--backing", back])
    assert p.returncode == 2 and b"pool directory" in p.stderr and b"nope" in p.stderr
    p = start(pool, [workdir / "missing"])
    assert p.returncode == 2 and b"backing directory" in p.stderr and b"missing" in p.stderr
    for bad in ["abc", "0", "1K", "10Q", "-5M", "99999999999999999999"]:
        p = start(pool, [back], size=bad)
        assert p.returncode == 2 and b"--size" in p.stderr, (bad, p.stderr)
    p = run([CHELL, "cache", "start", "--pool", pool, "--size", "4M"])
    assert p.returncode == 2 and b"--backing" in p.stderr
    (workdir / "file").write_text("")
    p = start(workdir / "file", [back])
    assert p.returncode == 2 and b"not a directory" in p.stderr
    # root may write anywhere, so check the writability test as nobody
    os.chmod(workdir, 0o755)
    p = run(AS_NOBODY + [CHELLD, "--pool", pool, "--size", "4M", "--backing", back])
    assert p.returncode == 2 and b"not writable" in p.stderr, p.stderr
    assert not any(pool.iterdir())  # nothing was created on failure


def test_second_start_on_the_same_pool_is_refused(cache):
    p = start(cache["pool"], [cache["back"]])
    assert p.returncode == 1
    assert f"already served by chelld (pid {cache['pid']})".encode() in p.stderr
    # even on another socket: the lock is on the pool
    p = start(cache["pool"], [cache["back"]], extra=["--socket", str(cache["dir"] / "other.sock")])
    assert p.returncode == 1 and b"already served" in p.stderr
    assert json.loads(status(cache["pool"]).stdout)["pid"] == cache["pid"]


def test_status_json_and_text(cache):
    client(cache["sock"], "hello", f"open:{cache['back'] / 'pub'}:ro", "map:last:0:r", "bye")
    p = status(cache["pool"])
    assert p.returncode == 0
    s = json.loads(p.stdout)
    assert s["running"] is True and s["pid"] == cache["pid"]
    assert s["pool"] == str(cache["pool"]) and s["backings"] == [str(cache["back"])]
    assert s["size"] == 64 << 20 and s["protocol"] == PROTO and s["clients"] == 0
    assert s["opens"] == 1 and s["maps"] == 1 and s["uptime_ms"] >= 0
    t = run([CHELL, "cache", "status", "--pool", cache["pool"]])
    assert t.returncode == 0 and b"chelld is running" in t.stdout and b"64.0 MiB" in t.stdout
    # a connected client is counted
    holder = subprocess.Popen([CLIENT, cache["sock"], "hello", "sleep:3000"])
    try:
        for _ in range(100):
            if json.loads(status(cache["pool"]).stdout)["clients"] == 1:
                break
            time.sleep(0.02)
        else:
            pytest.fail("the connected client was never counted")
    finally:
        holder.kill()
        holder.wait()


def test_stop_removes_socket_and_pid_file_and_status_reports_not_running(cache):
    pool = cache["pool"]
    p = stop(pool)
    assert p.returncode == 0 and b"stopping chelld" in p.stdout and b"chelld stopped" in p.stdout
    assert not (pool / "chelld.sock").exists() and not (pool / "chelld.pid").exists()
    assert gone(cache["pid"])
    s = status(pool)
    assert s.returncode == 1 and json.loads(s.stdout)["running"] is False
    p = stop(pool)
    assert p.returncode == 1 and b"not running" in p.stderr
    # the pool can be served again
    assert start(pool, [cache["back"]]).returncode == 0


def test_an_old_client_gets_a_clear_refusal(cache):
    """Protocol 2 (before batched MAP) is refused at HELLO with
    EPROTONOSUPPORT, the manager's version in the reply and a log line
    naming both versions; the connection stays usable."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(str(cache["sock"]))
    s.send(struct.pack("<IHHIIII", MAGIC, 2, HELLO, 24, 1, 2, 0))
    rep = s.recv(8192)
    assert struct.unpack_from("<IHHIIi", rep)[5] == errno.EPROTONOSUPPORT
    assert struct.unpack_from("<I", rep, 24)[0] == PROTO  # hello reply: version first
    s.close()
    log = (cache["pool"] / "chelld.log").read_text()
    assert f"speaks protocol version 2, this manager {PROTO}" in log


def test_stop_answers_requests_queued_before_the_signal(cache):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(str(cache["sock"]))
    # one round trip first, so the daemon has accepted the connection
    s.send(struct.pack("<IHHIIII", MAGIC, PROTO, HELLO, 24, 1, PROTO, 0))
    assert struct.unpack_from("<IHHIIi", s.recv(8192))[5] == 0
    os.kill(cache["pid"], signal.SIGSTOP)
    try:
        s.send(struct.pack("<IHHII", MAGIC, PROTO, STATS, 16, 2))
        s.send(struct.pack("<IHHII", MAGIC, PROTO, STATS, 16, 3))
        os.kill(cache["pid"], signal.SIGTERM)
    finally:
        os.kill(cache["pid"], signal.SIGCONT)
    replies = [s.recv(8192) for _ in range(2)]
    for rep, (typ, seq) in zip(replies, [(STATS, 2), (STATS, 3)]):
        magic, _ver, rtype, length, rseq, st = struct.unpack_from("<IHHIIi", rep)
        assert (magic, rtype, length, rseq, st) == (MAGIC, typ | 0x8000, len(rep), seq, 0)
    assert s.recv(8192) == b""  # then the daemon closes the connection and exits
    s.close()
    assert wait_gone(cache["pid"])
    assert not (cache["pool"] / "chelld.sock").exists()
    assert not (cache["pool"] / "chelld.pid").exists()
    assert "stopping: no new connections" in (cache["pool"] / "chelld.log").read_text()


def test_stop_with_a_connected_idle_client(cache):
    holder = subprocess.Popen([CLIENT, cache["sock"], "hello", "sleep:1500", "stats"],
                              stdout=subprocess.PIPE)
    time.sleep(0.3)
    p = stop(cache["pool"])
    assert p.returncode == 0
    out = holder.communicate(timeout=10)[0].decode()
    assert holder.returncode == 3 and "stats fail=" in out  # disconnected, not hung


def test_restart_after_the_daemon_was_killed(cache):
    os.kill(cache["pid"], signal.SIGKILL)
    assert wait_gone(cache["pid"])
    # the stale socket and pid file are left behind; the lock died with it
    assert (cache["pool"] / "chelld.sock").exists()
    assert status(cache["pool"]).returncode == 1
    assert start(cache["pool"], [cache["back"]]).returncode == 0
    rc, out, _ = client(cache["sock"], "hello")
    assert out[0][1]["status"] == "OK"


def test_foreground_logs_to_stderr_and_stops_on_sigterm(workdir):
    pool, back = workdir / "pool", workdir / "back"
    pool.mkdir()
    back.mkdir()
    d = subprocess.Popen([CHELLD, "--pool", pool, "--size", "2M", "--backing", back,
                          "--socket", workdir / "s.sock", "--foreground"],
                         stderr=subprocess.PIPE)
    try:
        for _ in range(500):
            if (pool / "chelld.pid").exists():
                break
            time.sleep(0.01)
        s = json.loads(run([CHELL, "cache", "status", "--pool", pool, "--json"]).stdout)
        assert s["pid"] == d.pid and s["socket"] == str(workdir / "s.sock")
    finally:
        d.send_signal(signal.SIGTERM)
        err = d.communicate(timeout=20)[1].decode()
    assert d.returncode == 0 and "stopped after" in err
    assert not (workdir / "s.sock").exists() and not (pool / "chelld.log").exists()


@pytest.mark.parametrize("argv", [
    ["cache", "--help"], ["cache", "start", "--help"], ["cache", "status", "--help"],
    ["cache", "stop", "--help"], ["help", "cache"],
])
def test_help(argv):
    p = run([CHELL] + argv)
    assert p.returncode == 0 and p.stdout.startswith(b"Usage: chell cache")


def test_chelld_help_and_usage_errors():
    p = run([CHELLD, "--help"])
    assert p.returncode == 0 and p.stdout.startswith(b"Usage: chelld")
    assert run([CHELLD, "--bogus"]).returncode == 2
    assert run([CHELL, "cache"]).returncode == 2
    assert run([CHELL, "cache", "frobnicate"]).returncode == 2
    assert run([CHELL, "cache", "status", "--bogus"]).returncode == 2
    # without --pool: the pool of cache.pool, where nothing runs here
    env = dict(os.environ, CHELL_CACHE_POOL="/nonexistent-pool")
    for sub in ("status", "stop"):
        r = run([CHELL, "cache", sub], env=env)
        assert r.returncode == 1 and b"/nonexistent-pool" in r.stdout + r.stderr, r
    assert run([CHELL, "cache", "stop", "--pool", "/x", "--timeout", "soon"]).returncode == 2
