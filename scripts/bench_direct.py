#!/usr/bin/env python3
"""Direct-mode (issue 3) benchmark suite: Chell's memory-mapped I/O against
the kernel and against a plain memcpy, side by side in one run.

Every comparison runs the same unmodified program in the same run:
  kernel  the program alone (pread/pwrite/write are system calls);
  chell   the program under `chell run --mode direct --path <scratch dir>`;
  memcpy  (latency and bandwidth only) the program maps the file itself with
          MAP_SHARED|MAP_POPULATE and memcpy's: the physical limit.
Arms are interleaved round by round, the order alternating, so a drift of
the (shared, virtual) machine hits every arm alike. Values are medians.

Sections: latency per operation (chell_bench_lat: pread/pwrite, and
read/write at the file position after an lseek), appends (write on an
O_APPEND descriptor, and write() growing a file without O_APPEND; the chell
arm once with exact sizes and once with direct.lazy_size=on), aggregate
bandwidth (chell_bench_bw), fio 4 KB randread/randwrite with
--ioengine=psync (pread/pwrite) and --ioengine=sync (lseek + read/write),
chell_get_read_buf vs read (chell_bench_grb), SQLite (chell_bench_sqlite) and
Berkeley DB (chell_bench_bdb). Writes <out>/direct.json (every raw number,
the machine, ratios, target verdicts), <out>/direct.md (the tables) and
<out>/direct.png, and prints the tables. Targets are reported PASS/FAIL but
never change the exit status: it is 0 whenever the measurements succeeded.

If `--mode direct` is not available in the library, the chell arm falls back
to `--mode posix` and everything (JSON, tables, plot title) says so.

    scripts/bench_direct.py [--build build] [--out out/bench] [--quick]
    scripts/bench_direct.py --from-json out/bench/direct.json     # redo report
    scripts/bench_direct.py ... --doc docs/PERFORMANCE.md         # also refresh
                                        # the direct-mode tables in that file
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIZES = [64, 512, 4096, 65536, 1 << 20]
GRB_SIZES = [4096, 16384, 65536, 262144, 1 << 20]
BW_THREADS = [1, 2, 4]
BW_MIXES = [100, 50, 1]          # % reads: read-only, 50/50, 99% writes
ARMS = ("kernel", "chell", "memcpy")
DOC_BEGIN = "<!-- bench_direct: begin generated tables -->"
DOC_END = "<!-- bench_direct: end generated tables -->"

# Full and --quick settings. --quick keeps every case but shortens batches,
# runs and rounds (about 1.5 minutes on the 2-vCPU VM instead of ~10).
APPEND_OPS = ("append", "extend")
FIO_ENGINES = ("psync", "sync")
LAZY_SET = "direct.lazy_size=on"

PROFILES = {
    "full": dict(rounds=3, lat_batch_ms=20, lat_batches=5, bw_seconds=1.0, bw_rounds=2,
                 fio_seconds=10, fio_rounds=3, fio_size="256m", grb_batch_ms=20, grb_batches=5,
                 sqlite=dict(rows=100000, txn=1000, selects=100000, updates=5000),
                 bdb=dict(keys=100000, ops=300000), app_rounds=3, file_size="1g"),
    # --quick: a 256 MB file, so the per-process warm-up pass (and, under
    # direct, mapping every chunk) stays short in each of the ~70 processes.
    "quick": dict(rounds=1, lat_batch_ms=4, lat_batches=5, bw_seconds=0.25, bw_rounds=1,
                  fio_seconds=1.5, fio_rounds=1, fio_size="256m", grb_batch_ms=4, grb_batches=5,
                  sqlite=dict(rows=20000, txn=1000, selects=20000, updates=1000),
                  bdb=dict(keys=50000, ops=100000), app_rounds=1, file_size="256m"),
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def human(n):
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}B"
    return f"{n} B"


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


# ---------------------------------------------------------------- machine

def machine_info():
    info = {"kernel": platform.release(), "cores": os.cpu_count(), "cpu_model": "?"}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            key, val = key.strip(), val.strip()
            if key == "model name" and info["cpu_model"] == "?":
                info["cpu_model"] = val
            elif key == "cpu MHz" and "cpu_mhz" not in info:
                info["cpu_mhz"] = float(val)
            elif key == "flags" and "virtualized" not in info:
                info["virtualized"] = "hypervisor" in val.split()
    except (OSError, ValueError):
        pass
    try:
        mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()
        info["mem_gib"] = round(int(mem[1]) / (1 << 20), 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        info["glibc"] = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        pass
    try:
        # tmpfs huge-page policy decides whether a 2 MB chunk is one TLB entry.
        for line in Path("/proc/mounts").read_text().splitlines():
            f = line.split()
            if len(f) > 3 and f[1] == "/dev/shm":
                info["dev_shm"] = f"{f[2]} {f[3]}"
    except OSError:
        pass
    for tool in ("fio",):
        path = shutil.which(tool)
        if path:
            r = subprocess.run([path, "--version"], capture_output=True, text=True)
            info[f"{tool}_version"] = r.stdout.strip()
    return info


def parse_size(text):
    m = re.fullmatch(r"(\d+)([kmg]?)", text.lower())
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2)]


def scratch_fs(path):
    """Type and options of the mount holding path (longest matching prefix)."""
    best = ("", "?")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            f = line.split()
            if len(f) > 3 and (str(path) + "/").startswith(f[1].rstrip("/") + "/") and len(f[1]) >= len(best[0]):
                best = (f[1], f"{f[2]} {f[3]} on {f[1]}")
    except OSError:
        pass
    return best[1]


def build_info(build):
    out = {}
    cache = build / "CMakeCache.txt"
    if cache.exists():
        for line in cache.read_text(errors="replace").splitlines():
            if line.startswith("CMAKE_BUILD_TYPE:"):
                out["build_type"] = line.split("=", 1)[1]
    # the sources the build was made from (a --build of another checkout
    # reports that checkout's commit, not this script's)
    src = REPO
    if cache.exists():
        for line in cache.read_text(errors="replace").splitlines():
            if line.startswith("CMAKE_HOME_DIRECTORY:"):
                src = Path(line.split("=", 1)[1])
    r = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    if r.returncode == 0:
        out["commit"] = r.stdout.strip()
    r = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "src", "include"],
                       capture_output=True, text=True)
    if r.returncode == 0:
        out["src_dirty"] = bool(r.stdout.strip())
    return out


def cpu_times():
    f = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    return sum(f) - idle, sum(f)


def busy_sample(seconds=2.0):
    """Fraction of all CPU time busy over `seconds` (before a section starts,
    so it measures the others sharing the machine, not us)."""
    t0 = cpu_times()
    time.sleep(seconds)
    t1 = cpu_times()
    dt = t1[1] - t0[1]
    return (t1[0] - t0[0]) / dt if dt > 0 else 0.0


def wait_quiet(max_wait, threshold=0.10):
    deadline = time.monotonic() + max_wait
    while True:
        busy = busy_sample(3)
        if busy < threshold or time.monotonic() >= deadline:
            return busy
        log(f"  machine busy ({busy:.0%} of CPU time), waiting...")


# ---------------------------------------------------------------- running

class Runner:
    def __init__(self, args, scratch, mode):
        self.bin = args.build / "bin"
        self.chell = self.bin / "chell"
        self.scratch = scratch
        self.mode = mode
        # The kernel and memcpy arms must not inherit a preload or settings.
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("CHELL_") and k != "LD_PRELOAD"}
        self.stats_dir = None   # set: chell-arm runs dump the direct handler's counters here
        self.nstats = 0
        # Every arm runs with the same scheduling: SCHED_FIFO (--sched fifo)
        # keeps the other work of a shared machine from preempting the timed
        # loops, so the ratios hold while it is busy; the kernel's RT
        # throttling still leaves it 5% of each second.
        # Multi-threaded runs that fill every CPU are the exception
        # (section_bandwidth).
        self.prefix = ["chrt", "-f", "50"] if args.sched == "fifo" else []

    def argv(self, arm, cmd, mode=None, extra=()):
        if arm == "chell":
            return self.prefix + [str(self.chell), "run", "--mode", mode or self.mode,
                                  "--path", str(self.scratch), *extra, "--", *cmd]
        return self.prefix + list(cmd)

    def run(self, arm, cmd, mode=None, extra=(), timeout=900):
        argv = self.argv(arm, cmd, mode, extra)
        r = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stderr[-2000:]}")
        return r

    def run_stats(self, arm, cmd, **kw):
        """Run; for a chell arm with stats enabled, also return the direct
        handler's counters summed over the processes of the run (fio forks)."""
        if arm != "chell" or not self.stats_dir or kw.get("mode"):
            return self.run(arm, cmd, **kw), None
        self.nstats += 1
        prefix = f"run{self.nstats}."
        extra = list(kw.pop("extra", ())) + ["--set", f"stats.file={self.stats_dir}/{prefix}%p.json"]
        r = self.run(arm, cmd, extra=extra, **kw)
        total = {}
        for f in sorted(self.stats_dir.glob(prefix + "*.json")):
            try:
                d = json.loads(f.read_text())
            except ValueError:
                continue
            for k, v in d.items():
                if isinstance(v, int) and k != "pid":
                    total[k] = total.get(k, 0) + v
            total["processes"] = total.get("processes", 0) + 1
            f.unlink()
        return r, total

    def run_json(self, arm, cmd, **kw):
        r, stats = self.run_stats(arm, cmd, **kw)
        data = self.parse_json(r.stdout, cmd)
        if stats is not None:
            data["direct_stats"] = stats
        return data

    @staticmethod
    def parse_json(out, cmd):
        # Our programs print one JSON line; fio prints a multi-line object,
        # possibly after notes of its own: parse from the first line that opens one.
        lines = out.splitlines()
        start = next((i for i, l in enumerate(lines) if l.startswith("{")), None)
        if start is None:
            raise RuntimeError(f"no JSON in the output of {cmd[0]}: {out[-500:]!r}")
        return json.loads("\n".join(lines[start:]))


def arm_orders(arms, rounds):
    """Arm order per round, alternating forwards and backwards."""
    return [list(arms) if r % 2 == 0 else list(reversed(arms)) for r in range(rounds)]


def check_provider(data, arm, syms):
    """The chell arm's calls must bind to libchell, the others' to libc: else
    the comparison is meaningless. Returns a list of problems."""
    bad = []
    for s in syms:
        p = data.get("provider", {}).get(s, "?")
        if (arm == "chell") != p.startswith("libchell"):
            bad.append(f"{arm}: {s} bound to {p}")
    return bad


def mode_available(run, mode, extra=()):
    r = subprocess.run(run.argv("chell", ["true"], mode, extra), capture_output=True, text=True, env=run.env)
    return r.returncode == 0, r.stderr.strip()


# ---------------------------------------------------------------- sections

def lat_runs(run, prof, cpu, files, problems, arms, ops, name):
    """Every arm of `arms` runs chell_bench_lat with `ops`, round by round.
    The arm "lazy" is the chell arm with direct.lazy_size=on."""
    cmd = [str(run.bin / "chell_bench_lat"), "--file", files["data"], "--append-file", files["append"],
           "--cpu", str(cpu), "--batch-ms", str(prof["lat_batch_ms"]), "--ops", ",".join(ops),
           "--batches", str(prof["lat_batches"]), "--sizes", ",".join(map(str, SIZES))]
    raw = []
    for rnd, order in enumerate(arm_orders(arms, prof["rounds"])):
        for arm in order:
            log(f"  {name}: round {rnd + 1}/{prof['rounds']}, {arm}")
            extra = ["--set", LAZY_SET] if arm == "lazy" else []
            data = run.run_json("chell" if arm in ("chell", "lazy") else "plain",
                                cmd + (["--mmap"] if arm == "memcpy" else []), extra=extra)
            if arm != "memcpy":
                problems += check_provider(data, "chell" if arm == "lazy" else arm,
                                           ["pread", "pwrite", "write", "read", "lseek"])
            raw.append({"arm": arm, "round": rnd, "data": data})
    return raw


def lat_summary(raw, arms):
    summary = []
    for case in raw[0]["data"]["cases"]:
        key = (case["op"], case["pattern"], case["bs"])
        row = {"op": key[0], "pattern": key[1], "bs": key[2]}
        for arm in arms:
            row[f"{arm}_ns"] = median([c["median_ns"] for r in raw if r["arm"] == arm
                                       for c in r["data"]["cases"]
                                       if (c["op"], c["pattern"], c["bs"]) == key])
            # The fastest batch of all runs: on a machine shared with other
            # work, preemptions only ever add time, so this is the least
            # disturbed estimate (reported beside the median, not instead).
            row[f"{arm}_best_ns"] = min((v for r in raw if r["arm"] == arm
                                         for c in r["data"]["cases"]
                                         if (c["op"], c["pattern"], c["bs"]) == key
                                         for v in c["ns_per_op"]), default=None)
        row["kernel_over_chell"] = ratio(row["kernel_ns"], row["chell_ns"])
        row["chell_over_memcpy"] = ratio(row["chell_ns"], row["memcpy_ns"])
        row["best_kernel_over_chell"] = ratio(row["kernel_best_ns"], row["chell_best_ns"])
        row["best_chell_over_memcpy"] = ratio(row["chell_best_ns"], row["memcpy_best_ns"])
        if "lazy" in arms:
            row["lazy_over_kernel"] = ratio(row["lazy_ns"], row["kernel_ns"])
            row["best_lazy_over_kernel"] = ratio(row["lazy_best_ns"], row["kernel_best_ns"])
        row["chell_over_kernel"] = ratio(row["chell_ns"], row["kernel_ns"])
        row["best_chell_over_kernel"] = ratio(row["chell_best_ns"], row["kernel_best_ns"])
        summary.append(row)
    # read()/write() at the file position (after an lseek where the offset
    # moves) against pread()/pwrite() of the same size and pattern.
    for row in summary:
        if row["op"] in ("sread", "swrite"):
            p = find(summary, op=row["op"][1:], pattern=row["pattern"], bs=row["bs"])
            for arm in ("kernel", "chell"):
                row[f"{arm}_over_positional"] = ratio(row.get(f"{arm}_ns"), p and p.get(f"{arm}_ns"))
    return summary


def section_latency(run, prof, cpu, files, problems):
    raw = lat_runs(run, prof, cpu, files, problems, ARMS, ("read", "write", "sread", "swrite"), "latency")
    summary = lat_summary(raw, ARMS)
    maps = [r["data"].get("maps_of_file") for r in raw if r["arm"] == "chell"]
    prefault = {arm: median([r["data"].get("prefault_ms") for r in raw if r["arm"] == arm])
                for arm in ("kernel", "chell")}
    return {"raw": raw, "summary": summary, "chell_maps_of_file": maps,
            "first_pass_ms": prefault, "direct_stats": stats_total([r for r in raw if r["arm"] == "chell"])}


def section_append(run, prof, cpu, files, problems):
    """Appends from 64 B to 1 MB: kernel, chell with exact sizes, chell with
    direct.lazy_size=on (if the library knows the setting), and the memcpy
    limit (copies into an already allocated and mapped file)."""
    arms = ["kernel", "chell", "lazy", "memcpy"]
    ok, why = mode_available(run, run.mode, extra=["--set", LAZY_SET])
    note = None
    if not ok:
        arms.remove("lazy")
        note = f"no lazy arm: {why[-200:]}"
        log(f"  appends: {note}")
    raw = lat_runs(run, prof, cpu, files, problems, arms, APPEND_OPS, "appends")
    return {"raw": raw, "summary": lat_summary(raw, arms), "arms": arms, "note": note,
            "direct_stats": stats_total([r for r in raw if r["arm"] in ("chell", "lazy")])}


def section_bandwidth(run, prof, files, problems):
    # Not under SCHED_FIFO: with a worker pinned on every CPU spinning at the
    # start line, a real-time main thread that sleeps never gets a CPU back
    # to give the start signal (the run hung until its timeout); several
    # threads on every CPU also leave no room for others' preemptions.
    saved, run.prefix = run.prefix, []
    try:
        return bandwidth_runs(run, prof, files, problems)
    finally:
        run.prefix = saved


def bandwidth_runs(run, prof, files, problems):
    raw = []
    configs = [(t, p, m) for t in BW_THREADS for p in ("rand", "seq") for m in BW_MIXES]
    for rnd, order in enumerate(arm_orders(ARMS, prof["bw_rounds"])):
        log(f"  bandwidth: round {rnd + 1}/{prof['bw_rounds']} ({len(configs)} configurations x 3 arms)")
        for t, p, m in configs:
            for arm in order:
                cmd = [str(run.bin / "chell_bench_bw"), "--file", files["data"], "--threads", str(t),
                       "--pattern", p, "--read-pct", str(m), "--seconds", str(prof["bw_seconds"])]
                data = run.run_json("chell" if arm == "chell" else "plain",
                                    cmd + (["--mmap"] if arm == "memcpy" else []))
                if arm != "memcpy":
                    problems += check_provider(data, arm, ["pread", "pwrite"])
                raw.append({"arm": arm, "round": rnd, "threads": t, "pattern": p,
                            "read_pct": m, "data": data})
    summary = []
    for t, p, m in configs:
        row = {"threads": t, "pattern": p, "read_pct": m}
        for arm in ARMS:
            row[f"{arm}_gbps"] = median([r["data"]["gbps"] for r in raw if r["arm"] == arm and
                                         (r["threads"], r["pattern"], r["read_pct"]) == (t, p, m)])
        row["chell_over_kernel"] = ratio(row["chell_gbps"], row["kernel_gbps"])
        row["chell_over_memcpy"] = ratio(row["chell_gbps"], row["memcpy_gbps"])
        summary.append(row)
    return {"raw": raw, "summary": summary,
            "direct_stats": stats_total([r for r in raw if r["arm"] == "chell"])}


def fio_cmd(fio, files, rw, seconds, cpu, extra=(), engine="psync"):
    # --ramp_time: fio's own warm-up, so the direct handler's one-off mapping
    # of each 2 MB chunk (and the kernel's first touches) are not counted.
    ramp = max(0.5, min(2.0, seconds / 3)) if seconds else 0
    return [fio, "--name=chell-" + rw, f"--filename={files['fio']}", f"--size={files['fio_size']}", "--bs=4k",
            f"--rw={rw}", f"--ioengine={engine}", "--invalidate=0", f"--cpus_allowed={cpu}",
            "--output-format=json", *extra] + \
        ([f"--runtime={seconds}", f"--ramp_time={ramp}", "--time_based"] if seconds else [])


def fio_trace_check(run, fio, files, cpu, tmp):
    """Run fio briefly in trace mode: do its reads and writes reach Chell?
    Counts trace lines per call name for the data file's descriptor(s)."""
    found = {}
    for engine, rw in ((e, rw) for e in FIO_ENGINES for rw in ("randread", "randwrite")):
        tdir = Path(tempfile.mkdtemp(prefix="fio-trace-", dir=tmp))
        cmd = fio_cmd(fio, files, rw, 0, cpu, ["--number_ios=200"], engine)
        run.run("chell", cmd, mode="trace", extra=["--trace-file", str(tdir / "trace.%p")])
        counts, fds = {}, set()
        lines = [l for f in sorted(tdir.iterdir()) for l in f.read_text(errors="replace").splitlines()]
        for line in lines:  # the descriptors fio opened the data file on
            m = re.search(r'open[a-z0-9]*\("([^"]+)".*\) = (\d+)', line)
            if m and m.group(1) == files["fio"]:
                fds.add(m.group(2))
        for line in lines:
            m = re.match(r"\S+ ([a-z_0-9]+)\((\d+)?", line)
            if m:
                name = m.group(1)
                counts[name] = counts.get(name, 0) + 1
        found[f"{engine} {rw}"] = {"trace_lines": len(lines), "calls": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
                     "data_file_opened": bool(fds),
                     "reads": counts.get("pread", 0) + counts.get("read", 0),
                     "writes": counts.get("pwrite", 0) + counts.get("write", 0),
                     "expected_ios": 200}
        shutil.rmtree(tdir, ignore_errors=True)
    return found


def section_fio(run, prof, cpu, files, problems, tmp):
    fio = shutil.which("fio")
    if not fio:
        return {"skipped": "fio not installed (apt-get install -y fio)"}
    log("  fio: trace check")
    try:
        trace = fio_trace_check(run, fio, files, cpu, tmp)
    except RuntimeError as e:
        trace = {"error": str(e)}
    raw = []
    # "limit": fio's own mmap engine, no Chell: a memcpy to or from a
    # mapping of the same file per I/O, with fio's bookkeeping around it -
    # the physical limit of serving the call from the mapping on this
    # machine, measured in the same round as the other two arms.
    for rnd, order in enumerate(arm_orders(("kernel", "chell", "limit"), prof["fio_rounds"])):
        for engine, rw in ((e, rw) for e in FIO_ENGINES for rw in ("randread", "randwrite")):
            for arm in order:
                log(f"  fio: round {rnd + 1}/{prof['fio_rounds']}, {engine} {rw}, {arm}")
                data = run.run_json("chell" if arm == "chell" else "plain",
                                    fio_cmd(fio, files, rw, prof["fio_seconds"], cpu,
                                            engine="mmap" if arm == "limit" else engine))
                stats = data.get("direct_stats")
                job = data["jobs"][0]
                side = job["read"] if rw == "randread" else job["write"]
                # CPU time per I/O (fio's own rusage over the timed part):
                # the time the job actually ran, so another program taking
                # the CPU meanwhile lowers IOPS but not this figure
                cpu_ns = None
                if side.get("total_ios") and job.get("job_runtime"):
                    cpu_ns = ((job.get("usr_cpu") or 0) + (job.get("sys_cpu") or 0)) / 100 * \
                        job["job_runtime"] * 1e6 / side["total_ios"]
                raw.append({"arm": arm, "round": rnd, "engine": engine, "rw": rw, "iops": side["iops"],
                            "cpu_ns_per_io": cpu_ns,
                            "clat_mean_ns": side.get("clat_ns", {}).get("mean"),
                            "io_bytes": side.get("io_bytes"), "sys_cpu": job.get("sys_cpu"),
                            "usr_cpu": job.get("usr_cpu"), "direct_stats": stats})
    summary = []
    for engine, rw in ((e, rw) for e in FIO_ENGINES for rw in ("randread", "randwrite")):
        row = {"engine": engine, "rw": rw}
        sel = [r for r in raw if r.get("engine", "psync") == engine and r["rw"] == rw]
        for arm in ("kernel", "chell", "limit"):
            if not any(r["arm"] == arm for r in sel):
                continue  # results from before the limit arm
            row[f"{arm}_iops"] = median([r["iops"] for r in sel if r["arm"] == arm])
            row[f"{arm}_clat_ns"] = median([r["clat_mean_ns"] for r in sel if r["arm"] == arm])
            cpu = [r["cpu_ns_per_io"] for r in sel if r["arm"] == arm and r.get("cpu_ns_per_io")]
            row[f"{arm}_cpu_ns_per_io"] = median(cpu) if cpu else None
        row["chell_over_kernel"] = ratio(row["chell_iops"], row["kernel_iops"])
        if "limit_iops" in row:
            row["limit_over_kernel"] = ratio(row["limit_iops"], row["kernel_iops"])
            row["chell_over_limit"] = ratio(row["chell_iops"], row["limit_iops"])
            row["limit_per_round"] = [ratio(*[next((r["iops"] for r in sel if r["round"] == rnd and r["arm"] == a),
                                                   None) for a in ("limit", "kernel")])
                                      for rnd in range(prof["fio_rounds"])]
        # the IOPS ratio the CPU time per I/O gives (kernel's over chell's)
        row["cpu_kernel_over_chell"] = ratio(row["kernel_cpu_ns_per_io"], row["chell_cpu_ns_per_io"])
        # the same ratio per round (the arms of one round ran back to back)
        row["per_round"] = [ratio(*[next((r["iops"] for r in sel if r["round"] == rnd and r["arm"] == a), None)
                                    for a in ("chell", "kernel")]) for rnd in range(prof["fio_rounds"])]
        summary.append(row)
    return {"trace_check": trace, "raw": raw, "summary": summary,
            "direct_stats": stats_total([r for r in raw if r["arm"] == "chell"])}


def section_grb(run, prof, cpu, files, problems):
    cmd = [str(run.bin / "chell_bench_grb"), "--file", files["data"], "--cpu", str(cpu),
           "--batch-ms", str(prof["grb_batch_ms"]), "--batches", str(prof["grb_batches"]),
           "--sizes", ",".join(map(str, GRB_SIZES))]
    raw = []
    for rnd, order in enumerate(arm_orders(("kernel", "chell"), prof["rounds"])):
        for arm in order:
            log(f"  get_read_buf: round {rnd + 1}/{prof['rounds']}, {arm}")
            data = run.run_json("chell" if arm == "chell" else "plain", cmd)
            problems += check_provider(data, arm, ["read"])
            if arm == "chell" and not data["get_read_buf_available"]:
                problems.append("chell: chell_get_read_buf not found with dlsym(RTLD_DEFAULT)")
            raw.append({"arm": arm, "round": rnd, "data": data})
    summary = []
    for size in GRB_SIZES:
        row = {"size": size}
        for arm in ("kernel", "chell"):
            for case in ("grb", "grb_touch", "read", "read_touch"):
                row[f"{arm}_{case}_ns"] = median([c["median_ns"] for r in raw if r["arm"] == arm
                                                  for c in r["data"]["cases"]
                                                  if c["case"] == case and c["size"] == size])
        row["short_calls"] = sum(c["short_calls"] for r in raw if r["arm"] == "chell"
                                 for c in r["data"]["cases"] if c["case"] == "grb" and c["size"] == size)
        row["kernel_read_over_chell_grb"] = ratio(row["kernel_read_ns"], row["chell_grb_ns"])
        row["kernel_read_touch_over_chell_grb_touch"] = ratio(row["kernel_read_touch_ns"],
                                                              row["chell_grb_touch_ns"])
        summary.append(row)
    return {"raw": raw, "summary": summary,
            "direct_stats": stats_total([r for r in raw if r["arm"] == "chell"])}


def section_app(run, prof, cpu, name, problems):
    prog = run.bin / f"chell_bench_{name}"
    if not prog.exists():
        pkg = {"sqlite": "libsqlite3-dev", "bdb": "libdb-dev"}[name]
        return {"skipped": f"{prog.name} not built (install {pkg} and re-run cmake)"}
    params = prof[name]
    dbfile = str(run.scratch / f"bench.{name}")
    cmd = [str(prog), "--db", dbfile, "--cpu", str(cpu)] + \
        [a for k, v in params.items() for a in (f"--{k}", str(v))]
    raw = []
    for rnd, order in enumerate(arm_orders(("kernel", "chell"), prof["app_rounds"])):
        for arm in order:
            log(f"  {name}: round {rnd + 1}/{prof['app_rounds']}, {arm}")
            data = run.run_json("chell" if arm == "chell" else "plain", cmd)
            problems += check_provider(data, arm, ["pread", "pwrite"])
            raw.append({"arm": arm, "round": rnd, "data": data})
    summary = []
    for phase in raw[0]["data"]["phases"]:
        row = {"phase": phase}
        for arm in ("kernel", "chell"):
            row[f"{arm}_ops_s"] = median([r["data"]["phases"][phase]["ops_per_s"]
                                          for r in raw if r["arm"] == arm])
        row["chell_over_kernel"] = ratio(row["chell_ops_s"], row["kernel_ops_s"])
        summary.append(row)
    return {"params": params, "raw": raw, "summary": summary,
            "direct_stats": stats_total([r for r in raw if r["arm"] == "chell"])}


def stats_total(raw):
    """The direct handler's counters summed over a section's chell runs."""
    total = {}
    for r in raw:
        for k, v in (r.get("data", r).get("direct_stats") or {}).items():
            total[k] = total.get(k, 0) + v
    return total or None


# ---------------------------------------------------------------- analysis

def find(rows, **kw):
    for r in rows:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
    return None


def targets(res):
    out = []

    def add(name, value, op, threshold, unit="", best=None):
        ok = None if value is None else (value <= threshold if op == "<=" else value >= threshold)
        out.append({"target": name, "value": value, "op": op, "threshold": threshold,
                    "unit": unit, "pass": ok, "best_batches": best})

    lat = res.get("latency", {}).get("summary", [])
    r4 = find(lat, op="read", pattern="rand", bs=4096)
    r512 = find(lat, op="read", pattern="rand", bs=512)
    w4 = find(lat, op="write", pattern="rand", bs=4096)
    add("4 KB random read: chell / memcpy", r4 and r4["chell_over_memcpy"], "<=", 1.10, "x",
        r4 and r4.get("best_chell_over_memcpy"))
    add("4 KB random read: pread / chell", r4 and r4["kernel_over_chell"], ">=", 1.6, "x",
        r4 and r4.get("best_kernel_over_chell"))
    add("512 B random read: pread / chell", r512 and r512["kernel_over_chell"], ">=", 3.0, "x",
        r512 and r512.get("best_kernel_over_chell"))
    add("4 KB random write: pwrite / chell", w4 and w4["kernel_over_chell"], ">=", 2.5, "x",
        w4 and w4.get("best_kernel_over_chell"))
    grb = res.get("get_read_buf", {}).get("summary", [])
    vals = [g["chell_grb_ns"] for g in grb]
    add("get_read_buf (not touched), worst size", max(vals) if vals and None not in vals else None,
        "<=", 100.0, "ns")
    for op, bs in (("sread", 4096), ("sread", 512), ("swrite", 4096), ("swrite", 512)):
        r = find(lat, op=op, pattern="rand", bs=bs)
        add(f"{human(bs)} lseek + {op[1:]} / p{op[1:]} (chell)", r and r.get("chell_over_positional"),
            "<=", 1.10, "x")
    fio = res.get("fio", {}).get("summary", [])
    for engine in FIO_ENGINES:
        for rw, goal in (("randread", 1.7), ("randwrite", 2.4)):
            # (psync: also the rows of older results, which had no engine)
            fr = find(fio, engine=engine, rw=rw) or (find(fio, rw=rw) if engine == "psync" else None)
            add(f"fio {engine} 4 KB {rw}: chell / kernel IOPS", fr and fr["chell_over_kernel"], ">=", goal, "x")
            add(f"fio {engine} 4 KB {rw}: kernel / chell CPU time per I/O", fr and fr.get("cpu_kernel_over_chell"),
                ">=", goal, "x")
            if fr and fr.get("limit_over_kernel"):
                # what a zero-cost mapped path would give here (the goal's reach)
                add(f"fio {engine} 4 KB {rw}: limit (mmap engine) / kernel IOPS, for reference",
                    fr["limit_over_kernel"], ">=", goal, "x")
    app = res.get("append", {}).get("summary", [])
    for op in APPEND_OPS:
        rows = [r for r in app if r["op"] == op and r.get("chell_over_kernel")]
        if rows:
            worst = max(rows, key=lambda r: r["chell_over_kernel"])
            add(f"{op}, exact sizes: chell / kernel time, worst size ({human(worst['bs'])})",
                worst["chell_over_kernel"], "<=", 1.0, "x", worst.get("best_chell_over_kernel"))
    return out


# ---------------------------------------------------------------- report

def fmt(v, spec=".0f"):
    return "-" if v is None else format(v, spec)


def markdown(res):
    cfg = res["config"]
    m = res["machine"]
    L = []
    mode_note = f"`--mode {cfg['chell_mode']}`"
    if cfg["chell_mode"] != "direct":
        mode_note += (f" (**not direct**: {cfg.get('fallback_reason') or 'requested'}; these "
                      "numbers show the harness, not the direct handler)")
    L.append(f"Run {res['when']} ({cfg['profile']} profile), chell arm: {mode_note}; "
             f"commit {res['build'].get('commit', '?')}"
             f"{' (src/include modified)' if res['build'].get('src_dirty') else ''}, "
             f"{res['build'].get('build_type', '?')} build. Machine: {m.get('cores')} x "
             f"{m.get('cpu_model')}, {m.get('mem_gib', '?')} GiB, Linux {m.get('kernel')}, "
             f"scratch files on `{cfg.get('scratch_fs', m.get('dev_shm', '?'))}`. CPU busy with other work before the run: "
             f"{cfg.get('busy_before', 0):.0%}; timed arms scheduled "
             f"{'SCHED_FIFO (chrt -f 50)' if cfg.get('sched') == 'fifo' else 'normally'}.")
    L.append("")
    if res.get("problems"):
        L.append("**Problems found by the run's own checks:** " + "; ".join(res["problems"]))
        L.append("")
    L.append("**Targets** (reported, never enforced):")
    L.append("")
    L.append("| target | measured (medians) | goal | verdict | from the fastest batches |")
    L.append("|---|---|---|---|---|")
    for t in res["targets"]:
        val = "-" if t["value"] is None else f"{t['value']:.2f}{' ' + t['unit'] if t['unit'] == 'ns' else 'x'}"
        verdict = "n/a" if t["pass"] is None else ("PASS" if t["pass"] else "FAIL")
        best = "-" if t.get("best_batches") is None else f"{t['best_batches']:.2f}x"
        L.append(f"| {t['target']} | {val} | {t['op']} {t['threshold']}{t['unit'] if t['unit'] == 'x' else ' ns'} "
                 f"| {verdict} | {best} |")
    L.append("")
    for name in ("latency", "append", "bandwidth", "fio", "get_read_buf", "sqlite", "bdb"):
        if isinstance(res.get(name), dict) and "error" in res[name]:
            L.append(f"**{name}: FAILED** - {res[name]['error'][:400]}")
            L.append("")
            res = {k: v for k, v in res.items() if k != name}
    if "latency" in res:
        L.append("**Latency per operation** (ns/op, median; `pread`/`pwrite`/`write` on one CPU; "
                 f"{cfg['file_size']} file on tmpfs; appends start from an empty file):")
        L.append("")
        L.append("'read'/'write' are `pread`/`pwrite`; 'sread'/'swrite' are `read`/`write` at the "
                 "file position, after an `lseek` when the offset moves (every call on random "
                 "offsets), as fio's sync engine does; 'vs p*' = that time over `pread`/`pwrite`'s.")
        L.append("")
        L.append("| op | pattern | size | kernel | chell | memcpy | kernel/chell | chell/memcpy | "
                 "vs p* (kernel) | vs p* (chell) |")
        L.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in res["latency"]["summary"]:
            L.append(f"| {r['op']} | {r['pattern']} | {human(r['bs'])} | {fmt(r['kernel_ns'])} | "
                     f"{fmt(r['chell_ns'])} | {fmt(r['memcpy_ns'])} | {fmt(r['kernel_over_chell'], '.2f')} | "
                     f"{fmt(r['chell_over_memcpy'], '.2f')} | {fmt(r.get('kernel_over_positional'), '.2f')} | "
                     f"{fmt(r.get('chell_over_positional'), '.2f')} |")
        L.append("")
        L.append(f"Mappings of the data file seen in the chell arm's own /proc/self/maps: "
                 f"{res['latency'].get('chell_maps_of_file')} (0 = the handler did not map it).")
        fp = res["latency"].get("first_pass_ms") or {}
        L.append(f"Warm-up before timing, one pass over the file with 1 MB reads (one-off; under "
                 f"direct it maps every chunk): kernel {fmt(fp.get('kernel'))} ms, chell "
                 f"{fmt(fp.get('chell'))} ms.")
        L.append("")
    if "append" in res:
        a = res["append"]
        L.append("**Appends** (ns/op, median; each batch starts from an empty file; 'append' = "
                 "`write` on an `O_APPEND` descriptor, 'extend' = `write` at the end of a growing "
                 "file without `O_APPEND`; chell = exact sizes (default), lazy = "
                 f"`--set {LAZY_SET}`; memcpy = copies into an allocated, mapped file):")
        L.append("")
        if a.get("note"):
            L.append(f"({a['note']})")
            L.append("")
        L.append("| op | size | kernel | chell | lazy | memcpy | chell/kernel | lazy/kernel |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|")
        for r in a["summary"]:
            L.append(f"| {r['op']} | {human(r['bs'])} | {fmt(r['kernel_ns'])} | {fmt(r['chell_ns'])} | "
                     f"{fmt(r.get('lazy_ns'))} | {fmt(r['memcpy_ns'])} | {fmt(r['chell_over_kernel'], '.2f')} | "
                     f"{fmt(r.get('lazy_over_kernel'), '.2f')} |")
        L.append("")
    if "bandwidth" in res:
        L.append("**Aggregate bandwidth** (GB/s = 10^9 B/s; 4 KB pread/pwrite, each thread its own "
                 "descriptor; 'reads' = % of operations that read):")
        L.append("")
        L.append("| threads | pattern | reads | kernel | chell | memcpy | chell/kernel | chell/memcpy |")
        L.append("|---:|---|---:|---:|---:|---:|---:|---:|")
        for r in res["bandwidth"]["summary"]:
            L.append(f"| {r['threads']} | {r['pattern']} | {r['read_pct']}% | {fmt(r['kernel_gbps'], '.2f')} | "
                     f"{fmt(r['chell_gbps'], '.2f')} | {fmt(r['memcpy_gbps'], '.2f')} | "
                     f"{fmt(r['chell_over_kernel'], '.2f')} | {fmt(r['chell_over_memcpy'], '.2f')} |")
        L.append("")
    if "fio" in res:
        f = res["fio"]
        if "skipped" in f:
            L.append(f"**fio**: skipped ({f['skipped']}).")
        else:
            L.append(f"**fio** (4 KB, one job, {cfg['fio_seconds']} s after a ramp, "
                     f"{cfg.get('fio_size', cfg['file_size'])} file on tmpfs, {cfg['fio_rounds']} rounds, "
                     "kernel and chell back to back in each; `psync` = `pread`/`pwrite`, `sync` = "
                     "`lseek` + `read`/`write`; 'limit' = fio's `mmap` engine without Chell, a memcpy "
                     "to or from a mapping of the file per I/O, the physical limit of a mapped data "
                     "path here):")
            L.append("")
            L.append("| engine | workload | kernel IOPS | chell IOPS | chell/kernel | per round | "
                     "kernel clat | chell clat | CPU ns per I/O, kernel / chell | kernel/chell CPU |")
            L.append("|---|---|---:|---:|---:|---|---:|---:|---:|---:|")
            for r in f["summary"]:
                rounds = ", ".join(fmt(x, ".2f") for x in r.get("per_round", []))
                L.append(f"| {r.get('engine', 'psync')} | {r['rw']} | {fmt(r['kernel_iops'])} | "
                         f"{fmt(r['chell_iops'])} | {fmt(r['chell_over_kernel'], '.2f')} | {rounds} | "
                         f"{fmt(r['kernel_clat_ns'])} ns | {fmt(r['chell_clat_ns'])} ns | "
                         f"{fmt(r.get('kernel_cpu_ns_per_io'))} / {fmt(r.get('chell_cpu_ns_per_io'))} | "
                         f"{fmt(r.get('cpu_kernel_over_chell'), '.2f')} |")
            L.append("")
            lim = [r for r in f["summary"] if "limit_iops" in r]
            if lim:
                L.append("| engine | workload | limit IOPS | limit/kernel | per round | chell/limit |")
                L.append("|---|---|---:|---:|---|---:|")
                for r in lim:
                    rounds = ", ".join(fmt(x, ".2f") for x in r.get("limit_per_round", []))
                    L.append(f"| {r.get('engine', 'psync')} | {r['rw']} | {fmt(r['limit_iops'])} | "
                             f"{fmt(r['limit_over_kernel'], '.2f')} | {rounds} | "
                             f"{fmt(r['chell_over_limit'], '.2f')} |")
                L.append("")
            L.append("'CPU ns per I/O' = fio's user + system time over the timed part divided by its "
                     "I/Os: what one I/O costs when the job runs, which other programs on the machine "
                     "lower far less than they lower IOPS.")
            L.append("")
            tc = f.get("trace_check", {})
            if "error" in tc:
                L.append(f"Trace check failed: {tc['error'][:300]}")
            for rw, t in tc.items():
                if rw == "error":
                    continue
                top = ", ".join(f"{k} {v}" for k, v in list(t["calls"].items())[:8])
                L.append(f"Trace check, {rw} with `--number_ios=200`: data file opened through Chell: "
                         f"{'yes' if t['data_file_opened'] else 'NO'}; {t['reads']} reads and "
                         f"{t['writes']} writes traced; calls: {top}.")
            L.append("")
    if "get_read_buf" in res:
        L.append("**`chell_get_read_buf` vs `read`** (ns per call, sequential through the file; "
                 "'touch' = the returned bytes are summed):")
        L.append("")
        L.append("| size | get_read_buf | get_read_buf + touch | read (chell) | read (kernel) | "
                 "read + touch (kernel) | short returns |")
        L.append("|---|---:|---:|---:|---:|---:|---:|")
        for r in res["get_read_buf"]["summary"]:
            L.append(f"| {human(r['size'])} | {fmt(r['chell_grb_ns'], '.1f')} | {fmt(r['chell_grb_touch_ns'])} | "
                     f"{fmt(r['chell_read_ns'])} | {fmt(r['kernel_read_ns'])} | "
                     f"{fmt(r['kernel_read_touch_ns'])} | {r['short_calls']} |")
        L.append("")
    for name, title in (("sqlite", "SQLite"), ("bdb", "Berkeley DB (btree, 35% get / 65% put)")):
        if name not in res:
            continue
        a = res[name]
        if "skipped" in a:
            L.append(f"**{title}**: skipped ({a['skipped']}).")
            L.append("")
            continue
        params = ", ".join(f"{k}={v}" for k, v in a["params"].items())
        L.append(f"**{title}** ({params}; ops/s):")
        L.append("")
        L.append("| phase | kernel | chell | chell/kernel |")
        L.append("|---|---:|---:|---:|")
        for r in a["summary"]:
            L.append(f"| {r['phase']} | {fmt(r['kernel_ops_s'])} | {fmt(r['chell_ops_s'])} | "
                     f"{fmt(r['chell_over_kernel'], '.2f')} |")
        L.append("")
    keys = ("reads", "writes", "kernel_fallbacks", "mmaps", "extends", "fsyncs", "zero_copy",
            "faults_caught", "processes")
    rows = [(name, res[name]["direct_stats"]) for name in
            ("latency", "append", "bandwidth", "fio", "get_read_buf", "sqlite", "bdb")
            if isinstance(res.get(name), dict) and res[name].get("direct_stats")]
    if rows:
        L.append("**Direct handler counters** (`stats.file`; chell arm, summed over each "
                 "section's timed runs, warm-up included): evidence of what was served from the "
                 "mapping and what went to the kernel.")
        L.append("")
        L.append("| section | " + " | ".join(keys) + " |")
        L.append("|---|" + "---:|" * len(keys))
        for name, st in rows:
            L.append(f"| {name} | " + " | ".join(str(st.get(k, "-")) for k in keys) + " |")
        L.append("")
    return "\n".join(L)


def plot(path, res):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no plot")
        return False
    colors = {"kernel": "#d62728", "chell": "#1f77b4", "memcpy": "#2ca02c"}
    fig, axes = plt.subplots(2, 4, figsize=(20, 9))
    axes = axes.ravel()
    lat = res.get("latency", {}).get("summary", []) + res.get("append", {}).get("summary", [])
    colors["lazy"] = "#ff7f0e"
    for ax, (op, pat, title) in zip(axes[:5], [("read", "rand", "random read"),
                                               ("write", "rand", "random write"),
                                               ("sread", "rand", "lseek + read, random"),
                                               ("write", "seq", "sequential write"),
                                               ("append", "append", "append (O_APPEND)")]):
        rows = [r for r in lat if r["op"] == op and r["pattern"] == pat]
        for arm in ARMS + ("lazy",):
            if not any(r.get(f"{arm}_ns") for r in rows):
                continue
            pts = [(r["bs"], r[f"{arm}_ns"]) for r in rows if r.get(f"{arm}_ns")]
            if pts:
                ax.plot(*zip(*pts), marker="o", color=colors[arm], label=arm)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"latency: {title}")
        ax.set_xlabel("bytes per operation")
        ax.set_ylabel("ns/op")
        ax.grid(True, which="both", alpha=0.3)
        if rows:
            ax.legend(fontsize=8)
    ax = axes[5]
    bw = res.get("bandwidth", {}).get("summary", [])
    if bw:
        labels = [f"{r['threads']}t {r['pattern']} {r['read_pct']}%r" for r in bw]
        x = range(len(bw))
        for i, arm in enumerate(ARMS):
            ax.bar([j + (i - 1) * 0.27 for j in x], [r[f"{arm}_gbps"] or 0 for r in bw], 0.27,
                   color=colors[arm], label=arm)
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, rotation=90, fontsize=7)
        ax.set_ylabel("GB/s")
        ax.set_title("4 KB bandwidth")
        ax.legend(fontsize=8)
    ax = axes[6]
    grb = res.get("get_read_buf", {}).get("summary", [])
    if grb:
        for key, label, color, style in (("chell_grb_ns", "get_read_buf", colors["chell"], "-"),
                                         ("chell_grb_touch_ns", "get_read_buf + touch", colors["chell"], "--"),
                                         ("kernel_read_ns", "read (kernel)", colors["kernel"], "-"),
                                         ("kernel_read_touch_ns", "read + touch (kernel)", colors["kernel"], "--"),
                                         ("chell_read_ns", "read (chell)", "#9467bd", "-")):
            pts = [(r["size"], r[key]) for r in grb if r[key]]
            if pts:
                ax.plot(*zip(*pts), marker="o", linestyle=style, color=color, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title("chell_get_read_buf vs read")
        ax.set_xlabel("bytes per call")
        ax.set_ylabel("ns/call")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[7]
    bars = []
    for r in res.get("fio", {}).get("summary", []):
        bars.append((f"fio {r.get('engine', 'psync')} {r['rw']}", r["chell_over_kernel"]))
    for name in ("sqlite", "bdb"):
        for r in res.get(name, {}).get("summary", []):
            bars.append((f"{name} {r['phase']}", r["chell_over_kernel"]))
    if bars:
        ax.bar(range(len(bars)), [b[1] or 0 for b in bars], color=colors["chell"])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(bars)))
        ax.set_xticklabels([b[0] for b in bars], rotation=60, fontsize=8, ha="right")
        ax.set_ylabel("chell / kernel (throughput)")
        ax.set_title("fio and real libraries")
    mode = res["config"]["chell_mode"]
    fig.suptitle(f"Chell direct-mode benchmarks: chell arm = --mode {mode}"
                 + ("" if mode == "direct" else "  (NOT direct: harness validation only)")
                 + f" - {res['machine'].get('cpu_model')}, {res['config']['profile']} profile")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def update_doc(doc, md):
    text = doc.read_text()
    if DOC_BEGIN not in text or DOC_END not in text:
        log(f"{doc}: no '{DOC_BEGIN}' ... '{DOC_END}' markers: not updated")
        return False
    head, rest = text.split(DOC_BEGIN, 1)
    _, tail = rest.split(DOC_END, 1)
    doc.write_text(head + DOC_BEGIN + "\n" + md + "\n" + DOC_END + tail)
    return True


def report(res, out, doc=None):
    out.mkdir(parents=True, exist_ok=True)
    (out / "direct.json").write_text(json.dumps(res, indent=1) + "\n")
    md = markdown(res)
    (out / "direct.md").write_text(md + "\n")
    print(md)
    if plot(out / "direct.png", res):
        print(f"\nplot: {out / 'direct.png'}")
    print(f"json: {out / 'direct.json'}\ntables: {out / 'direct.md'}")
    if doc and update_doc(doc, md):
        print(f"updated: {doc}")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=REPO / "build")
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench")
    ap.add_argument("--quick", action="store_true", help="short runs, one round (< ~2 minutes)")
    ap.add_argument("--mode", default="direct",
                    help="mode of the chell arm (default direct; falls back to posix if unavailable)")
    ap.add_argument("--cpu", type=int, default=(os.cpu_count() or 1) - 1,
                    help="CPU for the single-threaded programs (default: the last one)")
    ap.add_argument("--only", default="lat,app,bw,fio,grb,sqlite,bdb",
                    help="comma-separated sections to run (default all)")
    ap.add_argument("--scratch", type=Path, default=Path("/dev/shm"),
                    help="tmpfs directory to create the scratch directory in")
    ap.add_argument("--huge-tmpfs", action="store_true",
                    help="run on a private tmpfs mounted with huge=always (root): 2 MB pages, "
                         "so mappings need 512x fewer TLB entries")
    ap.add_argument("--wait-quiet", type=int, default=0, metavar="SECONDS",
                    help="first wait up to SECONDS for the machine to be idle")
    ap.add_argument("--sched", choices=["fifo", "other"],
                    default="fifo" if os.geteuid() == 0 and shutil.which("chrt") else "other",
                    help="scheduling of every timed arm: fifo = SCHED_FIFO priority 50 through "
                         "chrt (default as root: other work on the machine cannot preempt the "
                         "timed loops), other = the normal scheduler")
    ap.add_argument("--fio-rounds", type=int, metavar="N",
                    help="rounds of the fio section (default 3, --quick 1): each round runs the kernel and "
                         "Chell back to back, so more rounds narrow the spread the machine's state adds")
    ap.add_argument("--doc", type=Path, help="also replace the generated tables in this file")
    ap.add_argument("--from-json", type=Path, metavar="FILE", help="only redo the report from FILE")
    args = ap.parse_args()
    args.build = args.build.resolve()

    if args.from_json:
        res = json.loads(args.from_json.read_text())
        res["targets"] = targets(res)
        report(res, args.out, args.doc)
        return 0

    for prog in ("chell", "chell_bench_lat", "chell_bench_bw", "chell_bench_grb"):
        if not (args.build / "bin" / prog).exists():
            log(f"{args.build / 'bin' / prog} missing: build first "
                "(cmake -S . -B build -G Ninja && ninja -C build)")
            return 2
    only = set(args.only.split(","))
    prof = dict(PROFILES["quick" if args.quick else "full"])
    if args.fio_rounds:
        if args.fio_rounds < 1:
            log("--fio-rounds: must be at least 1")
            return 2
        prof["fio_rounds"] = args.fio_rounds
    t_start = time.monotonic()
    mounted = None
    if args.huge_tmpfs:
        mounted = Path(tempfile.mkdtemp(prefix="chell-bench-huge-"))
        size_mb = (parse_size(prof["file_size"]) >> 20) * 2 + 512  # data + appends + databases
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"huge=always,size={size_mb}m", "tmpfs",
                            str(mounted)], capture_output=True, text=True)
        if r.returncode != 0:
            log(f"cannot mount a huge=always tmpfs: {r.stderr.strip()}")
            mounted.rmdir()
            return 2
        args.scratch = mounted
    scratch = Path(tempfile.mkdtemp(prefix="chell-bench-direct-", dir=args.scratch))
    tmp = Path(tempfile.mkdtemp(prefix="chell-bench-direct-aux-"))
    problems, failed = [], []
    try:
        run = Runner(args, scratch, args.mode)
        ok, why = mode_available(run, args.mode)
        fallback = None
        if not ok:
            if args.mode != "direct":
                log(f"chell run --mode {args.mode} does not work: {why}")
                return 2
            fallback = why or "mode direct not available"
            log(f"WARNING: --mode direct is not available ({fallback});\n"
                "         the chell arm runs --mode posix: these numbers validate the harness only")
            run.mode = "posix"
            ok, why = mode_available(run, "posix")
            if not ok:
                log(f"chell run --mode posix does not work either: {why}")
                return 2
        if run.mode == "direct":
            run.stats_dir = tmp / "stats"
            run.stats_dir.mkdir()
        busy = wait_quiet(args.wait_quiet) if args.wait_quiet else busy_sample(2)
        if busy > 0.15 and args.sched != "fifo":
            log(f"WARNING: {busy:.0%} of CPU time was busy with other work before the run: "
                "expect noisy numbers (--sched fifo keeps it from preempting the timed arms)")
        res = {"schema": 1, "when": time.strftime("%Y-%m-%d %H:%M:%S %z"),
               "machine": machine_info(), "build": build_info(args.build),
               "config": {"profile": "quick" if args.quick else "full", "requested_mode": args.mode,
                          "chell_mode": run.mode, "fallback_reason": fallback, "cpu": args.cpu,
                          "scratch": str(scratch), "scratch_fs": scratch_fs(scratch),
                          "busy_before": busy, "sched": args.sched, **prof},
               "problems": problems}
        files = {"data": str(scratch / "data.bin"), "append": str(scratch / "append.bin"),
                 "size": prof["file_size"], "fio": str(scratch / "fio.bin"), "fio_size": prof["fio_size"]}
        lib = args.build / "lib" / "libchell.so"
        lib_mtime = lib.stat().st_mtime if lib.exists() else None
        log(f"preparing {prof['file_size']} data file {files['data']} (no Chell)")
        run.run("plain", [str(run.bin / "chell_bench_lat"), "--prepare", prof["file_size"],
                          "--file", files["data"]])
        if "fio" in only:
            run.run("plain", [str(run.bin / "chell_bench_lat"), "--prepare", prof["fio_size"],
                              "--file", files["fio"]])
        sections = [("lat", "latency", lambda: section_latency(run, prof, args.cpu, files, problems)),
                    ("app", "append", lambda: section_append(run, prof, args.cpu, files, problems)),
                    ("bw", "bandwidth", lambda: section_bandwidth(run, prof, files, problems)),
                    ("fio", "fio", lambda: section_fio(run, prof, args.cpu, files, problems, tmp)),
                    ("grb", "get_read_buf", lambda: section_grb(run, prof, args.cpu, files, problems)),
                    ("sqlite", "sqlite", lambda: section_app(run, prof, args.cpu, "sqlite", problems)),
                    ("bdb", "bdb", lambda: section_app(run, prof, args.cpu, "bdb", problems))]
        for key, name, fn in sections:
            if key not in only:
                continue
            t0 = time.monotonic()
            log(f"{name}...")
            try:
                res[name] = fn()
            except (RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
                # A program that fails (e.g. crashes under Chell) is a real
                # finding: keep the other sections, report it, exit non-zero.
                log(f"  {name} FAILED: {e}")
                res[name] = {"error": str(e)[-3000:]}
                failed.append(name)
                problems.append(f"{name}: a run failed (see {name}.error in direct.json)")
            res[name]["elapsed_s"] = round(time.monotonic() - t0, 1)
        res["elapsed_s"] = round(time.monotonic() - t_start, 1)
        # A shared build tree: a rebuild mid-run can leave a run without the
        # preload (caught above as a binding problem) or with another library.
        if lib_mtime != (lib.stat().st_mtime if lib.exists() else None):
            problems.append("build/lib/libchell.so was rebuilt during the run")
        res["targets"] = targets(res)
        res["problems"] = sorted(set(problems))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
        if mounted:
            subprocess.run(["umount", str(mounted)])
            mounted.rmdir()
    report(res, args.out, args.doc)
    log(f"done in {res['elapsed_s']:.0f} s" + (f"; FAILED sections: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
