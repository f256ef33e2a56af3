#!/usr/bin/env python3
"""Tiered heap (issue 12, libchell-tier.so) benchmark, side by side in one run.

1. malloc/free throughput (build/bin/chell_bench_malloc: batches of 64
   malloc then 64 free), sizes 16 B .. 64 KiB, 1 and 2 threads: glibc,
   plain jemalloc (LD_PRELOAD=libjemalloc.so.2, the same Debian build the
   tiered heap links in) and the tiered heap with no DRAM budget (every
   extent in DRAM: the cost of the layer itself). Arms alternate run by
   run; median of the runs and the spread. The figure compared is pairs
   per CPU-second of the benchmark's threads (the machine is shared: time
   spent descheduled is not the allocator's); pairs per wall second are
   kept in the JSON too. Target: tiered heap within 10% of plain jemalloc.
2. DRAM budget: tests/progs' tierheap_ws with a working set of 4x the
   budget (32, 64 and 128 MiB) under revert, filled by 1 and by 4 threads
   (four arenas growing at once); anonymous RSS (/proc/PID/smaps_rollup)
   after the sweep, minus the same program's with a 1 MiB working set,
   against the budget. Target: never more than 2% over.
3. Capacity: tierheap_ws with a working set of 512 MiB (3 passes) in a
   memory cgroup limited to 256 MiB (half): plainly (OOM-killed), revert,
   preferred, bind, and plainly in a cgroup without a limit (unlimited
   DRAM). Run time (wall, and CPU of the launcher and program, which
   includes the launcher allocating the 768 MiB slow file) and the
   cgroup's peak charge (its DRAM: the slow tier's pages are charged to
   the launcher, outside).
4. Page access cost (paper figs 9-10): ns per first touch of a random page
   (build/bin/chell_bench_pagetouch) for anonymous DRAM, a tmpfs file
   mapped shared, the tiered heap's DRAM (malloc) and its slow tier
   (npmalloc), 1k..100k pages; CPU ns of the touching thread (its page
   faults), wall kept in the JSON.

Numbers are reported, never enforced. On this machine the "slow" tier is
tmpfs, i.e. DRAM too: what is measured is the software, not a device.

Writes <out>/tierheap.json and <out>/tierheap.png.

    scripts/bench_tierheap.py [--build build] [--out out/bench] [--quick]
    scripts/bench_tierheap.py --from-json out/bench/tierheap.json
"""
import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MB = 1 << 20
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
SIZES = [16, 256, 4096, 65536]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith("CHELL_") and k != "LD_PRELOAD"}


def nice():
    return ["nice", "-n", "-5"] if os.geteuid() == 0 else []


class Bench:
    def __init__(self, build):
        self.bin = build / "bin"
        self.chell = str(self.bin / "chell")

    def tier(self, policy, argv, dram="100G", slow_size="1G", extra=()):
        return [self.chell, "tier", "run", "--policy", policy, "--dram", dram,
                "--slow-size", slow_size, *extra, "--"] + [str(a) for a in argv]

    # ------------------------------------------------------------ 1. throughput
    def throughput(self, runs, secs):
        rows = []
        prog = str(self.bin / "chell_bench_malloc")
        for threads in (1, 2):
            for size in SIZES:
                argv = [prog, str(size), str(threads), str(secs)]
                arms = {
                    "glibc": (nice() + argv, clean_env()),
                    "jemalloc": (nice() + argv, dict(clean_env(), LD_PRELOAD=JEMALLOC)),
                    "tierheap": (nice() + self.tier("revert", argv), clean_env()),
                }
                vals = {a: [] for a in arms}
                wall = {a: [] for a in arms}
                for _ in range(runs):
                    for a, (cmd, env) in arms.items():
                        r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                        out = json.loads(r.stdout)
                        vals[a].append(out["pairs_per_cpu_s"])
                        wall[a].append(out["pairs_per_s"])
                row = {"size": size, "threads": threads, "metric": "pairs_per_cpu_s",
                       "runs": vals, "runs_wall_pairs_per_s": wall,
                       "median": {a: statistics.median(v) for a, v in vals.items()},
                       "min": {a: min(v) for a, v in vals.items()},
                       "max": {a: max(v) for a, v in vals.items()}}
                row["tier_vs_jemalloc"] = row["median"]["tierheap"] / row["median"]["jemalloc"]
                log(f"  malloc/free {size:>6} B x{threads}: " + ", ".join(
                    f"{a} {row['median'][a] / 1e6:.1f}M/cpu-s" for a in arms)
                    + f"  tier/jemalloc {row['tier_vs_jemalloc']:.3f}")
                rows.append(row)
        return rows

    # ------------------------------------------------------------ 2. budget
    def paused_ws(self, policy, mb, dram, slow_size, threads=1):
        env = dict(clean_env(), TIERHEAP_WS_PAUSE="1")
        p = subprocess.Popen(self.tier(policy, [self.bin / "tierheap_ws", mb, 1, threads],
                                       dram=dram, slow_size=slow_size),
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            p.stdout.readline()
            st = json.loads(subprocess.run([self.chell, "tier", "stat", "--json", str(p.pid)],
                                           capture_output=True, check=True).stdout)
            anon = 0
            for line in Path(f"/proc/{p.pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Anonymous:"):
                    anon = int(line.split()[1]) * 1024
        finally:
            p.communicate(b"\n", timeout=120)
        return st, anon

    def budget(self, runs):
        rows = []
        for budget_mb in (32, 64, 128):
            budget = budget_mb * MB
            ws = 4 * budget_mb
            for threads in (1, 4):
                for _ in range(runs):
                    _, base = self.paused_ws("revert", 1, f"{budget_mb}M", f"{ws + 256}M", threads)
                    st, anon = self.paused_ws("revert", ws, f"{budget_mb}M", f"{ws + 256}M",
                                              threads)
                    over = (anon - base - budget) / budget * 100
                    data_peak = st["dram_peak"] - st["metadata_bytes"]
                    rows.append({"working_set_mb": ws, "threads": threads, "budget": budget,
                                 "anon_rss": anon, "anon_rss_baseline": base,
                                 "over_budget_pct": over, "dram_peak": st["dram_peak"],
                                 "metadata_bytes": st["metadata_bytes"],
                                 "data_dram_peak": data_peak, "slow_bytes": st["slow_bytes"]})
                    log(f"  budget {budget_mb} MiB, working set {ws} MiB x{threads}: anon RSS "
                        f"{anon / MB:.1f} MiB (baseline {base / MB:.1f}), {over:+.2f}% of the "
                        f"budget; heap data DRAM peak {data_peak / MB:.1f} MiB, slow "
                        f"{st['slow_bytes'] / MB:.0f} MiB")
        return rows

    # ------------------------------------------------------------ 3. capacity
    def capacity(self, runs, ws=512, passes=3):
        v1 = Path("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists()
        limit = ws * MB // 2
        rows = []
        ws_argv = [self.bin / "tierheap_ws", ws, passes]
        arms = [("unlimited DRAM", None, None), ("no Chell, limited", None, limit),
                ("revert", "revert", limit), ("preferred", "preferred", limit),
                ("bind", "bind", limit)]
        for _ in range(runs):
            for name, policy, lim in arms:
                cg = Path("/sys/fs/cgroup/memory" if v1 else "/sys/fs/cgroup") / \
                    f"chell-bench-tierheap-{os.getpid()}"
                cg.mkdir()
                try:
                    if lim:
                        (cg / ("memory.limit_in_bytes" if v1 else "memory.max")).write_text(f"{lim}\n")
                    if v1:
                        try:
                            (cg / "memory.swappiness").write_text("0\n")
                        except OSError:
                            pass
                    if policy:
                        cmd = self.tier(policy, ws_argv, dram="auto", slow_size=f"{ws + 256}M",
                                        extra=("--cgroup", str(cg)))
                        pre = None
                    else:
                        cmd = [str(a) for a in ws_argv]
                        pre = lambda: (cg / "cgroup.procs").write_text(f"{os.getpid()}\n")
                    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    t0 = time.monotonic()
                    r = subprocess.run(cmd, env=clean_env(), preexec_fn=pre, capture_output=True)
                    el = time.monotonic() - t0
                    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
                    peak = int((cg / ("memory.max_usage_in_bytes" if v1 else "memory.peak"))
                               .read_text().split()[0])
                finally:
                    for _ in range(40):
                        try:
                            cg.rmdir()
                            break
                        except OSError:
                            time.sleep(0.25)
                row = {"arm": name, "working_set_mb": ws, "limit": lim, "seconds": el,
                       "cpu_seconds": cpu,
                       "status": r.returncode, "completed": r.returncode == 0,
                       "peak_dram_charged": peak}
                log(f"  capacity {name:<18}: {'ok' if row['completed'] else 'killed (%d)' % r.returncode}"
                    f" {el:6.2f} s ({cpu:.2f} CPU-s), cgroup peak {peak / MB:.0f} MiB")
                rows.append(row)
        return rows

    # ------------------------------------------------------------ 4. page touch
    def pagetouch(self, runs):
        """Kinds alternate run by run; CPU ns per page (the thread's user +
        system time: its page faults) is the figure compared, wall kept."""
        rows = []
        prog = self.bin / "chell_bench_pagetouch"
        kinds = ("anon", "tmpfs", "heap", "slow")
        for pages in (1000, 10000, 100000):
            cpu = {k: [] for k in kinds}
            wall = {k: [] for k in kinds}
            for _ in range(runs):
                for kind in kinds:
                    r = subprocess.run(nice() + self.tier("revert", [prog, kind, pages],
                                                          slow_size="512M"),
                                       env=clean_env(), capture_output=True, text=True, check=True)
                    out = json.loads(r.stdout)
                    cpu[kind].append(out["cpu_ns_per_page"])
                    wall[kind].append(out["ns_per_page"])
            for kind in kinds:
                rows.append({"kind": kind, "pages": pages, "runs": cpu[kind],
                             "runs_wall_ns": wall[kind], "median_ns": statistics.median(cpu[kind]),
                             "median_wall_ns": statistics.median(wall[kind])})
                log(f"  page touch {kind:<6} {pages:>6} pages: {statistics.median(cpu[kind]):7.0f} "
                    f"CPU ns/page (runs {min(cpu[kind]):.0f}..{max(cpu[kind]):.0f}; wall median "
                    f"{statistics.median(wall[kind]):.0f})")
        return rows


def plot(res, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no plot")
        return
    fig, axs = plt.subplots(2, 2, figsize=(14, 9))
    ax = [axs[0][0], axs[0][1], axs[1][0], axs[1][1]]
    tp = res["throughput"]
    labels = [f"{r['size']}B x{r['threads']}" for r in tp]
    x = range(len(tp))
    for i, arm in enumerate(("glibc", "jemalloc", "tierheap")):
        ax[0].bar([j + (i - 1) * 0.27 for j in x], [r["median"][arm] / 1e6 for r in tp], 0.27, label=arm)
    ax[0].set_xticks(list(x))
    ax[0].set_xticklabels(labels, rotation=45, fontsize=8)
    ax[0].set_ylabel("malloc+free pairs / CPU-s (millions)")
    ax[0].set_yscale("log")
    ax[0].legend()
    ax[0].set_title("malloc/free throughput")
    cap = res["capacity"]
    names = []
    for r in cap:
        if r["arm"] not in names:
            names.append(r["arm"])
    secs = [statistics.median([r["seconds"] for r in cap if r["arm"] == n and r["completed"]] or [0]) for n in names]
    peak = [statistics.median([r["peak_dram_charged"] for r in cap if r["arm"] == n]) / MB for n in names]
    ax[1].bar(names, secs, color=["C2" if any(r["completed"] for r in cap if r["arm"] == n) else "C3" for n in names])
    ax[1].set_ylabel("run time, s (0 = OOM-killed)")
    ax[1].tick_params(axis="x", rotation=30, labelsize=8)
    for i, p in enumerate(peak):
        ax[1].annotate(f"{p:.0f} MiB", (i, secs[i]), ha="center", va="bottom", fontsize=8)
    ax[1].set_title("512 MiB working set, 256 MiB cgroup")
    pt = res["pagetouch"]
    for kind in ("anon", "tmpfs", "heap", "slow"):
        rs = [r for r in pt if r["kind"] == kind]
        ax[2].plot([r["pages"] for r in rs], [r["median_ns"] for r in rs], marker="o", label=kind)
    ax[2].set_xscale("log")
    ax[2].set_xlabel("pages touched")
    ax[2].set_ylabel("CPU ns per page")
    ax[2].legend()
    ax[2].set_title("page access cost (figs 9-10)")
    bud = res.get("budget", [])
    keys = []
    for r in bud:
        k = (r["budget"] // MB, r.get("threads", 1))
        if k not in keys:
            keys.append(k)
    for i, k in enumerate(keys):
        rs = [r for r in bud if (r["budget"] // MB, r.get("threads", 1)) == k]
        used = [(r["anon_rss"] - r["anon_rss_baseline"]) / r["budget"] * 100 for r in rs]
        ax[3].scatter([i] * len(used), used, color="C0")
    ax[3].axhline(100, color="C3", linestyle="--", label="budget")
    ax[3].axhline(102, color="C3", linestyle=":", label="budget + 2%")
    ax[3].set_xticks(range(len(keys)))
    ax[3].set_xticklabels([f"{b} MiB x{t}" for b, t in keys], fontsize=8)
    ax[3].set_ylabel("anonymous RSS over baseline, % of budget")
    ax[3].set_ylim(0, 110)
    ax[3].legend(loc="lower right")
    ax[3].set_title("revert: DRAM used vs budget (working set 4x)")
    fig.tight_layout()
    fig.savefig(out / "tierheap.png", dpi=110)
    log(f"wrote {out / 'tierheap.png'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, default=REPO / "build")
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench")
    ap.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    ap.add_argument("--runs", type=int, help="runs per throughput point (default 7, --quick 3)")
    ap.add_argument("--from-json", type=Path)
    args = ap.parse_args()
    if args.from_json:
        res = json.loads(args.from_json.read_text())
        plot(res, args.from_json.parent)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    b = Bench(args.build.resolve())
    runs = 3 if args.quick else 7
    res = {"machine": {"host": platform.node(), "kernel": platform.release(),
                       "cpus": os.cpu_count()}, "quick": args.quick}
    log("malloc/free throughput")
    res["throughput"] = b.throughput(args.runs or runs, 0.3 if args.quick else 0.5)
    log("DRAM budget")
    res["budget"] = b.budget(1 if args.quick else 3)
    log("capacity")
    res["capacity"] = b.capacity(1 if args.quick else 3)
    log("page access cost")
    res["pagetouch"] = b.pagetouch(3 if args.quick else 5)
    (args.out / "tierheap.json").write_text(json.dumps(res, indent=1))
    log(f"wrote {args.out / 'tierheap.json'}")
    plot(res, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
