#!/usr/bin/env python3
"""Cache-mode (issue 5) benchmark suite: Chell's cache mode against the Linux
page cache in front of the same slow device, side by side in one run.

The slow device is a loop-mounted ext4 image (a file on the real disk, the
loop device in direct-I/O mode so the image is not cached a second time in
the page cache), optionally throttled with the blkio controller. The script
sets it up and tears it down (also on failure or Ctrl-C). Sections:

  lat    4 KB random read and write hit latency, data cached in every arm:
         cache mode on the loop file vs the page cache on the same file vs
         direct mode on a tmpfs copy vs memcpy on a mapping of that copy
         (bench/direct's chell_bench_lat);
  append extending writes (write() at the end of a growing file) and
         O_APPEND writes of 64 B to 1 MB, each batch from an empty file:
         cache mode against the page cache on the loop file system;
  zipf   fio 4 KB randread/randwrite, zipf theta 0.4..1.3, over a file larger
         than the cache: cache mode with pool M vs the page cache limited to
         M by a memory cgroup; IOPS and hit ratio;
  bdb    Berkeley DB btree, every put a transaction committed with
         fdatasync, 1, 2 and 4 threads (bench/cache/chell_bench_bdbsync);
  cliff  sustained 4 KB random writes over a file 3x the pool: throughput per
         second against the device's own O_DIRECT random-write rate;
  conc   concurrent misses: 1 and 8 fio processes (separate clients), each
         4 KB random reads of its own cold file, every read a miss; the
         aggregate miss throughput of 8 against 1, cache mode and (for
         reference) the page cache.
  gluster  a GlusterFS volume as the backing store (scripts/gluster.sh, served
         on this machine): sqlite3 WAL synchronous=full single-row
         transactions and Berkeley DB with fdatasync per put, on the mount
         alone against cache mode in front of it (locks on node-local
         stand-ins, and on the backing file); 4 KB read hit latency of cache
         mode with the backing file on ext4 (the loop device) and on GlusterFS.
         Not in the default set (--only gluster); skipped with the reason
         where GlusterFS cannot run. Its tables go between their own markers
         in --doc.

Writes <out>/cache.json (raw numbers, machine, device set-up, ratios, target
verdicts), <out>/cache.md (the tables) and <out>/cache.png. Targets are
reported PASS/FAIL and never change the exit status. Needs root (loop
device, mount, cgroups, drop_caches).

If cache mode does not work yet (no `cache` handler, or chelld cannot
start), the cache arm runs `--mode posix` instead and every output says so:
the numbers then validate the harness, not cache mode.

    scripts/bench_cache.py [--build build] [--out out/bench] [--quick]
    scripts/bench_cache.py --from-json out/bench/cache.json --doc docs/PERFORMANCE.md
"""
import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC_BEGIN = "<!-- bench_cache: begin generated tables -->"
DOC_END = "<!-- bench_cache: end generated tables -->"
GLUSTER_BEGIN = "<!-- bench_cache gluster: begin generated tables -->"
GLUSTER_END = "<!-- bench_cache gluster: end generated tables -->"
MEMCG = Path("/sys/fs/cgroup/memory")
BLKIO = Path("/sys/fs/cgroup/blkio")
LAT_ARMS = ("pagecache", "cache", "direct", "memcpy")
APPEND_SIZES = (64, 512, 4096, 65536, 1 << 20)
APPEND_OPS = ("extend", "append")  # write() at the end without O_APPEND; write() with O_APPEND

MB = 1 << 20
PROFILES = {
    "full": dict(image=4096 * MB, lat_file=256 * MB, lat_rounds=3, lat_batch_ms=20, lat_batches=5,
                 append_cap=64 * MB,
                 zipf_file=1024 * MB, zipf_pool=256 * MB, thetas=[0.4, 0.7, 0.99, 1.3],
                 zipf_warm_s=8, zipf_run_s=10,
                 bdb_threads=[1, 2, 4], bdb_seconds=5, bdb_rounds=2, bdb_keys=20000,
                 cliff_pool=128 * MB, cliff_mult=3, cliff_s=40, cliff_dev_s=10,
                 conc_file=64 * MB, conc_clients=[1, 8], conc_s=10, conc_rounds=2,
                 gl_txns=1000, gl_rounds=3, gl_bdb_seconds=5, gl_bdb_keys=5000, gl_lat_file=64 * MB),
    "quick": dict(image=1024 * MB, lat_file=64 * MB, lat_rounds=1, lat_batch_ms=4, lat_batches=5,
                  append_cap=16 * MB,
                  zipf_file=256 * MB, zipf_pool=64 * MB, thetas=[0.7, 1.3],
                  zipf_warm_s=2, zipf_run_s=3,
                  bdb_threads=[1, 2, 4], bdb_seconds=1.5, bdb_rounds=1, bdb_keys=10000,
                  cliff_pool=32 * MB, cliff_mult=3, cliff_s=8, cliff_dev_s=3,
                  conc_file=16 * MB, conc_clients=[1, 8], conc_s=3, conc_rounds=1,
                  gl_txns=200, gl_rounds=1, gl_bdb_seconds=1.5, gl_bdb_keys=2000, gl_lat_file=16 * MB),
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def mib(n):
    return "-" if n is None else f"{n // MB}M"


def parse_size(text):
    t = text.strip().lower()
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(t[-1:], 1)
    return int(float(t[:-1] if t[-1:] in "kmg" else t) * mult)


# ---------------------------------------------------------------- machine

def machine_info():
    info = {"kernel": platform.release(), "cores": os.cpu_count(), "cpu_model": "?"}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            key, val = key.strip(), val.strip()
            if key == "model name" and info["cpu_model"] == "?":
                info["cpu_model"] = val
            elif key == "flags" and "virtualized" not in info:
                info["virtualized"] = "hypervisor" in val.split()
        mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()
        info["mem_gib"] = round(int(mem[1]) / (1 << 20), 1)
    except (OSError, ValueError, IndexError):
        pass
    for tool in ("fio",):
        path = shutil.which(tool)
        if path:
            r = subprocess.run([path, "--version"], capture_output=True, text=True)
            info[f"{tool}_version"] = r.stdout.strip()
    return info


def mount_of(path):
    best = ("", "?")
    for line in Path("/proc/mounts").read_text().splitlines():
        f = line.split()
        if len(f) > 3 and (str(path) + "/").startswith(f[1].rstrip("/") + "/") and len(f[1]) >= len(best[0]):
            best = (f[1], f"{f[0]} {f[2]} {f[3]} on {f[1]}")
    return best[1]


def build_info(build):
    """Build type, and the commit the build was made from: the source tree
    named in CMakeCache.txt (a git checkout, or an export with the commit in
    a .git-commit file), with whether src/ or include/ had local changes."""
    out = {}
    src = REPO
    cache = build / "CMakeCache.txt"
    if cache.exists():
        for line in cache.read_text(errors="replace").splitlines():
            if line.startswith("CMAKE_BUILD_TYPE:"):
                out["build_type"] = line.split("=", 1)[1]
            elif line.startswith("CMAKE_HOME_DIRECTORY:"):
                src = Path(line.split("=", 1)[1])
    out["source_dir"] = str(src)
    if (src / ".git-commit").exists():
        out["commit"] = (src / ".git-commit").read_text().strip()[:12]
        out["src_dirty"] = False
        return out
    r = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if r.returncode == 0:
        out["commit"] = r.stdout.strip()
    r = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "src", "include"],
                       capture_output=True, text=True)
    if r.returncode == 0:
        out["src_dirty"] = bool(r.stdout.strip())
    return out


def cpu_busy(seconds=2.0):
    def snap():
        f = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(f) - f[3] - (f[4] if len(f) > 4 else 0), sum(f)
    a = snap()
    time.sleep(seconds)
    b = snap()
    return (b[0] - a[0]) / (b[1] - a[1]) if b[1] > a[1] else 0.0


def sh(argv, check=True, timeout=600, **kw):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} exited {r.returncode}: {r.stderr.strip()[-1500:]}")
    return r


def drop_caches():
    """Write dirty data out and drop the clean page cache (every arm starts cold)."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


# ---------------------------------------------------------------- the slow device

class SlowDevice:
    """A loop-mounted ext4 image on the real disk. The loop device runs with
    direct I/O, so reads of the image reach the disk instead of a second copy
    of it in the page cache; blkio throttling (root cgroup, this device only)
    optionally makes it slower."""

    def __init__(self, stack, image_dir, size, throttle):
        self.dir = Path(tempfile.mkdtemp(prefix="chell-bench-cache-img-", dir=image_dir))
        stack.callback(shutil.rmtree, self.dir, True)
        self.image = self.dir / "slow.img"
        self.mnt = self.dir / "mnt"
        self.mnt.mkdir()
        with open(self.image, "wb") as f:
            f.truncate(size)
        self.dev = sh(["losetup", "-f", "--show", "--direct-io=on", self.image]).stdout.strip()
        stack.callback(lambda: sh(["losetup", "-d", self.dev], check=False))
        self.name = Path(self.dev).name
        # No lazy initialisation: a background thread zeroing inode tables
        # would write to the device during the first measurements.
        sh(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", self.dev])
        sh(["mount", "-o", "noatime", self.dev, self.mnt])
        stack.callback(self._umount)
        self.majmin = Path(f"/sys/block/{self.name}/dev").read_text().strip()
        self.dio = Path(f"/sys/block/{self.name}/loop/dio").read_text().strip() == "1"
        self.throttle = {}
        for key, val in throttle.items():
            if not val:
                continue
            f = BLKIO / f"blkio.throttle.{key}_device"
            f.write_text(f"{self.majmin} {val}\n")
            stack.callback(lambda f=f: f.write_text(f"{self.majmin} 0\n"))
            self.throttle[key] = val
        self.backing_fs = mount_of(image_dir)

    def _umount(self):
        for _ in range(10):
            if sh(["umount", self.mnt], check=False).returncode == 0:
                return
            time.sleep(0.5)
        log(f"warning: could not unmount {self.mnt}")

    def stat(self):
        """Read/write I/Os and sectors the device completed so far."""
        f = [int(x) for x in Path(f"/sys/block/{self.name}/stat").read_text().split()]
        return {"read_ios": f[0], "read_sectors": f[2], "write_ios": f[4], "write_sectors": f[6]}

    def describe(self):
        return {"device": self.dev, "image": str(self.image), "image_on": self.backing_fs,
                "loop_direct_io": self.dio, "fs": "ext4 (noatime)", "throttle": self.throttle or "none"}


def dev_delta(a, b):
    return {k: b[k] - a[k] for k in a}


# ---------------------------------------------------------------- memory cgroups

class MemCgroup:
    def __init__(self, stack, name, limit):
        self.path = MEMCG / f"chell-bench-cache-{os.getpid()}-{name}"
        self.path.mkdir()
        stack.callback(self.remove)
        (self.path / "memory.limit_in_bytes").write_text(f"{limit}\n")
        self.limit = int((self.path / "memory.limit_in_bytes").read_text())
        if abs(self.limit - limit) > 4096:  # the kernel rounds to pages
            raise RuntimeError(f"{self.path}: memory.limit_in_bytes is {self.limit}, not {limit}")

    def enter(self):
        """preexec_fn: the child joins the cgroup before it execs."""
        (self.path / "cgroup.procs").write_text(f"{os.getpid()}\n")

    def reset_peak(self):
        (self.path / "memory.max_usage_in_bytes").write_text("0\n")

    def usage(self):
        st = {}
        for line in (self.path / "memory.stat").read_text().splitlines():
            k, v = line.split()
            if k in ("cache", "rss", "shmem", "mapped_file", "dirty", "writeback"):
                st[k] = int(v)
        st["max_usage"] = int((self.path / "memory.max_usage_in_bytes").read_text())
        st["failcnt"] = int((self.path / "memory.failcnt").read_text())
        return st

    def remove(self):
        for _ in range(20):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.25)
        log(f"warning: could not remove {self.path}")


# ---------------------------------------------------------------- chelld and the arms

class Chell:
    """Runs programs in the arms, and the cache manager for the cache arm."""

    def __init__(self, args, dev, stack):
        self.bin = args.build / "bin"
        self.chell = self.bin / "chell"
        self.dev = dev
        self.mode = args.mode
        self.chelld_args = list(args.chelld_arg or [])
        self.fallback = None
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CHELL_") and k != "LD_PRELOAD"}
        self.pool = None
        self.pool_size = None
        self.pool_cg = None
        self.stack = stack
        self.shm = Path(tempfile.mkdtemp(prefix="chell-bench-cache-", dir="/dev/shm"))
        stack.callback(shutil.rmtree, self.shm, True)
        stack.callback(self.stop_cache)   # runs before the unmount

    # -- chelld
    def start_cache(self, size, cgroup=None, backing=None):
        """A fresh chelld with an empty pool of `size` bytes on tmpfs, caching
        the loop file system (or the directories `backing`); in `cgroup` if
        given (its pool and whatever page cache it uses are then charged
        there)."""
        self.stop_cache()
        if self.mode != "cache":
            return
        self.pool = self.shm / f"pool-{time.monotonic_ns()}"
        self.pool.mkdir()
        self.pool_size = size
        self.pool_cg = cgroup
        backs = [a for b in (backing or [self.dev.mnt]) for a in ("--backing", b)]
        sh([self.chell, "cache", "start", "--pool", self.pool, "--size", mib(size), *backs,
            *self.chelld_args],
           env=self.env, preexec_fn=cgroup.enter if cgroup else None, timeout=120)

    def stop_cache(self):
        if self.pool is None:
            return None
        r = sh([self.chell, "cache", "stop", "--pool", self.pool, "--timeout", "300"], check=False,
               env=self.env, timeout=400)
        if r.returncode != 0:
            log(f"warning: chell cache stop: {r.stderr.strip()[-300:]}")
        shutil.rmtree(self.pool, ignore_errors=True)
        self.pool = None
        return r.returncode

    def cache_status(self, files=True):
        """The manager's counters: `chell cache status --json` and, with
        files, the per-file statistics of `chell cache stat --json` (where
        the clients' hit and miss counts are), as {"status":..., "stat":...}."""
        if self.pool is None:
            return None
        out = {}
        for sub in ("status", "stat") if files else ("status",):
            r = sh([self.chell, "cache", sub, "--pool", self.pool, "--json"], check=False, env=self.env)
            if r.returncode != 0:
                out[sub] = {"error": r.stderr.strip()[-300:]}
                continue
            try:
                out[sub] = json.loads(r.stdout)
            except ValueError:
                out[sub] = {"error": "no JSON", "stdout": r.stdout[-300:]}
        return out

    # -- arms
    def argv(self, arm, cmd, path=None, sets=()):
        if arm == "cache":
            extra = ["--set", f"cache.pool={self.pool}"] if self.mode == "cache" else []
            extra += [a for kv in sets for a in ("--set", kv)]
            return [str(self.chell), "run", "--mode", self.mode, "--path", str(path or self.dev.mnt), *extra,
                    "--", *cmd]
        if arm == "direct":
            return [str(self.chell), "run", "--mode", "direct", "--path", str(self.shm / "direct"), "--", *cmd]
        return [str(c) for c in cmd]

    def run(self, arm, cmd, cgroup=None, timeout=900, path=None, sets=()):
        argv = self.argv(arm, [str(c) for c in cmd], path, sets)
        r = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout,
                           preexec_fn=cgroup.enter if cgroup else None)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stderr[-2000:]}")
        return r

    def run_json(self, arm, cmd, **kw):
        out = self.run(arm, cmd, **kw).stdout
        lines = out.splitlines()
        start = next((i for i, l in enumerate(lines) if l.startswith("{")), None)
        if start is None:
            raise RuntimeError(f"no JSON in the output of {cmd[0]}: {out[-500:]!r}")
        return json.loads("\n".join(lines[start:]))

    def probe_cache_mode(self):
        """Does cache mode work end to end? A chelld on a small pool, a
        client that writes and reads back a file through it."""
        if self.mode != "cache":
            return True, "requested"
        probe = self.dev.mnt / "probe.txt"
        try:
            self.start_cache(64 * MB)
            self.run("cache", ["sh", "-c", f"echo chell-probe > {probe} && grep -q chell-probe {probe}"],
                     timeout=60)
            st = self.cache_status()
            return True, st
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            return False, str(e)[-600:]
        finally:
            self.stop_cache()
            with contextlib.suppress(OSError):
                probe.unlink()


def provider_ok(chell_arm, provider):
    """A Chell arm's calls must bind to libchell.so; the others' must not
    (libc.so.6, or a sanitizer's interceptor in an ASan build)."""
    return provider.startswith("libchell") == chell_arm


def arm_orders(arms, rounds):
    return [list(arms) if r % 2 == 0 else list(reversed(arms)) for r in range(rounds)]


def flat_numbers(d, prefix=""):
    """Every numeric leaf of a status JSON, as dotted keys (for deltas)."""
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flat_numbers(v, f"{prefix}{k}."))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out.update(flat_numbers(v, f"{prefix}{i}."))
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        out[prefix[:-1]] = d
    return out


def status_delta(a, b):
    fa, fb = flat_numbers(a or {}), flat_numbers(b or {})
    return {k: fb[k] - fa.get(k, 0) for k in fb if isinstance(fb[k], (int, float))}


def pick(d, *names):
    """A counter of the manager's JSON by its own name: the top-level one if
    there is one, else the sum over every nested one (per-file lists)."""
    d = d or {}
    for n in names:
        keys = [k for k in d if k == n or k.endswith("." + n)]
        if keys:
            depth = min(k.count(".") for k in keys)
            return sum(d[k] for k in keys if k.count(".") == depth)
    return None


COUNTERS = ("hits", "misses", "fills", "fill_bytes", "evictions", "revocations", "writeback_ops",
            "writeback_bytes", "syncs", "throttle_waits", "cleaner_passes", "bypassed", "outside_changes")


def counters(delta):
    """The manager's main counters from a status delta (None if it has none)."""
    if not delta:
        return None
    out = {k: pick(delta, k) for k in COUNTERS}
    return {k: v for k, v in out.items() if v is not None} or None


# ---------------------------------------------------------------- sections

def section_lat(ch, prof, cpu, problems):
    size = prof["lat_file"]
    f_slow = ch.dev.mnt / "lat.bin"
    (ch.shm / "direct").mkdir(exist_ok=True)
    f_shm = ch.shm / "direct" / "lat.bin"
    lat = ch.bin / "chell_bench_lat"
    sh([lat, "--prepare", str(size), "--file", f_slow])
    shutil.copyfile(f_slow, f_shm)
    ch.start_cache(max(2 * size, 128 * MB))
    st0 = ch.cache_status()
    raw = []
    for rnd, order in enumerate(arm_orders(LAT_ARMS, prof["lat_rounds"])):
        for arm in order:
            log(f"  lat: round {rnd + 1}/{prof['lat_rounds']}, {arm}")
            f = f_slow if arm in ("pagecache", "cache") else f_shm
            cmd = [lat, "--file", f, "--sizes", "4096", "--ops", "read,write", "--patterns", "rand",
                   "--cpu", str(cpu), "--batch-ms", str(prof["lat_batch_ms"]), "--batches",
                   str(prof["lat_batches"])] + (["--mmap"] if arm == "memcpy" else [])
            data = ch.run_json("plain" if arm in ("pagecache", "memcpy") else arm, cmd)
            for s in ("pread", "pwrite"):
                if arm != "memcpy" and not provider_ok(arm in ("cache", "direct"), data["provider"][s]):
                    problems.append(f"lat {arm}: {s} bound to {data['provider'][s]}")
            raw.append({"arm": arm, "round": rnd, "data": data})
    st1 = ch.cache_status()
    ch.stop_cache()
    summary = {}
    for op in ("read", "write"):
        row = {}
        for arm in LAT_ARMS:
            cases = [c for r in raw if r["arm"] == arm for c in r["data"]["cases"] if c["op"] == op]
            row[f"{arm}_ns"] = median([c["median_ns"] for c in cases])
            row[f"{arm}_best_ns"] = min((v for c in cases for v in c["ns_per_op"]), default=None)
        row["cache_over_pagecache"] = ratio(row["cache_ns"], row["pagecache_ns"])
        row["cache_over_direct"] = ratio(row["cache_ns"], row["direct_ns"])
        row["cache_over_memcpy"] = ratio(row["cache_ns"], row["memcpy_ns"])
        row["best_cache_over_pagecache"] = ratio(row["cache_best_ns"], row["pagecache_best_ns"])
        row["best_cache_over_direct"] = ratio(row["cache_best_ns"], row["direct_best_ns"])
        summary[op] = row
    f_slow.unlink()
    f_shm.unlink()
    return {"file_bytes": size, "raw": raw, "summary": summary,
            "cache_status_before": st0, "cache_status_after": st1,
            "cache_counters": counters(status_delta(st0, st1)) if st0 and st1 else None}


def section_append(ch, prof, cpu, problems):
    """Extending writes and O_APPEND writes of 64 B to 1 MB on the loop
    file system: the page cache against cache mode, rounds alternating,
    every batch starting from an empty file (chell_bench_lat's append and
    extend cases)."""
    d = ch.dev.mnt / "append"
    d.mkdir(exist_ok=True)
    f, a = d / "f.bin", d / "a.bin"
    lat = ch.bin / "chell_bench_lat"
    sh([lat, "--prepare", str(2 * MB), "--file", f])
    ch.start_cache(max(256 * MB, 4 * prof["append_cap"]))
    st0 = ch.cache_status()
    raw = []
    for rnd, order in enumerate(arm_orders(("pagecache", "cache"), prof["lat_rounds"])):
        for arm in order:
            log(f"  append: round {rnd + 1}/{prof['lat_rounds']}, {arm}")
            cmd = [lat, "--file", f, "--append-file", a, "--append-cap", str(prof["append_cap"]),
                   "--sizes", ",".join(str(x) for x in APPEND_SIZES), "--ops", ",".join(APPEND_OPS),
                   "--patterns", "seq", "--no-prefault", "--cpu", str(cpu),
                   "--batch-ms", str(prof["lat_batch_ms"]), "--batches", str(prof["lat_batches"])]
            data = ch.run_json("plain" if arm == "pagecache" else arm, cmd)
            if not provider_ok(arm == "cache", data["provider"]["write"]):
                problems.append(f"append {arm}: write bound to {data['provider']['write']}")
            raw.append({"arm": arm, "round": rnd, "data": data})
    st1 = ch.cache_status()
    ch.stop_cache()
    summary = []
    for op in APPEND_OPS:
        for bs in APPEND_SIZES:
            row = {"op": op, "bs": bs}
            for arm in ("pagecache", "cache"):
                row[f"{arm}_ns"] = median([c["median_ns"] for r in raw if r["arm"] == arm
                                           for c in r["data"]["cases"] if c["op"] == op and c["bs"] == bs])
            row["cache_over_pagecache"] = ratio(row["cache_ns"], row["pagecache_ns"])
            summary.append(row)
    shutil.rmtree(d, ignore_errors=True)
    return {"raw": raw, "summary": summary, "cache_status_before": st0, "cache_status_after": st1,
            "cache_counters": counters(status_delta(st0, st1)) if st0 and st1 else None}


def fio_cmd(path, size, rw, seconds, cpu, extra=()):
    return ["fio", f"--name=chell-{rw}", f"--filename={path}", f"--size={size}", "--bs=4k", f"--rw={rw}",
            "--ioengine=psync", "--invalidate=0", f"--cpus_allowed={cpu}", "--output-format=json",
            f"--runtime={seconds}", "--time_based", *extra]


def fio_side(data, rw):
    job = data["jobs"][0]
    side = job["read"] if "read" in rw else job["write"]
    return {"iops": side["iops"], "ios": side.get("total_ios"), "clat_mean_ns": side.get("clat_ns", {}).get("mean"),
            "usr_cpu": job.get("usr_cpu"), "sys_cpu": job.get("sys_cpu")}


def zipf_run(ch, prof, cpu, path, fsize, limit, pool, theta, dist, rw, arm, tag):
    """One warm-up and one measured fio run of one arm; returns the record."""
    ch.stop_cache()
    drop_caches()
    with contextlib.ExitStack() as st:
        cg = MemCgroup(st, f"{arm}-{tag}", limit)
        st.callback(ch.stop_cache)  # before the cgroup is removed
        if arm == "cache":
            ch.start_cache(pool, cg)
        cg.reset_peak()
        ch.run(arm if arm == "cache" else "plain",
               fio_cmd(path, fsize, rw, prof["zipf_warm_s"], cpu, [dist, "--randseed=1"]), cgroup=cg)
        s0, d0 = ch.cache_status(), ch.dev.stat()
        data = ch.run_json(arm if arm == "cache" else "plain",
                           fio_cmd(path, fsize, rw, prof["zipf_run_s"], cpu, [dist, "--randseed=2"]),
                           cgroup=cg)
        d1, s1 = ch.dev.stat(), ch.cache_status()
        mem = cg.usage()
        ch.stop_cache()
    side = fio_side(data, rw)
    dd = dev_delta(d0, d1)
    ops = side["ios"] or 0
    rec = {"theta": theta, "rw": rw, "arm": arm, **side, "device": dd, "memcg": mem,
           "memcg_limit": cg.limit}
    # Each 4 KB miss of the page cache is one 4 KB device read
    # (fio advises POSIX_FADV_RANDOM: no readahead), so device
    # bytes read per byte asked for is the miss ratio. For cache
    # mode it counts fill bytes (a fill may read ahead).
    if ops:
        rec["device_read_per_op"] = dd["read_sectors"] * 512 / (ops * 4096)
        rec["device_hit_ratio"] = max(0.0, 1 - rec["device_read_per_op"])
        rec["device_write_per_op"] = dd["write_sectors"] * 512 / (ops * 4096)
    if arm == "cache" and s0 and s1:
        delta = status_delta(s0, s1)
        rec["cache_status_delta"] = delta
        rec["cache_counters"] = counters(delta)
        hits = pick(delta, "read_hits" if rw == "randread" else "write_hits")
        miss = pick(delta, "read_misses" if rw == "randread" else "write_misses")
        if hits is not None and miss is not None and hits + miss > 0:
            rec["chell_hit_ratio"] = hits / (hits + miss)
    if mem["failcnt"] and arm == "pagecache":
        rec["note"] = "page cache held at the cgroup limit (failcnt > 0), as intended"
    return rec


def section_zipf(ch, prof, cpu, slack, problems):
    fsize, pool = prof["zipf_file"], prof["zipf_pool"]
    path = ch.dev.mnt / "zipf.bin"
    sh([ch.bin / "chell_bench_lat", "--prepare", str(fsize), "--file", path])
    limit = pool + slack
    raw = []
    for theta in prof["thetas"]:
        # center 0.5: the hot set no longer depends on the seed, so the
        # warm-up (seed 1) and the measured run (seed 2) share it.
        dist = f"--random_distribution=zipf:{theta}:0.5"
        for rw in ("randread", "randwrite"):
            for arm in (["pagecache", "cache"] if len(raw) % 4 == 0 else ["cache", "pagecache"]):
                log(f"  zipf: theta {theta}, {rw}, {arm}")
                try:
                    raw.append(zipf_run(ch, prof, cpu, path, fsize, limit, pool, theta, dist, rw, arm, len(raw)))
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    # One failed run (a bug, an OOM in the cgroup) must not
                    # cost the other measurements: record it and go on.
                    log(f"    FAILED: {str(e)[-400:]}")
                    problems.append(f"zipf theta {theta} {rw} {arm}: failed: {str(e)[-300:]}")
                    raw.append({"theta": theta, "rw": rw, "arm": arm, "error": str(e)[-2000:]})
    path.unlink()
    summary = []
    for theta in prof["thetas"]:
        for rw in ("randread", "randwrite"):
            row = {"theta": theta, "rw": rw}
            for arm in ("pagecache", "cache"):
                r = next(x for x in raw if (x["theta"], x["rw"], x["arm"]) == (theta, rw, arm))
                row[f"{arm}_iops"] = r.get("iops")
                # Writes of whole 4 KB blocks read nothing from the device,
                # so only the manager's counters tell write hits from misses.
                row[f"{arm}_hit"] = r.get("chell_hit_ratio",
                                          r.get("device_hit_ratio") if rw == "randread" else None)
                row[f"{arm}_dev_read_per_op"] = r.get("device_read_per_op")
                row[f"{arm}_dev_write_per_op"] = r.get("device_write_per_op")
                row[f"{arm}_peak_mem"] = (r.get("memcg") or {}).get("max_usage")
                row[f"{arm}_shmem"] = (r.get("memcg") or {}).get("shmem")
            row["cache_over_pagecache"] = ratio(row["cache_iops"], row["pagecache_iops"])
            summary.append(row)
    return {"file_bytes": fsize, "pool_bytes": pool, "memcg_limit": limit, "raw": raw, "summary": summary}


def section_bdb(ch, prof, problems):
    prog = ch.bin / "chell_bench_bdbsync"
    if not prog.exists():
        return {"skipped": f"{prog.name} not built (install libdb-dev and re-run cmake)"}
    d = ch.dev.mnt / "bdb"
    d.mkdir(exist_ok=True)
    ch.start_cache(256 * MB)
    st0 = ch.cache_status()
    raw = []
    for threads in prof["bdb_threads"]:
        for rnd, order in enumerate(arm_orders(("pagecache", "cache"), prof["bdb_rounds"])):
            for arm in order:
                log(f"  bdb: {threads} thread(s), round {rnd + 1}/{prof['bdb_rounds']}, {arm}")
                d0 = ch.dev.stat()
                data = ch.run_json(arm if arm == "cache" else "plain",
                                   [prog, "--dir", d, "--sync", "txn", "--threads", str(threads), "--seconds",
                                    str(prof["bdb_seconds"]), "--keys", str(prof["bdb_keys"])])
                dd = dev_delta(d0, ch.dev.stat())
                for s in ("pwrite", "fdatasync"):
                    if not provider_ok(arm == "cache", data["provider"][s]):
                        problems.append(f"bdb {arm}: {s} bound to {data['provider'][s]}")
                raw.append({"arm": arm, "threads": threads, "round": rnd, "data": data, "device": dd})
    st = ch.cache_status()
    ch.stop_cache()
    summary = []
    for threads in prof["bdb_threads"]:
        row = {"threads": threads}
        for arm in ("pagecache", "cache"):
            rs = [r for r in raw if r["arm"] == arm and r["threads"] == threads]
            row[f"{arm}_ops_s"] = median([r["data"]["phases"]["mix"]["ops_per_s"] for r in rs])
            row[f"{arm}_put_sync_us"] = median([r["data"]["phases"]["mix"]["put_sync_mean_us"] for r in rs])
            row[f"{arm}_dev_writes_per_put"] = median([ratio(r["device"]["write_ios"],
                                                             r["data"]["phases"]["mix"]["puts"]) for r in rs])
        row["cache_over_pagecache"] = ratio(row["cache_ops_s"], row["pagecache_ops_s"])
        summary.append(row)
    return {"keys": prof["bdb_keys"], "seconds": prof["bdb_seconds"], "sync": "txn", "raw": raw, "summary": summary,
            "cache_status_before": st0, "cache_status_after": st,
            "cache_counters": counters(status_delta(st0, st)) if st0 and st else None}


def section_conc(ch, prof, problems):
    """Aggregate miss throughput of N concurrent clients: N fio processes
    (numjobs forks: each is a client of its own with its own connection to
    chelld), each reading 4 KB at random offsets of its own file, read once
    (fio's random map), from a cold cache big enough for all of them: every
    read is a miss that fills from the device. Page cache arm for
    reference (caches dropped first)."""
    d = ch.dev.mnt / "conc"
    d.mkdir(exist_ok=True)
    fsize, nmax = prof["conc_file"], max(prof["conc_clients"])
    for i in range(nmax):
        sh([ch.bin / "chell_bench_lat", "--prepare", str(fsize), "--file", d / f"conc.{i}"])
    raw = []
    for rnd in range(prof["conc_rounds"]):
        for n in prof["conc_clients"]:
            for arm in (("cache", "pagecache") if rnd % 2 == 0 else ("pagecache", "cache")):
                log(f"  conc: {n} client(s), round {rnd + 1}/{prof['conc_rounds']}, {arm}")
                ch.stop_cache()
                drop_caches()
                if arm == "cache":
                    ch.start_cache(nmax * fsize + 64 * MB)
                s0 = ch.cache_status()
                cmd = ["fio", "--name=conc", f"--directory={d}", "--filename_format=conc.$jobnum",
                       f"--size={fsize}", "--bs=4k", "--rw=randread", "--ioengine=psync", "--invalidate=0",
                       f"--numjobs={n}", "--group_reporting", "--output-format=json",
                       f"--runtime={prof['conc_s']}", "--time_based=0", f"--io_size={fsize // 2}"]
                data = ch.run_json(arm if arm == "cache" else "plain", cmd)
                s1 = ch.cache_status()
                ch.stop_cache()
                job = data["jobs"][0]
                rec = {"arm": arm, "clients": n, "round": rnd, "iops": job["read"]["iops"],
                       "ios": job["read"].get("total_ios"), "clat_mean_ns": job["read"].get("clat_ns", {}).get("mean")}
                if s0 and s1:
                    rec["cache_counters"] = counters(status_delta(s0, s1))
                    rec["fills_inflight_max"] = pick(flat_numbers(s1.get("stat") or {}), "fills_inflight_max")
                raw.append(rec)
    summary = []
    for n in prof["conc_clients"]:
        row = {"clients": n}
        for arm in ("pagecache", "cache"):
            row[f"{arm}_iops"] = median([r["iops"] for r in raw if r["arm"] == arm and r["clients"] == n])
        summary.append(row)
    one = next((r for r in summary if r["clients"] == 1), None)
    for row in summary:
        for arm in ("pagecache", "cache"):
            row[f"{arm}_over_one"] = ratio(row[f"{arm}_iops"], one and one[f"{arm}_iops"])
    return {"file_bytes": fsize, "raw": raw, "summary": summary}


def read_fio_log(path):
    """fio's per-interval log: msec, value, ... -> [(seconds, value)]."""
    pts = []
    for line in path.read_text().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 2:
            pts.append((int(f[0]) / 1000.0, float(f[1])))
    return pts


def cliff_arm(ch, prof, cpu, slack, tmp, path, pool, fsize, dev_iops, arm):
    """Sustained random writes in one arm, IOPS per second; returns the record."""
    log(f"  cliff: {arm}, {prof['cliff_s']} s of 4 KB random writes")
    drop_caches()
    with contextlib.ExitStack() as st:
        cg = MemCgroup(st, f"cliff-{arm}", pool + slack)
        st.callback(ch.stop_cache)  # before the cgroup is removed
        if arm == "cache":
            ch.start_cache(pool, cg)
        prefix = tmp / f"cliff-{arm}"
        samples, stop = [], threading.Event()

        def sampler():
            t0 = time.monotonic()
            while not stop.wait(1.0):
                s = ch.cache_status() if arm == "cache" else None
                samples.append({"t": round(time.monotonic() - t0, 2), "status": s, "memcg": cg.usage(),
                                "device": ch.dev.stat()})
        th = threading.Thread(target=sampler, daemon=True)
        d0 = ch.dev.stat()
        th.start()
        try:
            data = ch.run_json(arm if arm == "cache" else "plain",
                               fio_cmd(path, fsize, "randwrite", prof["cliff_s"], cpu,
                                       ["--norandommap", f"--write_iops_log={prefix}", "--log_avg_msec=1000"]),
                               cgroup=cg)
        finally:
            stop.set()
            th.join()
        s_end = ch.cache_status() if arm == "cache" else None
        t0 = time.monotonic()
        rc = ch.stop_cache() if arm == "cache" else None
        if arm == "pagecache":
            os.sync()
        drain_s = time.monotonic() - t0
        dd = dev_delta(d0, ch.dev.stat())
    logs = sorted(tmp.glob(f"cliff-{arm}_iops*.log"))
    series = read_fio_log(logs[0]) if logs else []
    # Per-second IOPS for the whole seconds 2 .. runtime-1 (the first has the
    # start-up, the last may be cut short). fio logs nothing for an interval
    # without a completed I/O, so a missing second is a second of 0 IOPS.
    bins = {round(t): v for t, v in series}
    vals = [bins.get(sec, 0.0) for sec in range(2, int(prof["cliff_s"]))]
    a = {"iops": fio_side(data, "randwrite")["iops"], "series": series,
         "min_iops": min(vals) if vals else None,
         "p5_iops": sorted(vals)[len(vals) // 20] if vals else None,
         "median_iops": median(vals), "drain_after_s": round(drain_s, 2), "stop_rc": rc,
         "device": dd, "samples": samples,
         "cache_counters": counters(status_delta({}, s_end)) if s_end else None}
    a["device_over_min"] = ratio(dev_iops, a["min_iops"])
    return a


def section_cliff(ch, prof, cpu, slack, tmp, problems, with_pagecache=True):
    pool = prof["cliff_pool"]
    fsize = pool * prof["cliff_mult"]
    path = ch.dev.mnt / "cliff.bin"
    sh([ch.bin / "chell_bench_lat", "--prepare", str(fsize), "--file", path])
    drop_caches()
    log("  cliff: device rate (O_DIRECT, no Chell)")
    data = ch.run_json("plain", fio_cmd(path, fsize, "randwrite", prof["cliff_dev_s"], cpu, ["--direct=1"]))
    dev_iops = fio_side(data, "randwrite")["iops"]
    res = {"pool_bytes": pool, "file_bytes": fsize, "seconds": prof["cliff_s"], "device_iops": dev_iops,
           "arms": {}}
    for arm in (["cache", "pagecache"] if with_pagecache else ["cache"]):
        try:
            res["arms"][arm] = cliff_arm(ch, prof, cpu, slack, tmp, path, pool, fsize, dev_iops, arm)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            log(f"    FAILED: {str(e)[-400:]}")
            problems.append(f"sustained writes, {arm}: failed: {str(e)[-300:]}")
            res["arms"][arm] = {"error": str(e)[-2000:]}
    path.unlink()
    return res


# ---------------------------------------------------------------- analysis

# ---------------------------------------------------------------- gluster

# N single-row transactions in WAL mode with synchronous=full: what a new
# user of sqlite on a distributed file system runs. JSON on stdout.
SQLITE_PROG = r'''
import json, os, sqlite3, sys, time
path, n = sys.argv[1], int(sys.argv[2])
for s in ("", "-wal", "-shm", "-journal"):
    try:
        os.unlink(path + s)
    except FileNotFoundError:
        pass
db = sqlite3.connect(path, isolation_level=None)
db.execute("pragma journal_mode=wal")
db.execute("pragma synchronous=full")
db.execute("create table t(k integer primary key, v blob)")
t = time.perf_counter()
for i in range(n):
    db.execute("begin")
    db.execute("insert into t values(?, ?)", (i, os.urandom(100)))
    db.execute("commit")
dt = time.perf_counter() - t
db.close()
print(json.dumps({"txns": n, "seconds": dt, "provider": {}}))
'''
GL_ARMS = ("gluster", "cache", "cache_backing_locks")  # the mount alone; cache mode; cache, kernel locks


def section_gluster(ch, prof, cpu, problems):
    """Cache mode in front of a GlusterFS volume (module docstring)."""
    gl = REPO / "scripts" / "gluster.sh"
    was_up = sh([gl, "status"], check=False).returncode == 0
    r = sh([gl, "up"], check=False, timeout=600)
    if r.returncode == 3:
        return {"skipped": (r.stderr.strip().splitlines() or ["GlusterFS cannot run here"])[-1]}
    if r.returncode != 0:
        raise RuntimeError(f"scripts/gluster.sh up: {r.stderr.strip()[-500:]}")
    mnt = Path(r.stdout.strip().splitlines()[-1])
    gdir = Path(tempfile.mkdtemp(prefix="chell-bench-gluster-", dir=mnt))
    prog = ch.shm / "sqlite_txns.py"
    prog.write_text(SQLITE_PROG)
    out = {"mount": str(mnt), "mount_info": mount_of(mnt)}
    try:
        ch.start_cache(256 * MB, backing=[gdir, ch.dev.mnt])
        st0 = ch.cache_status()

        def arm_run(arm, cmd):
            if arm == "gluster":
                return ch.run_json("plain", cmd)
            sets = ["cache.locks=backing" if arm == "cache_backing_locks" else "cache.locks=local"]
            return ch.run_json("cache", cmd, path=gdir, sets=sets)

        raw = []
        for rnd, order in enumerate(arm_orders(GL_ARMS, prof["gl_rounds"])):
            for arm in order:
                log(f"  gluster sqlite: round {rnd + 1}/{prof['gl_rounds']}, {arm}")
                d = arm_run(arm, [sys.executable, prog, gdir / f"sq-{arm}.db", prof["gl_txns"]])
                raw.append({"bench": "sqlite", "arm": arm, "round": rnd,
                            "txn_s": d["txns"] / d["seconds"], "us_per_txn": 1e6 * d["seconds"] / d["txns"]})
        bdb = ch.bin / "chell_bench_bdbsync"
        if bdb.exists():
            for rnd, order in enumerate(arm_orders(GL_ARMS, prof["gl_rounds"])):
                for arm in order:
                    log(f"  gluster bdb: round {rnd + 1}/{prof['gl_rounds']}, {arm}")
                    bd = gdir / f"bdb-{arm}"
                    shutil.rmtree(bd, ignore_errors=True)
                    bd.mkdir()
                    d = arm_run(arm, [bdb, "--dir", bd, "--sync", "txn", "--threads", "1", "--seconds",
                                      str(prof["gl_bdb_seconds"]), "--keys", str(prof["gl_bdb_keys"])])
                    raw.append({"bench": "bdb", "arm": arm, "round": rnd,
                                "txn_s": d["phases"]["mix"]["ops_per_s"],
                                "put_sync_us": d["phases"]["mix"]["put_sync_mean_us"]})
        else:
            out["bdb_skipped"] = f"{bdb.name} not built (install libdb-dev and re-run cmake)"
        # 4 KB read hits: the same file on ext4 (the loop device) and on
        # GlusterFS, read once through the cache before timing
        lat = ch.bin / "chell_bench_lat"
        files = {"ext4": ch.dev.mnt / "gl-lat.bin", "gluster": gdir / "gl-lat.bin"}
        for f in files.values():
            sh([lat, "--prepare", str(prof["gl_lat_file"]), "--file", f])
        for rnd, order in enumerate(arm_orders(tuple(files), prof["lat_rounds"])):
            for where in order:
                log(f"  gluster lat: round {rnd + 1}/{prof['lat_rounds']}, backing on {where}")
                d = ch.run_json("cache", [lat, "--file", files[where], "--sizes", "4096", "--ops", "read",
                                          "--patterns", "rand", "--cpu", str(cpu), "--batch-ms",
                                          str(prof["lat_batch_ms"]), "--batches", str(prof["lat_batches"])],
                                path=files[where].parent)
                if not provider_ok(True, d["provider"]["pread"]):
                    problems.append(f"gluster lat {where}: pread bound to {d['provider']['pread']}")
                raw.append({"bench": "lat", "arm": where, "round": rnd,
                            "median_ns": median([c["median_ns"] for c in d["cases"]])})
        out["cache_counters"] = counters(status_delta(st0, ch.cache_status()))
    finally:
        ch.stop_cache()
        shutil.rmtree(gdir, ignore_errors=True)
        if not was_up:
            sh([gl, "down"], check=False, timeout=600)
    summary = {}
    for bench, key in (("sqlite", "txn_s"), ("bdb", "txn_s")):
        row = {a: median([r[key] for r in raw if r["bench"] == bench and r["arm"] == a]) for a in GL_ARMS}
        if row["gluster"] is None:
            continue
        row["spread"] = {a: [round(r[key], 1) for r in raw if r["bench"] == bench and r["arm"] == a]
                         for a in GL_ARMS}
        row["cache_over_gluster"] = ratio(row["cache"], row["gluster"])
        row["backing_locks_over_gluster"] = ratio(row["cache_backing_locks"], row["gluster"])
        summary[bench] = row
    lat_row = {w: median([r["median_ns"] for r in raw if r["bench"] == "lat" and r["arm"] == w])
               for w in ("ext4", "gluster")}
    lat_row["gluster_over_ext4"] = ratio(lat_row["gluster"], lat_row["ext4"])
    summary["lat"] = lat_row
    out.update({"raw": raw, "summary": summary, "txns": prof["gl_txns"], "bdb_seconds": prof["gl_bdb_seconds"],
                "bdb_keys": prof["gl_bdb_keys"], "lat_file": prof["gl_lat_file"]})
    return out


def gluster_markdown(res):
    g = res.get("gluster")
    if not g:
        return ""
    if "skipped" in g:
        return f"**GlusterFS**: skipped ({g['skipped']})."
    if "error" in g:
        return f"**GlusterFS: FAILED** - {g['error'][:500]}"
    cfg, s, L = res["config"], g["summary"], []
    L.append(f"Run {res['when']} ({cfg['profile']} profile), commit {res['build'].get('commit', '?')}; "
             f"GlusterFS volume served on this machine by `scripts/gluster.sh` (one brick, FUSE mount on "
             f"loopback, `{g.get('mount_info', '')}`); cache pool on tmpfs; {cfg['gl_rounds']} round(s), arms "
             "alternated; median (every run in brackets).")
    L.append("")
    L.append("| workload | GlusterFS mount alone | cache mode | cache mode, locks on the backing file | "
             "cache / mount | cache (backing locks) / mount |")
    L.append("|---|---:|---:|---:|---:|---:|")
    names = {"sqlite": f"sqlite3 WAL, synchronous=full, {g['txns']} single-row transactions (txn/s)",
             "bdb": f"Berkeley DB btree, fdatasync per put, 1 thread, {g['bdb_seconds']} s (ops/s)"}
    for bench in ("sqlite", "bdb"):
        r = s.get(bench)
        if not r:
            continue
        sp = r["spread"]
        L.append(f"| {names[bench]} | {fmt(r['gluster'])} {sp['gluster']} | {fmt(r['cache'])} {sp['cache']} | "
                 f"{fmt(r['cache_backing_locks'])} {sp['cache_backing_locks']} | "
                 f"{fmt(r['cache_over_gluster'], '.1f')} | {fmt(r['backing_locks_over_gluster'], '.1f')} |")
    lr = s.get("lat", {})
    L.append("")
    L.append(f"4 KB random read hit under cache mode, file of {mib(g['lat_file'])} read once before timing: "
             f"backing on ext4 {fmt(lr.get('ext4'))} ns, on GlusterFS {fmt(lr.get('gluster'))} ns "
             f"(GlusterFS / ext4 {fmt(lr.get('gluster_over_ext4'), '.2f')}).")
    L.append("")
    L.append(counters_line("chelld over the GlusterFS section", g.get("cache_counters")))
    return "\n".join(L)


def targets(res):
    out = []

    def add(name, value, op, threshold, note=""):
        ok = None if value is None else (value <= threshold if op == "<=" else value >= threshold)
        out.append({"target": name, "value": value, "op": op, "threshold": threshold, "pass": ok, "note": note})

    lat = (res.get("lat") or {}).get("summary") or {}
    r, w = lat.get("read", {}), lat.get("write", {})
    add("4 KB read hit: 1 - cache/pagecache", r.get("cache_over_pagecache") and 1 - r["cache_over_pagecache"],
        ">=", 0.35, "latency reduction vs page-cache pread")
    add("4 KB write hit: 1 - cache/pagecache", w.get("cache_over_pagecache") and 1 - w["cache_over_pagecache"],
        ">=", 0.50, "latency reduction vs page-cache pwrite")
    add("4 KB read hit: cache/direct", r.get("cache_over_direct"), "<=", 1.20)
    add("4 KB write hit: cache/direct", w.get("cache_over_direct"), "<=", 1.20)
    bdb = (res.get("bdb") or {}).get("summary") or []
    vals = [b["cache_over_pagecache"] for b in bdb]
    add("Berkeley DB + fdatasync: cache/pagecache, worst thread count",
        min(vals) if vals and None not in vals else None, ">=", 3.0)
    conc = (res.get("conc") or {}).get("summary") or []
    many = max(conc, key=lambda r: r["clients"]) if conc else {}
    add(f"concurrent misses: {many.get('clients', 8)} clients / 1 client, aggregate (cache mode)",
        many.get("cache_over_one"), ">=", 4.0)
    z = (res.get("zipf") or {}).get("summary") or []
    zr = [r["cache_over_pagecache"] for r in z if r["rw"] == "randread"]
    zw = [r["cache_over_pagecache"] for r in z if r["rw"] == "randwrite"]
    add("fio zipf randread: cache/pagecache, worst theta", min(zr) if zr and None not in zr else None, ">=", 1.2)
    add("fio zipf randwrite: cache/pagecache, worst theta", min(zw) if zw and None not in zw else None, ">=", 0.8)
    gs = (res.get("gluster") or {}).get("summary") or {}
    add("GlusterFS: sqlite3 WAL synchronous=full, cache/mount", (gs.get("sqlite") or {}).get("cache_over_gluster"),
        ">=", 10.0)
    add("GlusterFS: Berkeley DB fdatasync per put, cache/mount", (gs.get("bdb") or {}).get("cache_over_gluster"),
        ">=", 10.0)
    add("GlusterFS: 4 KB read hit, backing on GlusterFS / on ext4", (gs.get("lat") or {}).get("gluster_over_ext4"),
        "<=", 1.10, "the same latency")
    cl = ((res.get("cliff") or {}).get("arms") or {}).get("cache")
    add("sustained random writes: device rate / worst second of cache mode",
        cl and cl.get("device_over_min"), "<=", 2.0)
    return out


# ---------------------------------------------------------------- report

def fmt(v, spec=".0f"):
    return "-" if v is None else format(v, spec)


def pct(v):
    return "-" if v is None else f"{100 * v:.1f}%"


def counters_line(what, c):
    if not c:
        return ""
    return f"Counters of {what}: " + ", ".join(f"{k} {v}" for k, v in c.items()) + ".\n"


def markdown(res):
    cfg, m, dev = res["config"], res["machine"], res.get("device", {})
    L = []
    mode = cfg["cache_arm_mode"]
    note = "`--mode cache`" if mode == "cache" else (
        f"`--mode {mode}` (**not cache mode**: {cfg.get('fallback_reason') or 'requested'}; these numbers "
        "validate the harness only)")
    thr = dev.get("throttle")
    L.append(f"Run {res['when']} ({cfg['profile']} profile), cache arm: {note}; commit "
             f"{res['build'].get('commit', '?')}{' (src/include modified)' if res['build'].get('src_dirty') else ''}, "
             f"{res['build'].get('build_type', '?')} build. Machine: {m.get('cores')} x {m.get('cpu_model')}, "
             f"{m.get('mem_gib', '?')} GiB, Linux {m.get('kernel')}. Slow device: `{dev.get('device')}`, ext4 on a "
             f"loop image on `{dev.get('image_on')}`, loop direct I/O {'on' if dev.get('loop_direct_io') else 'OFF'}, "
             f"throttle {thr if isinstance(thr, str) else ', '.join(f'{k}={v}' for k, v in thr.items())}. "
             f"Fast tier: `/dev/shm` (tmpfs). CPU busy with other work before the run: {cfg.get('busy_before', 0):.0%}.")
    L.append("")
    if res.get("problems"):
        L.append("**Problems found by the run's own checks:** " + "; ".join(res["problems"]))
        L.append("")
    L.append("**Targets** (reported, never enforced):")
    L.append("")
    L.append("| target | measured | goal | verdict |")
    L.append("|---|---|---|---|")
    for t in res.get("targets", []):
        verdict = "n/a" if t["pass"] is None else ("PASS" if t["pass"] else "FAIL")
        L.append(f"| {t['target']} | {fmt(t['value'], '.2f')} | {t['op']} {t['threshold']} | {verdict} |")
    L.append("")
    for name in ("lat", "append", "zipf", "bdb", "cliff", "conc"):
        if isinstance(res.get(name), dict) and "error" in res[name]:
            L.append(f"**{name}: FAILED** - {res[name]['error'][:500]}")
            L.append("")
    lat = res.get("lat")
    if lat and "summary" in lat:
        L.append(f"**4 KB hit latency** (ns/op, median of {cfg['lat_rounds']} run(s) x {cfg['lat_batches']} "
                 f"batches; random offsets in a {mib(lat['file_bytes'])} file read once before timing, so every "
                 "arm hits; page cache and cache mode on the loop file, direct and memcpy on a tmpfs copy):")
        L.append("")
        L.append("| op | page cache | cache mode | direct | memcpy | cache/page cache | cache/direct | "
                 "cache/memcpy | fastest batches: cache/page cache |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for op in ("read", "write"):
            r = lat["summary"][op]
            L.append(f"| {op} | {fmt(r['pagecache_ns'])} | {fmt(r['cache_ns'])} | {fmt(r['direct_ns'])} | "
                     f"{fmt(r['memcpy_ns'])} | {fmt(r['cache_over_pagecache'], '.2f')} | "
                     f"{fmt(r['cache_over_direct'], '.2f')} | {fmt(r['cache_over_memcpy'], '.2f')} | "
                     f"{fmt(r['best_cache_over_pagecache'], '.2f')} |")
        L.append("")
        L.append(counters_line("chelld over the latency section", lat.get("cache_counters")))
    ap = res.get("append")
    if ap and "summary" in ap:
        L.append(f"**Extending writes and appends** (ns/op, median of {cfg['lat_rounds']} run(s) x "
                 f"{cfg['lat_batches']} batches; `write()` at the end of a growing file (extend) and on an "
                 f"O_APPEND descriptor (append), every batch from an empty file of the loop file system, at most "
                 f"{mib(cfg.get('append_cap'))} a batch):")
        L.append("")
        L.append("| op | " + " | ".join(f"{b // 1024} KB" if b >= 1024 else f"{b} B" for b in APPEND_SIZES) + " |")
        L.append("|---|" + "---:|" * len(APPEND_SIZES))
        for op in APPEND_OPS:
            rows = [r for r in ap["summary"] if r["op"] == op]
            for arm, key in (("page cache", "pagecache_ns"), ("cache", "cache_ns")):
                L.append(f"| {op}, {arm} | " + " | ".join(fmt(r[key]) for r in rows) + " |")
            L.append(f"| {op}, cache/page cache | " + " | ".join(fmt(r["cache_over_pagecache"], ".2f") for r in rows)
                     + " |")
        L.append("")
        L.append(counters_line("chelld over the append section", ap.get("cache_counters")))
    z = res.get("zipf")
    if z and "summary" in z:
        L.append(f"**fio zipf** (4 KB, psync, one job; {mib(z['file_bytes'])} file, cache pool "
                 f"{mib(z['pool_bytes'])}; each arm's processes (fio, and chelld for cache mode) in a memory "
                 f"cgroup limited to {mib(z['memcg_limit'])}; caches dropped and a fresh pool before each "
                 f"pair of runs: {cfg['zipf_warm_s']} s warm-up, then {cfg['zipf_run_s']} s measured; hit ratio "
                 "= chell's own counters where the manager reports them, else 1 - device bytes read / bytes "
                 "asked for; device I/O per op = device bytes read (randread) or written (randwrite) per 4 KB "
                 "asked for):")
        L.append("")
        L.append("| theta | workload | page cache IOPS | cache IOPS | cache/page cache | page cache hit | "
                 "cache hit | device I/O per op, pc / cache | peak memory pc / cache | pool data (tmpfs) at the end |")
        L.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in z["summary"]:
            io = "read" if r["rw"] == "randread" else "write"
            L.append(f"| {r['theta']} | {r['rw']} | {fmt(r['pagecache_iops'])} | {fmt(r['cache_iops'])} | "
                     f"{fmt(r['cache_over_pagecache'], '.2f')} | "
                     f"{pct(r['pagecache_hit'])} | {pct(r['cache_hit'])} | "
                     f"{fmt(r[f'pagecache_dev_{io}_per_op'], '.3f')} / {fmt(r[f'cache_dev_{io}_per_op'], '.3f')} {io} | "
                     f"{mib(r['pagecache_peak_mem'])} / {mib(r['cache_peak_mem'])} | "
                     f"{mib(r.get('cache_shmem'))} |")
        L.append("")
        for x in z["raw"]:
            if x["arm"] == "cache" and x.get("cache_counters"):
                L.append(f"- theta {x['theta']} {x['rw']}: " + ", ".join(f"{k} {v}" for k, v in
                                                                       x["cache_counters"].items()))
        L.append("")
    b = res.get("bdb")
    if b and "summary" in b:
        L.append(f"**Berkeley DB btree, every put durable** (`--sync {b.get('sync', 'txn')}`: each put a "
                 "transaction whose commit writes the log and calls fdatasync on it; "
                 f"{b['keys']} keys of 500 B, 35% gets / 65% puts, {b['seconds']} s per run; ops/s, median):")
        L.append("")
        L.append("| threads | page cache ops/s | cache ops/s | cache/page cache | put+sync page cache | "
                 "put+sync cache | device writes per put (pc / cache) |")
        L.append("|---:|---:|---:|---:|---:|---:|---:|")
        for r in b["summary"]:
            L.append(f"| {r['threads']} | {fmt(r['pagecache_ops_s'])} | {fmt(r['cache_ops_s'])} | "
                     f"{fmt(r['cache_over_pagecache'], '.2f')} | {fmt(r['pagecache_put_sync_us'], '.1f')} us | "
                     f"{fmt(r['cache_put_sync_us'], '.1f')} us | {fmt(r['pagecache_dev_writes_per_put'], '.2f')} / "
                     f"{fmt(r['cache_dev_writes_per_put'], '.2f')} |")
        L.append("")
        L.append(counters_line("chelld over the Berkeley DB runs", b.get("cache_counters")))
    elif b and "skipped" in b:
        L.append(f"**Berkeley DB**: skipped ({b['skipped']}).")
        L.append("")
    c = res.get("cliff")
    if c and "arms" in c:
        L.append(f"**Sustained 4 KB random writes** over a {mib(c['file_bytes'])} file, pool "
                 f"{mib(c['pool_bytes'])}, {c['seconds']} s (fio psync, uniform offsets; IOPS per 1-s interval). "
                 f"Device rate (fio O_DIRECT on the same file, no Chell): **{fmt(c['device_iops'])} IOPS**.")
        L.append("")
        L.append("| arm | mean IOPS | worst second | 5th percentile | median second | device / worst | "
                 "drain after the run |")
        L.append("|---|---:|---:|---:|---:|---:|---:|")
        for arm, a in c["arms"].items():
            if "error" in a:
                L.append(f"| {arm} | failed: {a['error'][-200:]} | | | | | |".replace("\n", " "))
                continue
            L.append(f"| {arm} | {fmt(a['iops'])} | {fmt(a['min_iops'])} | {fmt(a['p5_iops'])} | "
                     f"{fmt(a['median_iops'])} | {fmt(a['device_over_min'], '.2f')} | {a['drain_after_s']} s |")
        L.append("")
        L.append(counters_line("chelld at the end of the sustained writes",
                               (c["arms"].get("cache") or {}).get("cache_counters")))
    cc = res.get("conc")
    if cc and "summary" in cc:
        L.append(f"**Concurrent misses** (fio psync 4 KB randread, N processes = N clients, each its own "
                 f"{mib(cc['file_bytes'])} file read once at random offsets from a cold cache, so every read is "
                 f"a miss that fills from the device; aggregate IOPS, median of {cfg.get('conc_rounds', 1)} "
                 "round(s); the page cache (caches dropped) for reference):")
        L.append("")
        L.append("| clients | page cache IOPS | cache IOPS | page cache / 1 client | cache / 1 client | "
                 "most fills at once |")
        L.append("|---:|---:|---:|---:|---:|---:|")
        for r in cc["summary"]:
            fl = [x.get("fills_inflight_max") for x in cc["raw"]
                  if x["arm"] == "cache" and x["clients"] == r["clients"] and x.get("fills_inflight_max")]
            L.append(f"| {r['clients']} | {fmt(r['pagecache_iops'])} | {fmt(r['cache_iops'])} | "
                     f"{fmt(r['pagecache_over_one'], '.2f')} | {fmt(r['cache_over_one'], '.2f')} | "
                     f"{max(fl) if fl else '-'} |")
        L.append("")
    return "\n".join(L)


def nan(v):
    return float("nan") if v is None else v


def labels(axis, xlabel, ylabel, title):
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.legend(fontsize=8)


def arm_lines(axis, col, rows, key, groups, x, y):
    """One line per arm (page cache, cache) and group (rows[key]): solid for
    the first group, dashed for the second."""
    for g, style in zip(groups, ("-", "--")):
        sel = [r for r in rows if r[key] == g]
        for arm in ("pagecache", "cache"):
            axis.plot([r[x] for r in sel], [nan(r[f"{arm}_{y}"]) for r in sel], style, marker="o",
                      color=col[arm], label=f"{arm} {g}")


def plot(path, res):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no plot")
        return False
    col = {"pagecache": "#d62728", "cache": "#1f77b4", "direct": "#9467bd", "memcpy": "#2ca02c"}
    fig, ax = plt.subplots(3, 3, figsize=(18, 13))
    ax = ax.ravel()
    lat = (res.get("lat") or {}).get("summary")
    if lat:
        for i, arm in enumerate(LAT_ARMS):
            ax[0].bar([j + (i - 1.5) * 0.2 for j in range(2)], [lat[op][f"{arm}_ns"] or 0 for op in ("read", "write")],
                      0.2, color=col[arm], label=arm)
        ax[0].set_xticks([0, 1])
        ax[0].set_xticklabels(["4 KB read hit", "4 KB write hit"])
        ax[0].set_yscale("log")
        ax[0].set_ylabel("ns/op (log)")
        ax[0].set_title("4 KB hit latency")
        ax[0].legend(fontsize=8)
    z = (res.get("zipf") or {}).get("summary")
    if z:
        arm_lines(ax[1], col, z, "rw", ("randread", "randwrite"), "theta", "iops")
        for arm in ("pagecache", "cache"):
            rows = [r for r in z if r["rw"] == "randread"]
            ax[2].plot([r["theta"] for r in rows], [100 * nan(r[f"{arm}_hit"]) for r in rows], marker="o",
                       color=col[arm], label=arm)
        ax[1].set_yscale("log")
        ax[1].set_xlabel("zipf theta")
        ax[1].set_ylabel("IOPS")
        ax[1].set_title("fio 4 KB zipf, file > cache")
        ax[1].legend(fontsize=8)
        ax[2].set_xlabel("zipf theta")
        ax[2].set_ylabel("read hit ratio %")
        ax[2].set_title("hit ratio (randread)")
        ax[2].legend(fontsize=8)
    b = (res.get("bdb") or {}).get("summary")
    if b:
        for i, arm in enumerate(("pagecache", "cache")):
            ax[3].bar([j + (i - 0.5) * 0.35 for j in range(len(b))], [r[f"{arm}_ops_s"] or 0 for r in b], 0.35,
                      color=col[arm], label=arm)
        ax[3].set_xticks(range(len(b)))
        ax[3].set_xticklabels([f"{r['threads']} thread(s)\n{fmt(r['cache_over_pagecache'], '.1f')}x" for r in b])
        ax[3].set_yscale("log")
        ax[3].set_ylabel("ops/s")
        ax[3].set_title("Berkeley DB btree, fdatasync per put")
        ax[3].legend(fontsize=8)
    c = res.get("cliff")
    if c and "arms" in c:
        for arm, a in c["arms"].items():
            if a.get("series"):
                ax[4].plot([t for t, _ in a["series"]], [v for _, v in a["series"]], marker=".", color=col[arm],
                           label=arm)
        ax[4].axhline(c["device_iops"], color="black", label="device (O_DIRECT)")
        ax[4].axhline(c["device_iops"] / 2, color="black", linestyle=":", label="device / 2")
        ax[4].set_yscale("log")
        ax[4].set_xlabel("seconds")
        ax[4].set_ylabel("IOPS (1 s intervals)")
        ax[4].set_title(f"sustained 4 KB random writes, file = {c['file_bytes'] // c['pool_bytes']}x pool")
        ax[4].legend(fontsize=8)
        ca = c["arms"].get("cache", {})
        pts = []
        for smp in ca.get("samples", []):
            st = flat_numbers((smp.get("status") or {}).get("stat"))
            used = pick(st, "used_bytes")
            if used is None and pick(st, "slots"):
                # older chelld: slots in use times the slot size
                used = (pick(st, "slots_used") or 0) * (pick(st, "size") or 0) / pick(st, "slots")
            pts.append((smp["t"], pick(st, "dirty_bytes"), used))
        if pts and any(p[1] is not None for p in pts):
            ax[5].plot([p[0] for p in pts], [(p[1] or 0) / MB for p in pts], color=col["cache"],
                       label="dirty MB (cache)")
            if any(p[2] is not None for p in pts):
                ax[5].plot([p[0] for p in pts], [(p[2] or 0) / MB for p in pts], "--", color=col["cache"],
                           label="pool MB in use")
            labels(ax[5], "seconds", "MB", "cache pool during the sustained writes")
        else:
            ax[5].axis("off")
    ap = (res.get("append") or {}).get("summary")
    if ap:
        arm_lines(ax[6], col, ap, "op", APPEND_OPS, "bs", "ns")
        ax[6].set_xscale("log", base=2)
        ax[6].set_yscale("log")
        labels(ax[6], "bytes per write", "ns/op (log)", "extending writes and O_APPEND writes")
    else:
        ax[6].axis("off")
    gs = (res.get("gluster") or {}).get("summary")
    if gs and any(b in gs for b in ("sqlite", "bdb")):
        benches = [b for b in ("sqlite", "bdb") if b in gs]
        gcol = {"gluster": "#d62728", "cache": "#1f77b4", "cache_backing_locks": "#17becf"}
        for i, arm in enumerate(GL_ARMS):
            ax[7].bar([j + (i - 1) * 0.27 for j in range(len(benches))], [gs[b][arm] or 0 for b in benches],
                      0.27, color=gcol[arm], label=arm.replace("_", " "))
        ax[7].set_xticks(range(len(benches)))
        ax[7].set_xticklabels([{"sqlite": "sqlite3 WAL full", "bdb": "BDB fdatasync/put"}[b] for b in benches])
        ax[7].set_yscale("log")
        labels(ax[7], "", "transactions/s (log)", "on a GlusterFS volume")
        ax[7].legend(fontsize=8)
    else:
        ax[7].axis("off")
    for extra in ax[8:]:
        extra.axis("off")
    mode = res["config"]["cache_arm_mode"]
    fig.suptitle(f"Chell cache-mode benchmarks: cache arm = --mode {mode}"
                 + ("" if mode == "cache" else " (NOT cache mode: harness validation only)")
                 + f" - {res['machine'].get('cpu_model')}, {res['config']['profile']} profile")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def update_doc(doc, md, begin=DOC_BEGIN, end=DOC_END):
    """Replace what lies between the markers begin and end in doc by md
    (scripts/bench_suite.py uses it with its own markers)."""
    text = doc.read_text()
    if begin not in text or end not in text:
        log(f"{doc}: no '{begin}' ... '{end}' markers: not updated")
        return False
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(head + begin + "\n" + md + "\n" + end + tail)
    return True


def report(res, out, doc=None):
    out.mkdir(parents=True, exist_ok=True)
    (out / "cache.json").write_text(json.dumps(res, indent=1) + "\n")
    md = markdown(res)
    (out / "cache.md").write_text(md + "\n")
    print(md)
    if plot(out / "cache.png", res):
        print(f"\nplot: {out / 'cache.png'}")
    print(f"json: {out / 'cache.json'}\ntables: {out / 'cache.md'}")
    if doc and any(k in res for k in ("lat", "append", "zipf", "bdb", "cliff")) and update_doc(doc, md):
        print(f"updated: {doc}")
    gmd = gluster_markdown(res)
    if gmd:
        (out / "cache-gluster.md").write_text(gmd + "\n")
        print(gmd)
        if doc and update_doc(doc, gmd, GLUSTER_BEGIN, GLUSTER_END):
            print(f"updated: {doc} (GlusterFS)")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=REPO / "build")
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench")
    ap.add_argument("--quick", action="store_true", help="smaller files, shorter runs (< 2 minutes)")
    ap.add_argument("--mode", default="cache", help="mode of the cache arm (default cache; falls back to posix)")
    ap.add_argument("--only", default="lat,append,zipf,bdb,cliff,conc",
                    help="comma-separated sections: lat,append,zipf,bdb,cliff,conc (the default) and gluster")
    ap.add_argument("--cpu", type=int, default=(os.cpu_count() or 1) - 1, help="CPU for single-threaded runs")
    ap.add_argument("--image-dir", type=Path, default=Path("/var/tmp"),
                    help="where the loop image file goes (must be on the real disk, not tmpfs)")
    ap.add_argument("--cgroup-slack", default="32M",
                    help="memory allowed above the pool size in the zipf/cliff memory cgroups (both arms)")
    for key in ("read_bps", "write_bps", "read_iops", "write_iops"):
        ap.add_argument(f"--throttle-{key.replace('_', '-')}", default=None, metavar="N",
                        help=f"blkio throttle of the loop device ({key.replace('_', ' ')}; bps accepts k/m/g)")
    ap.add_argument("--chelld-arg", action="append", metavar="ARG",
                    help="extra option for `chell cache start`, e.g. --chelld-arg=--readahead=4K (repeatable)")
    ap.add_argument("--no-cliff-pagecache", action="store_true",
                    help="sustained writes: skip the page-cache arm")
    ap.add_argument("--wait-quiet", type=int, default=0, metavar="SECONDS",
                    help="first wait up to SECONDS for the machine to be idle (< 15%% busy)")
    ap.add_argument("--doc", type=Path, help="also replace the generated tables in this file")
    ap.add_argument("--from-json", type=Path, metavar="FILE", help="only redo the report from FILE")
    args = ap.parse_args()
    args.build = args.build.resolve()

    if args.from_json:
        res = json.loads(args.from_json.read_text())
        res["targets"] = targets(res)
        report(res, args.out, args.doc)
        return 0
    if os.geteuid() != 0:
        log("bench_cache.py needs root (loop device, mount, cgroups, drop_caches)")
        return 2
    for prog in ("chell", "chell_bench_lat"):
        if not (args.build / "bin" / prog).exists():
            log(f"{args.build / 'bin' / prog} missing: build first (cmake -S . -B build -G Ninja && ninja -C build)")
            return 2
    for tool in ("fio", "losetup", "mkfs.ext4"):
        if not shutil.which(tool):
            log(f"{tool} not found (scripts/setup.sh installs the dependencies)")
            return 2
    if "tmpfs" in mount_of(args.image_dir).split()[1:2]:
        log(f"--image-dir {args.image_dir} is on tmpfs: the slow device must be on the real disk")
        return 2
    only = set(args.only.split(","))
    prof = PROFILES["quick" if args.quick else "full"]
    slack = parse_size(args.cgroup_slack)
    throttle = {k: (str(parse_size(v)) if v else None) for k, v in
                (("read_bps", args.throttle_read_bps), ("write_bps", args.throttle_write_bps),
                 ("read_iops", args.throttle_read_iops), ("write_iops", args.throttle_write_iops))}
    # SIGTERM/SIGHUP unwind like Ctrl-C, so the device and cgroups are torn down.
    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)

    t_start = time.monotonic()
    problems, failed = [], []
    with contextlib.ExitStack() as stack:
        log("setting up the slow device")
        dev = SlowDevice(stack, args.image_dir, prof["image"], throttle)
        tmp = Path(tempfile.mkdtemp(prefix="chell-bench-cache-aux-"))
        stack.callback(shutil.rmtree, tmp, True)
        ch = Chell(args, dev, stack)
        ok, why = ch.probe_cache_mode()
        fallback = None
        if not ok:
            fallback = f"cache mode does not work in this build: {why}"
            log(f"WARNING: {fallback}\n         the cache arm runs --mode posix: harness validation only")
            ch.mode = "posix"
        busy = cpu_busy(2)
        deadline = time.monotonic() + args.wait_quiet
        while busy > 0.15 and time.monotonic() < deadline:
            log(f"  machine busy ({busy:.0%} of CPU time), waiting...")
            busy = cpu_busy(3)
        if busy > 0.15:
            log(f"WARNING: {busy:.0%} of CPU time was busy with other work before the run: expect noise")
        res = {"schema": 1, "when": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine_info(),
               "build": build_info(args.build), "device": dev.describe(),
               "config": {"profile": "quick" if args.quick else "full", "requested_mode": args.mode,
                          "cache_arm_mode": ch.mode, "fallback_reason": fallback,
                          "probe": why if ok else None, "cpu": args.cpu, "cgroup_slack": slack,
                          "chelld_args": ch.chelld_args,
                          "busy_before": busy, **prof},
               "problems": problems}
        lib = args.build / "lib" / "libchell.so"
        lib_mtime = lib.stat().st_mtime if lib.exists() else None
        sections = [("lat", lambda: section_lat(ch, prof, args.cpu, problems)),
                    ("append", lambda: section_append(ch, prof, args.cpu, problems)),
                    ("zipf", lambda: section_zipf(ch, prof, args.cpu, slack, problems)),
                    ("bdb", lambda: section_bdb(ch, prof, problems)),
                    ("cliff", lambda: section_cliff(ch, prof, args.cpu, slack, tmp, problems,
                                                    not args.no_cliff_pagecache)),
                    ("conc", lambda: section_conc(ch, prof, problems)),
                    ("gluster", lambda: section_gluster(ch, prof, args.cpu, problems))]
        for name, fn in sections:
            if name not in only:
                continue
            t0 = time.monotonic()
            log(f"{name}...")
            try:
                res[name] = fn()
            except (RuntimeError, ValueError, KeyError, OSError, subprocess.TimeoutExpired) as e:
                log(f"  {name} FAILED: {e}")
                res[name] = {"error": str(e)[-3000:]}
                failed.append(name)
                problems.append(f"{name}: a run failed (see {name}.error in cache.json)")
                ch.stop_cache()
            res[name]["elapsed_s"] = round(time.monotonic() - t0, 1)
        if lib_mtime != (lib.stat().st_mtime if lib.exists() else None):
            problems.append("build/lib/libchell.so was rebuilt during the run")
        res["elapsed_s"] = round(time.monotonic() - t_start, 1)
        res["targets"] = targets(res)
        res["problems"] = sorted(set(problems))
    report(res, args.out, args.doc)
    log(f"done in {res['elapsed_s']:.0f} s" + (f"; FAILED sections: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        # The ExitStack in main() has already torn down chelld, the cgroups,
        # the mount and the loop device on the way out.
        log(f"interrupted ({e or 'Ctrl-C'}); the slow device and cgroups were removed")
        sys.exit(130)
