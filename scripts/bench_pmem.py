#!/usr/bin/env python3
"""Persistence-core (issue 4) benchmark: transaction commit latency, Chell
against libpmemobj, side by side in one run.

One transaction snapshots a range (undo log), overwrites it in place and
commits; sizes 64 B, 256 B and 4 KB. Both libraries work on files in the same
tmpfs directory (default /dev/shm) and persist with cache-line flushes plus a
fence:
  libpmemobj  PMEM_IS_PMEM_FORCE=1 (set by chell_bench_tx itself), without
              which libpmem would msync() tmpfs on every persist;
  Chell       the region file mapped by the benchmark and opened with
              chell_region_open_mem and the default persistence ops.
tmpfs is DRAM, so these are the costs of the instructions and the logging
protocol, not of persistent-memory media.

build/bin/chell_bench_tx alternates the two arms batch by batch in one
process; this driver runs it 5 times (--quick: once), pools every batch, and
reports the median ns per commit and the ratio chell/pmemobj (< 1: Chell is
faster).
Target: Chell no slower than libpmemobj. It is reported, never enforced: the
exit status is 0 whenever the measurements succeeded.

Writes <out>/pmem.json (every batch value, medians, ratios, the machine) and
<out>/pmem.png.

    scripts/bench_pmem.py [--build build] [--out out/bench] [--quick]
    scripts/bench_pmem.py --from-json out/bench/pmem.json   # report + plot again
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIZES = [64, 256, 4096]
ARMS = ("chell", "pmemobj")
PROFILES = {"full": dict(runs=5, reps=21, batch=2000), "quick": dict(runs=1, reps=7, batch=500)}


def log(msg):
    print(f"bench_pmem: {msg}", file=sys.stderr, flush=True)


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit():
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def measure(args, prof):
    prog = Path(args.build) / "bin" / "chell_bench_tx"
    if not prog.exists():
        sys.exit(f"bench_pmem: {prog} not built (cmake -S . -B build -G Ninja && ninja -C build)")
    batches = {arm: {s: [] for s in SIZES} for arm in ARMS}
    meta = None
    for run in range(prof["runs"]):
        cmd = [str(prog), "--dir", args.dir, "--sizes", ",".join(map(str, SIZES)),
               "--batch", str(prof["batch"]), "--reps", str(prof["reps"])]
        log(f"run {run + 1}/{prof['runs']}: {' '.join(cmd)}")
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            sys.exit(f"bench_pmem: chell_bench_tx failed (exit {p.returncode}):\n{p.stderr}")
        doc = json.loads(p.stdout)
        log(f"  {time.monotonic() - t0:.1f}s")
        meta = {k: v for k, v in doc.items() if k != "results"}
        for r in doc["results"]:
            batches[r["arm"]][r["size"]].extend(r["ns_per_commit"])
    return meta, batches


def summarize(meta, batches):
    rows = []
    for s in SIZES:
        row = {"size": s}
        for arm in ARMS:
            v = batches[arm][s]
            row[arm] = {"median_ns": statistics.median(v) if v else None,
                        "min_ns": min(v) if v else None, "batches": len(v)}
        c, p = row["chell"]["median_ns"], row["pmemobj"]["median_ns"]
        row["ratio_chell_over_pmemobj"] = (c / p) if c and p else None
        row["target_met"] = (c <= p) if c and p else None
        rows.append(row)
    return rows


def report(res):
    m = res["meta"]
    print(f"\nTransaction commit latency, median ns per commit "
          f"(flush: {m.get('persist_kind')}, dir: {m.get('dir')}, "
          f"PMEM_IS_PMEM_FORCE={m.get('pmem_is_pmem_force') or 'unset'})")
    print(f"{'size':>6} {'chell':>10} {'pmemobj':>10} {'ratio':>7}  target (chell <= pmemobj)")
    for r in res["rows"]:
        c, p, q = r["chell"]["median_ns"], r["pmemobj"]["median_ns"], r["ratio_chell_over_pmemobj"]
        fmt = lambda x: f"{x:10.0f}" if x is not None else f"{'-':>10}"
        verdict = "n/a (no libpmemobj)" if q is None else ("PASS" if r["target_met"] else "FAIL")
        print(f"{r['size']:>6} {fmt(c)} {fmt(p)} {(f'{q:7.2f}' if q else '      -')}  {verdict}")


def plot(path, res):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no plot")
        return False
    rows = res["rows"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    width = 0.38
    xs = range(len(rows))
    for i, (arm, color) in enumerate((("chell", "#1f77b4"), ("pmemobj", "#ff7f0e"))):
        vals = [r[arm]["median_ns"] or 0 for r in rows]
        if not any(vals):
            continue
        bars = ax.bar([x + (i - 0.5) * width for x in xs], vals, width,
                      label="Chell" if arm == "chell" else "libpmemobj", color=color)
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    for x, r in zip(xs, rows):
        if r["ratio_chell_over_pmemobj"]:
            top = max(r["chell"]["median_ns"], r["pmemobj"]["median_ns"])
            ax.annotate(f"chell/pmemobj {r['ratio_chell_over_pmemobj']:.2f}", (x, top),
                        xytext=(0, 16), textcoords="offset points", ha="center", fontsize=8,
                        fontweight="bold")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{r['size']} B" if r["size"] < 1024 else f"{r['size'] // 1024} KB"
                        for r in rows])
    ax.set_xlabel("bytes updated per transaction")
    ax.set_ylabel("median ns per commit")
    ax.set_ylim(0, max((r[a]["median_ns"] or 0) for r in rows for a in ARMS) * 1.3)
    m = res["meta"]
    ax.set_title(f"Transaction commit latency on tmpfs ({m.get('persist_kind')} + fence)",
                 fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--out", default=str(REPO / "out" / "bench"))
    ap.add_argument("--dir", default="/dev/shm", help="directory for the pool files (tmpfs)")
    ap.add_argument("--quick", action="store_true", help="1 run, shorter batches")
    ap.add_argument("--from-json", help="report and plot an earlier result again")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
    else:
        prof = PROFILES["quick" if args.quick else "full"]
        meta, batches = measure(args, prof)
        res = {
            "benchmark": "pmem transaction commit latency",
            "profile": "quick" if args.quick else "full",
            "settings": prof,
            "meta": meta,
            "machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                        "kernel": platform.release(), "loadavg": os.getloadavg()},
            "commit": git_commit(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "batches": {arm: {str(s): v for s, v in d.items()} for arm, d in batches.items()},
            "rows": summarize(meta, batches),
        }
        if not meta.get("pmemobj_built"):
            log("chell_bench_tx was built without libpmemobj (apt-get install libpmemobj-dev):"
                " Chell only")
        (out / "pmem.json").write_text(json.dumps(res, indent=1) + "\n")
    report(res)
    png = out / "pmem.png"
    if plot(png, res):
        print(f"\nwrote {out / 'pmem.json'} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
