#!/usr/bin/env python3
"""Interposition overhead of libchell.so on cheap calls, in ns per call.

Runs build/bin/chell_bench_overhead with and without
LD_PRELOAD=build/lib/libchell.so back to back, interleaved (the order
alternates every repetition), pinned to one CPU, and reports per call type the
median ns/call of each arm and the difference. The preloaded arm runs with
CHELL_MODE=posix and CHELL_PATHS=<a scratch directory>: the `file_*`, pipe and
/dev/null cases use descriptors no handler claims (the hot path: one table
lookup, then the real libc call); the `handled_*` cases use a file under that
directory, so they measure routing plus the posix handler.

Wall-clock time on a 2-core VM is noisy at the 10 ns scale, so the same
binary is also run under `valgrind --tool=callgrind` (and `perf stat -e
instructions:u` where the machine has a PMU): user-space instructions per call
with and without preload are deterministic evidence of the work added.

Writes <out>/overhead.json and <out>/overhead.png and prints a table. The
15 ns target is reported as PASS/FAIL but never changes the exit status: the
script exits 0 whenever the measurements themselves succeeded.

    scripts/bench_overhead.py [--build build] [--out out/bench] [--reps 5]
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_NS = 15.0
# Call types whose descriptors no handler claims: the target applies to these.
UNCLAIMED = ["pipe_read1", "file_read0", "file_pread1", "file_fstat", "file_lseek", "devnull_write1"]
HANDLED = ["handled_read0", "handled_pread1", "handled_fstat", "handled_lseek"]
ARMS = ("base", "chell")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


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
                # A VM: expect more run-to-run noise than on bare metal.
                info["virtualized"] = "hypervisor" in val.split()
    except (OSError, ValueError):
        pass
    try:
        info["clocksource"] = Path(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource").read_text().strip()
    except OSError:
        pass
    try:
        info["glibc"] = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        pass
    return info


def cpu_times():
    """(busy, total) jiffies over all CPUs from /proc/stat."""
    f = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + (f[4] if len(f) > 4 else 0)  # idle + iowait
    return sum(f) - idle, sum(f)


def busy_fraction(t0, t1):
    db, dt = t1[0] - t0[0], t1[1] - t0[1]
    return db / dt if dt > 0 else 0.0


def wait_quiet(max_wait, threshold=0.10):
    """Wait (at most max_wait s) until the machine is idle: less than
    `threshold` of all CPU time busy over a 3 s window. Returns the last value."""
    deadline = time.monotonic() + max_wait
    while True:
        t0 = cpu_times()
        time.sleep(3)
        busy = busy_fraction(t0, cpu_times())
        if busy < threshold or time.monotonic() >= deadline:
            return busy
        log(f"  machine busy ({busy:.0%} of CPU time), waiting...")


def build_info(build):
    out = {}
    cache = build / "CMakeCache.txt"
    if cache.exists():
        for line in cache.read_text(errors="replace").splitlines():
            if line.startswith("CMAKE_BUILD_TYPE:"):
                out["build_type"] = line.split("=", 1)[1]
            if line.startswith("CMAKE_C_COMPILER:"):
                out["compiler"] = line.split("=", 1)[1]
    r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    if r.returncode == 0:
        out["commit"] = r.stdout.strip()
    # Uncommitted changes to the library make the commit an approximation.
    r = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "src", "include"],
                       capture_output=True, text=True)
    if r.returncode == 0:
        out["src_dirty"] = bool(r.stdout.strip())
    return out


class Bench:
    def __init__(self, args, scratch):
        self.bin = args.build / "bin" / "chell_bench_overhead"
        self.lib = (args.build / "lib" / "libchell.so").resolve()
        self.plain_dir = scratch / "plain"
        self.handled_dir = scratch / "handled"
        for d in (self.plain_dir, self.handled_dir):
            d.mkdir()
            # 4 KiB of data: pread(1 byte at 0) must succeed, the size is irrelevant.
            (d / "bench.dat").write_bytes(os.urandom(4096))
        self.cpu = args.cpu
        self.no_preload = args.no_preload

    def env(self, arm, mode="posix", extra=None):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("CHELL_") and k != "LD_PRELOAD"}
        if arm == "chell" and not self.no_preload:
            env["LD_PRELOAD"] = str(self.lib)
            env["CHELL_MODE"] = mode
            env["CHELL_PATHS"] = str(self.handled_dir)
        if extra:
            env.update(extra)
        return env

    def argv(self, *more):
        argv = [str(self.bin), "--plain-file", str(self.plain_dir / "bench.dat"),
                "--handled-file", str(self.handled_dir / "bench.dat")]
        if self.cpu is not None:
            argv += ["--cpu", str(self.cpu)]
        return argv + [str(m) for m in more]

    def run_json(self, argv, env, timeout=1800):
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()[-2000:]}")
        return json.loads(r.stdout)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def timing(bench, args):
    """Interleaved repetitions; returns ({arm: [run json, ...]}, info).

    With --wait-quiet, a repetition during which other work kept the machine
    busy is discarded and measured again once it is quiet, until the wait
    budget is spent; the discarded ones are counted in the result."""
    runs = {a: [] for a in ARMS}
    own = 1 / (os.cpu_count() or 1)
    deadline = time.monotonic() + args.wait_quiet
    info = {"rep_busy": [], "discarded_busy": []}
    rep = 0
    while rep < args.reps:
        # Alternate the order so a drift in machine speed hits both arms alike.
        order = ARMS if rep % 2 == 0 else ARMS[::-1]
        got, c0 = {}, cpu_times()
        for arm in order:
            t0 = time.monotonic()
            got[arm] = bench.run_json(bench.argv("--batch", args.batch, "--batches", args.batches,
                                                 "--paired"), bench.env(arm))
            log(f"  rep {rep + 1}/{args.reps} {arm:5s} {time.monotonic() - t0:5.1f}s")
        busy = busy_fraction(c0, cpu_times())
        if args.wait_quiet and busy > own + 0.15 and time.monotonic() < deadline:
            info["discarded_busy"].append(busy)
            log(f"  rep {rep + 1} discarded: machine {busy:.0%} busy (the benchmark is {own:.0%})")
            wait_quiet(max(0, deadline - time.monotonic()))
            continue
        info["rep_busy"].append(busy)
        for arm in ARMS:
            runs[arm].append(got[arm])
        rep += 1
    return runs, info


def check_providers(run, expect_chell):
    """Names the preloaded arm must get from libchell (and the base arm from libc)."""
    bad = {}
    for name, obj in run["providers"].items():
        from_chell = "libchell" in os.path.basename(obj)
        if from_chell != expect_chell:
            bad[name] = obj
    return bad


def routing_check(bench):
    """Run the benchmark briefly in trace mode: the handled file must appear in
    the trace and the plain file must not (proves which arm measures what)."""
    if bench.no_preload:
        return {"ok": None, "detail": "skipped (--no-preload)"}
    with tempfile.TemporaryDirectory(prefix="chell-bench-trace-") as d:
        trace = Path(d) / "trace.log"
        env = bench.env("chell", mode="trace", extra={"CHELL_TRACE_FILE": str(trace)})
        try:
            bench.run_json(bench.argv("--calls", 3), env, timeout=120)
        except (RuntimeError, json.JSONDecodeError) as e:
            return {"ok": False, "detail": f"trace-mode run failed: {e}"}
        text = trace.read_text(errors="replace") if trace.exists() else ""
        handled = str(bench.handled_dir / "bench.dat") in text
        plain = str(bench.plain_dir / "bench.dat") in text
        return {"ok": handled and not plain, "trace_lines": len(text.splitlines()),
                "handled_file_in_trace": handled, "plain_file_in_trace": plain}


def perf_works():
    if not shutil.which("perf"):
        return False, "perf not installed"
    r = subprocess.run(["perf", "stat", "-x", ",", "-e", "instructions:u", "true"],
                       capture_output=True, text=True)
    first = r.stderr.strip().splitlines()[:1]
    if r.returncode != 0 or not first or not first[0].split(",")[0].strip().isdigit():
        return False, "perf stat -e instructions:u: " + (first[0] if first else f"exit {r.returncode}")
    return True, "ok"


def count_callgrind(bench, arm, case, calls, workdir):
    out = Path(workdir) / f"cg.{arm}.{case}.{calls}"
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + \
        bench.argv("--calls", calls, "--case", case)
    r = subprocess.run(argv, env=bench.env(arm), capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"callgrind {arm} {case}: exit {r.returncode}: {r.stderr.strip()[-1500:]}")
    for line in out.read_text().splitlines():
        if line.startswith("totals:") or line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {out}")


def count_perf(bench, arm, case, calls, workdir):
    argv = ["perf", "stat", "-x", ",", "-e", "instructions:u"] + \
        bench.argv("--calls", calls, "--case", case)
    r = subprocess.run(argv, env=bench.env(arm), capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"perf {arm} {case}: exit {r.returncode}: {r.stderr.strip()[-1500:]}")
    for line in r.stderr.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("instructions") and fields[0].isdigit():
            return int(fields[0])
    raise RuntimeError(f"perf: no instruction count in {r.stderr[-500:]}")


def instructions(bench, counter, cases, n1, n2, jobs):
    """Instructions per call = (total(n2) - total(n1)) / (n2 - n1): start-up,
    library constructors and the setup outside the loops cancel out."""
    with tempfile.TemporaryDirectory(prefix="chell-bench-ic-") as wd, ThreadPoolExecutor(jobs) as ex:
        futs = {(arm, c, n): ex.submit(counter, bench, arm, c, n, wd)
                for arm in ARMS for c in cases for n in (n1, n2)}
        res = {}
        for c in cases:
            res[c] = {}
            for arm in ARMS:
                res[c][arm] = (futs[(arm, c, n2)].result() - futs[(arm, c, n1)].result()) / (n2 - n1)
            res[c]["added"] = res[c]["chell"] - res[c]["base"]
        return res


def summarize(runs, cases):
    out = {}
    for c in cases:
        per = {}
        for arm in ARMS:
            meds = [next(x for x in r["cases"] if x["name"] == c)["median"] for r in runs[arm]]
            mins = [next(x for x in r["cases"] if x["name"] == c)["min"] for r in runs[arm]]
            per[arm] = {"rep_medians": meds, "median": median(meds), "min": min(mins)}
        paired = [a - b for a, b in zip(per["chell"]["rep_medians"], per["base"]["rep_medians"])]
        # In-process comparison (chell_bench_overhead --paired): symbol vs libc's
        # own function in the same process. In the chell arm that is the layer's
        # cost; in the base arm both are libc, so it shows the method's noise.
        inproc = {arm: [next(x for x in r["cases"] if x["name"] == c)["paired"]["diff_median"]
                        for r in runs[arm]] for arm in ARMS}
        # The same from each run's fastest batches: preemption and other
        # processes only ever add time, so on a busy machine the minimum is
        # the steadier estimate of the calls' own cost.
        inproc_min = []
        for r in runs["chell"]:
            p = next(x for x in r["cases"] if x["name"] == c)["paired"]
            inproc_min.append(min(p["via_symbol"]) - min(p["via_libc"]))
        out[c] = {
            "base": per["base"], "chell": per["chell"],
            "added_ns": per["chell"]["median"] - per["base"]["median"],
            "added_ns_min": per["chell"]["min"] - per["base"]["min"],
            "rep_diffs": paired,
            "inproc_added_ns": median(inproc["chell"]),
            "inproc_aa_ns": median(inproc["base"]),
            "inproc_rep_diffs": inproc,
            "inproc_added_ns_min": median(inproc_min),
        }
    return out


def analyze(result):
    """Results and verdict from the raw runs (also redone by --from-json)."""
    runs = result["raw_runs"]
    cases = [c["name"] for c in runs["base"][0]["cases"]]
    result["results"] = summarize(runs, cases)
    # The verdict uses the in-process paired estimate: its A/A noise is a few ns,
    # while separate processes on this kind of VM differ by tens of ns run to
    # run (see the A/A columns). The cross-process verdict is reported beside it.
    verdict, cross = {}, {}
    for c in cases:
        if c in UNCLAIMED:
            r = result["results"][c]
            verdict[c] = "PASS" if r["inproc_added_ns"] <= TARGET_NS else "FAIL"
            cross[c] = "PASS" if r["added_ns"] <= TARGET_NS else "FAIL"
    result["verdict"] = {
        "target_ns": TARGET_NS, "basis": "inproc_added_ns", "per_case": verdict,
        "overall": "PASS" if all(v == "PASS" for v in verdict.values()) else "FAIL",
        "cross_process_per_case": cross,
        "cross_process_overall": "PASS" if all(v == "PASS" for v in cross.values()) else "FAIL",
    }
    return result


def plot(path, result, cases):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = result["results"]
    x = range(len(cases))
    base = [res[c]["base"]["median"] for c in cases]
    chell = [res[c]["chell"]["median"] for c in cases]
    added = [res[c]["added_ns"] for c in cases]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(13, 8), sharex=True,
                                   gridspec_kw={"height_ratios": [3, 2]})
    w = 0.38
    ax1.bar([i - w / 2 for i in x], base, w, label="without Chell")
    ax1.bar([i + w / 2 for i in x], chell, w,
            label="with libchell.so (posix mode)" if not result["config"]["no_preload"] else "A/A: second plain run")
    ax1.set_ylabel("ns per call (median of reps)")
    ax1.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax1.set_title(f"Chell interposition overhead - {result['machine']['cpu_model']}, "
                  f"{result['machine']['cores']} cores, Linux {result['machine']['kernel']}")
    inproc = [res[c]["inproc_added_ns"] for c in cases]
    aa = [res[c]["inproc_aa_ns"] for c in cases]
    ax2.bar([i - w / 2 for i in x], added, w, color="tab:gray", label="added, separate processes")
    ax2.bar([i + w / 2 for i in x], inproc, w, color="tab:purple",
            label="added, same process (paired batches)")
    ax2.scatter(list(x), aa, marker="_", s=200, color="k", zorder=3,
                label="A/A without preload (method noise)")
    ax2.axhline(TARGET_NS, color="tab:red", ls="--", lw=1, label=f"target {TARGET_NS:g} ns (unclaimed fds)")
    ax2.axhline(0, color="k", lw=0.5)
    ic = result.get("instructions", {}).get("per_case")
    if ic:
        top = max([TARGET_NS] + added + inproc)
        for i, c in enumerate(cases):
            ax2.annotate(f"{round(ic[c]['added'], 1) + 0.0:+.1f} ins", (i, top), ha="center", va="bottom", fontsize=8,
                         xytext=(0, 3), textcoords="offset points")
    ax2.margins(y=0.2)
    ax2.set_ylabel("added ns per call")
    ax2.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    if ic:
        ax2.set_title(f"added per call; figures on top: added instructions per call "
                      f"({result['instructions']['tool']})", fontsize=9)
    ax2.set_xticks(list(x))
    ax2.set_xticklabels(cases, rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=REPO / "build")
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench")
    ap.add_argument("--reps", type=int, default=7, help="interleaved repetitions per arm")
    ap.add_argument("--batch", type=int, default=100000, help="calls per timed batch")
    ap.add_argument("--batches", type=int, default=10, help="timed batches per case per run")
    ap.add_argument("--cpu", type=int, default=(os.cpu_count() or 1) - 1,
                    help="CPU to pin the benchmark to (default: the last one)")
    ap.add_argument("--ic-calls", type=int, nargs=2, default=(2000, 22000), metavar=("N1", "N2"),
                    help="call counts whose difference gives instructions per call")
    ap.add_argument("--wait-quiet", type=int, default=0, metavar="SECONDS",
                    help="before timing, wait up to SECONDS for the machine to be idle")
    ap.add_argument("--no-instructions", action="store_true", help="skip callgrind/perf counts")
    ap.add_argument("--no-preload", action="store_true",
                    help="A/A run: the 'chell' arm runs without LD_PRELOAD too (noise floor, "
                         "or validation before libchell.so builds)")
    ap.add_argument("--from-json", type=Path, metavar="FILE",
                    help="do not measure: redo the table, Markdown and plot from a saved overhead.json")
    args = ap.parse_args()
    args.build = args.build.resolve()
    args.out = args.out.resolve()
    if args.from_json:
        args.out.mkdir(parents=True, exist_ok=True)
        result = analyze(json.loads(args.from_json.read_text()))
        (args.out / "overhead.json").write_text(json.dumps(result, indent=2) + "\n")
        return report(result, args.out)

    binary = args.build / "bin" / "chell_bench_overhead"
    lib = args.build / "lib" / "libchell.so"
    if not binary.exists():
        log(f"error: {binary} not built (ninja -C {args.build} chell_bench_overhead)")
        return 2
    if not args.no_preload and not lib.exists():
        log(f"error: {lib} not built; build it or pass --no-preload for an A/A run")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)

    scratch_base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="chell-bench-", dir=scratch_base) as scratch:
        bench = Bench(args, Path(scratch))
        result = {
            "benchmark": "interposition overhead",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": machine_info(),
            "build": build_info(args.build),
            "config": {"reps": args.reps, "batch": args.batch, "batches": args.batches,
                       "cpu": args.cpu, "no_preload": args.no_preload,
                       "chell_mode": "posix", "scratch_fs": scratch_base or "default tmp",
                       "target_ns": TARGET_NS},
        }
        log("routing check (trace mode)...")
        result["routing_check"] = routing_check(bench)
        log(f"  {result['routing_check']}")

        log(f"timing: {args.reps} interleaved reps x 2 arms, {args.batches} x {args.batch} calls per case")
        if args.wait_quiet:
            result["idle_check_busy"] = wait_quiet(args.wait_quiet)
        load_before, t0 = os.getloadavg(), cpu_times()
        runs, rep_info = timing(bench, args)
        result["timing_reps"] = rep_info
        # The benchmark itself keeps one CPU busy (1/ncpu of the machine);
        # more than that means other work shared it and the ns are noisier.
        result["loadavg"] = {"before": load_before, "after": os.getloadavg()}
        result["cpu_busy_during_timing"] = busy_fraction(t0, cpu_times())
        cases = [c["name"] for c in runs["base"][0]["cases"]]
        result["providers"] = {arm: runs[arm][0]["providers"] for arm in ARMS}
        result["provider_problems"] = {
            "base": check_providers(runs["base"][0], False),
            "chell": check_providers(runs["chell"][0], not args.no_preload),
        }
        result["raw_runs"] = runs

        if not args.no_instructions:
            counters = []
            if shutil.which("valgrind"):
                counters.append(("callgrind", count_callgrind))
            else:
                result.setdefault("instruction_tools_unavailable", {})["callgrind"] = "valgrind not installed"
            ok, why = perf_works()
            if ok:
                counters.append(("perf", count_perf))
            else:
                result.setdefault("instruction_tools_unavailable", {})["perf"] = why
            n1, n2 = args.ic_calls
            for name, fn in counters:
                log(f"instructions per call with {name} ({n1} vs {n2} calls per case)...")
                per_case = instructions(bench, fn, cases, n1, n2, jobs=os.cpu_count() or 1)
                result.setdefault("instruction_counts", {})[name] = per_case
            if counters:
                # The plot and the table use the first tool that worked.
                name = counters[0][0]
                result["instructions"] = {"tool": name, "per_case": result["instruction_counts"][name]}

    analyze(result)
    (args.out / "overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    return report(result, args.out)


def markdown(result):
    """The results table for docs/PERFORMANCE.md."""
    res, verdict = result["results"], result["verdict"]
    ic = result.get("instructions", {}).get("per_case", {})
    head = ["call", "without Chell ns", "with Chell ns", "added ns (separate processes)",
            "added ns (same process)", "same process, fastest batches", "A/A ns (noise)"]
    if ic:
        head += ["instr/call without", "instr/call with", "added instr"]
    head += ["target 15 ns"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c, r in res.items():
        cells = [f"`{c}`", f"{r['base']['median']:.1f}", f"{r['chell']['median']:.1f}",
                 f"{r['added_ns']:+.1f}", f"{r['inproc_added_ns']:+.1f}",
                 f"{r['inproc_added_ns_min']:+.1f}", f"{r['inproc_aa_ns']:+.1f}"]
        if ic:
            cells += [f"{ic[c]['base']:.1f}", f"{ic[c]['chell']:.1f}", f"{ic[c]['added']:+.1f}"]
        cells.append(verdict["per_case"].get(c, "n/a (handled)"))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def report(result, out):
    """Plot, Markdown table and the printed table, from a result (fresh or --from-json)."""
    cases = list(result["results"])
    verdict = result["verdict"]["per_case"]
    cross = result["verdict"]["cross_process_per_case"]
    no_preload = result["config"]["no_preload"]
    (out / "overhead.md").write_text(markdown(result))
    png = out / "overhead.png"
    try:
        plot(png, result, cases)
    except ImportError:
        log("matplotlib missing: python3 -m pip install --quiet matplotlib; no plot written")
        png = None

    ic = result.get("instructions", {}).get("per_case", {})
    arm2 = "A/A ns" if no_preload else "chell ns"
    hdr = (f"{'call':16s} {'base ns':>8s} {arm2:>8s} {'added':>7s} {'(min)':>6s} "
           f"{'inproc':>7s} {'(min)':>6s} {'A/A':>6s}")
    if ic:
        hdr += f" {'base ins':>9s} {'chell ins':>9s} {'added':>6s}"
    print(hdr + "  target")
    for c in cases:
        r = result["results"][c]
        line = (f"{c:16s} {r['base']['median']:8.1f} {r['chell']['median']:8.1f} "
                f"{r['added_ns']:+7.1f} {r['added_ns_min']:+6.1f} "
                f"{r['inproc_added_ns']:+7.1f} {r['inproc_added_ns_min']:+6.1f} {r['inproc_aa_ns']:+6.1f}")
        if ic:
            line += f" {ic[c]['base']:9.1f} {ic[c]['chell']:9.1f} {ic[c]['added']:+6.1f}"
        print(line + "  " + (f"{verdict[c]}/{cross[c]}" if c in verdict else "(handled, info)"))
    print("ns: median over reps of each run's median batch; added = chell - base (separate "
          "processes, interleaved); (min) = difference of the fastest batches; inproc = same "
          "process, libchell's symbol vs libc's function, alternating batches, (min) from the fastest batches; A/A = the same "
          "in-process comparison without preload (noise of the method)" +
          (f"; ins = {result['instructions']['tool']} instructions per call" if ic else ""))
    print(f"target: <= {TARGET_NS:g} ns added per call on unclaimed descriptors: "
          f"{result['verdict']['overall']} (same-process estimate; separate processes: "
          f"{result['verdict']['cross_process_overall']})" + (" (A/A run, no preload)" if no_preload else ""))
    own = 1 / (result["machine"].get("cores") or 1)
    # Judge the repetitions that were kept (discarded ones are already redone).
    busy = max(result.get("timing_reps", {}).get("rep_busy")
               or [result.get("cpu_busy_during_timing", 0.0)])
    if busy > own + 0.15:
        print(f"WARNING: other work shared the machine (up to {busy:.0%} of CPU time busy, the "
              f"benchmark accounts for {own:.0%}): timings are noisy, rerun with --wait-quiet "
              "on a quiet machine; instruction counts are unaffected")
    for arm, bad in result["provider_problems"].items():
        if bad:
            print(f"WARNING: {arm} arm gets these names from an unexpected object: {bad}")
    if result["routing_check"].get("ok") is False:
        print(f"WARNING: routing check failed: {result['routing_check']}")
    print(f"wrote {out / 'overhead.json'}, {out / 'overhead.md'}" + (f" and {png}" if png else ""))
    return 0

if __name__ == "__main__":
    sys.exit(main())
