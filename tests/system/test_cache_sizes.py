"""Cache mode: a truncation must drop every cached byte past the new end,
whichever process does it (found by the random operation generator: a
truncate(path) in a process that had not opened a cached file yet, such as
a freshly exec'd image or a shell, went to the kernel and left the cache's
dirty blocks past the new end; they came back when the file grew again).
"""
from conftest import run
from test_cache import PLAIN_ENV, describe, fresh_manager

WRITE = ("import sys\n"
         "with open(sys.argv[1], 'wb') as f:\n"
         "    f.write(b'\\xfe' * 30000)\n")
TRUNCATE = "import os, sys; os.truncate(sys.argv[1], 1000)"
GROW = ("import os, sys\n"
        "fd = os.open(sys.argv[1], os.O_WRONLY)\n"
        "os.pwrite(fd, b'\\xcc' * 100, 39000)\n"
        "os.close(fd)\n")
CHECK = ("import sys\n"
         "d = open(sys.argv[1], 'rb').read()\n"
         "bad = [i for i in range(1000, 39000) if d[i]]\n"
         "print(len(d), len(bad), bad[:1])\n")


def test_truncate_by_path_in_a_fresh_process_drops_cached_bytes():
    with fresh_manager() as m:
        f = m.backing / "f"
        for script in (WRITE, TRUNCATE, GROW):  # three processes, one manager
            res = run(m.cmd(["python3", "-c", script, f]), env=dict(PLAIN_ENV))
            assert res.returncode == 0, describe(res)
        res = run(m.cmd(["python3", "-c", CHECK, f]), env=dict(PLAIN_ENV))
        assert res.returncode == 0 and res.stdout == b"39100 0 []\n", describe(res)
        m.flush()
        res = run(["python3", "-c", CHECK, f], env=dict(PLAIN_ENV))  # the kernel's view
        assert res.returncode == 0 and res.stdout == b"39100 0 []\n", describe(res)
