#!/usr/bin/env python3
"""pVM object store (issue 12) benchmarks, side by side in one run.

All on the same tmpfs directory (default /dev/shm/chell-bench-pvm), driven
through build/bin/chell_bench_pvm (bench/pvm/chell_bench_pvm.c, whose
header describes each measurement):

  objects  create+commit, transactional update, read, delete of objects of
           64 B .. 1 MiB, 1 and 2 threads: pVM, libpmemobj (PMEM_IS_PMEM_FORCE=1:
           cache flushes on tmpfs, as pVM), one file per object through POSIX
           (the paper's "block" baseline), and the same files under
           `chell run --mode direct`
  kv       db_bench-style fillseq, fillrandom, fillsync, overwrite,
           readrandom (16 B keys, 100 B values): pVM objects against LevelDB
           with sync on and off
  snappy   compress a corpus of real files (/usr/lib, /usr/share; KB to MB)
           to objects and to files: MB/s and the kernel CPU time (getrusage)
  pages    first and mapped touch of random pages (ns per page): anonymous
           DRAM, a tmpfs file mapping, a pVM object, and the tiered heap's
           non-persistent slow-tier pages (npmalloc under `chell tier run
           --policy bind`) (the paper's figs 9-10)

Each configuration runs --runs times (default 5; --quick: 1, smaller) in an
interleaved order; the median is reported with the spread (min..max), and
the object and key-value ratios also for the best run of each (on a shared,
noisy machine noise only adds time, so the best runs are the closest to the
cost itself).
Targets (from the issue) are reported, never enforced: the exit status is 0
whenever the measurements ran.

Writes <out>/pvm.json and <out>/pvm.png.

    scripts/bench_pvm.py [--build build] [--out out/bench] [--quick] [--dir D]
    scripts/bench_pvm.py --from-json out/bench/pvm.json
"""
import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIZES = [64, 256, 1024, 4096, 16384, 65536, 262144, 1048576]
SYSTEMS = ["pvm", "pmemobj", "files", "files-direct"]
PHASES = ["create", "update", "read", "delete"]


def log(msg):
    print(f"bench_pvm: {msg}", file=sys.stderr, flush=True)


def run_json(argv, env=None):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))}: exit {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def fresh_dir(d):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)


def objects(args, prog, chell, runs, sizes, threads_list):
    rows = []
    for size in sizes:
        count = max(100, min(3000, (48 << 20) // size))
        if args.quick:
            count = max(50, count // 4)
        for threads in threads_list:
            per = count // threads
            samples = {s: [] for s in SYSTEMS}
            for r in range(runs):
                order = SYSTEMS[:]
                random.Random(size * 31 + threads * 7 + r).shuffle(order)
                for s in order:
                    d = os.path.join(args.dir, "obj")
                    fresh_dir(d)
                    base = [prog, "objects", "--dir", d, "--size", size, "--count", per, "--threads", threads]
                    if s == "files-direct":
                        argv = [chell, "run", "--mode", "direct", "--path", d, "--", *base, "--system", "files"]
                    else:
                        argv = [*base, "--system", s]
                    try:
                        samples[s].append(run_json(argv))
                    except RuntimeError as e:
                        log(f"skipped: {e}")
            for s in SYSTEMS:
                if not samples[s]:
                    continue
                row = {"system": s, "size": size, "threads": threads, "count": per}
                for ph in PHASES:
                    ns = [x[f"{ph}_ns"] for x in samples[s]]
                    ops = [x[f"{ph}_ops"] for x in samples[s]]
                    row[f"{ph}_ns"] = statistics.median(ns)
                    row[f"{ph}_ns_range"] = [min(ns), max(ns)]
                    row[f"{ph}_ops"] = statistics.median(ops)
                rows.append(row)
            log(f"objects {size} B x{threads}: " + ", ".join(
                f"{r['system']} {r['create_ns']:.0f}/{r['update_ns']:.0f} ns"
                for r in rows if r["size"] == size and r["threads"] == threads))
    return rows


def kv(args, prog, runs, num):
    # The target compares with LevelDB on the same tier (tmpfs), where its
    # fdatasync costs a system call and no device write. leveldb-sync-disk
    # is context only: LevelDB with sync on the machine's disk file system
    # (args.disk_dir), fewer operations because each sync waits for the
    # device.
    confs = [("pvm", 1, args.dir, num), ("pvm-table", 1, args.dir, num), ("leveldb", 1, args.dir, num),
             ("leveldb", 0, args.dir, num)]
    if args.disk_dir:
        confs.append(("leveldb", 1, args.disk_dir, max(500, num // 20)))
    res = {}
    for r in range(runs):
        for sysname, sync, base, n in confs:
            d = os.path.join(base, "kv")
            fresh_dir(d)
            try:
                x = run_json([prog, "kv", "--system", sysname, "--sync", sync, "--dir", d, "--num", n])
            except RuntimeError as e:
                log(f"skipped: {e}")
                continue
            finally:
                if base != args.dir:
                    shutil.rmtree(d, ignore_errors=True)
            key = f"{sysname}{'' if sysname.startswith('pvm') else ('-sync' if sync else '-nosync')}"
            res.setdefault(key + ("-disk" if base != args.dir else ""), []).append(x)
    out = {}
    for k, xs in res.items():
        out[k] = {b: statistics.median(x[f"{b}_ops"] for x in xs)
                  for b in ("fillseq", "fillrandom", "fillsync", "overwrite", "readrandom")}
        out[k]["fillsync_range"] = [min(x["fillsync_ops"] for x in xs), max(x["fillsync_ops"] for x in xs)]
        out[k]["fillsync_ops_phase"] = statistics.median(x["fillsync_ops_phase"] for x in xs)
        out[k]["num"] = xs[0]["num"]
    log("kv ops/s: " + "; ".join(f"{k}: fillsync {v['fillsync']:.0f}" for k, v in out.items()))
    return out


def corpus_list(args, limit):
    files, total = [], 0
    for root in ("/usr/lib", "/usr/share"):
        for dp, dn, fn in os.walk(root):
            dn.sort()
            for f in sorted(fn):
                p = os.path.join(dp, f)
                try:
                    if os.path.islink(p) or not os.path.isfile(p):
                        continue
                    sz = os.path.getsize(p)
                except OSError:
                    continue
                if 1024 <= sz <= (8 << 20) and os.access(p, os.R_OK):
                    files.append(p)
                    total += sz
                if total >= limit:
                    break
            if total >= limit:
                break
    lst = os.path.join(args.dir, "corpus.txt")
    with open(lst, "w") as f:
        f.write("\n".join(files) + "\n")
    return lst, len(files), total


def snappy(args, prog, runs):
    lst, n, total = corpus_list(args, (40 << 20) if args.quick else (160 << 20))
    res = {}
    for r in range(runs):
        for s in ("pvm", "pvm-grow", "files"):
            d = os.path.join(args.dir, "snappy")
            fresh_dir(d)
            try:
                res.setdefault(s, []).append(run_json([prog, "snappy", "--system", s, "--dir", d, "--corpus", lst]))
            except RuntimeError as e:
                log(f"skipped: {e}")
    out = {}
    for s, xs in res.items():
        out[s] = {k: statistics.median(x[k] for x in xs) for k in ("mb_per_s", "sys_s", "user_s", "seconds")}
        out[s]["sys_range"] = [min(x["sys_s"] for x in xs), max(x["sys_s"] for x in xs)]
        out[s]["out_bytes"] = xs[0]["out_bytes"]
        out[s]["files"] = xs[0]["files"]
        out[s]["in_bytes"] = xs[0]["in_bytes"]
    log(f"snappy: {n} files, {total >> 20} MiB: kernel s " + ", ".join(f"{k} {v['sys_s']:.3f}" for k, v in out.items()))
    return out


def pages(args, prog, chell, runs):
    mb = 64 if args.quick else 256
    res = {}
    for r in range(runs):
        for k in ("anon", "tmpfs", "pvm", "tierheap"):
            d = os.path.join(args.dir, "pages")
            fresh_dir(d)
            argv = [prog, "pages", "--kind", k, "--dir", d, "--mb", mb]
            if k == "tierheap":
                # bind: every npmalloc/malloc on the slow tier, a file in
                # the same tmpfs allocated by the launcher beforehand.
                argv = [chell, "tier", "run", "--policy", "bind", "--slow", d, "--slow-size",
                        f"{mb * 2 + 64}M", "--", *argv]
            try:
                res.setdefault(k, []).append(run_json(argv))
            except RuntimeError as e:
                log(f"skipped: {e}")
    return {k: {"first_ns": statistics.median(x["first_ns"] for x in xs),
                "first_range": [min(x["first_ns"] for x in xs), max(x["first_ns"] for x in xs)],
                "mapped_ns": statistics.median(x["mapped_ns"] for x in xs), "mb": mb} for k, xs in res.items()}


def summary(data):
    lines = []
    obj = data["objects"]

    def get(s, size, t):
        for r in obj:
            if r["system"] == s and r["size"] == size and r["threads"] == t:
                return r
        return None

    lines.append("objects: latency ns (median) create / update / read / delete, and pvm/pmemobj ratio (< 1: pVM faster)")
    for t in sorted({r["threads"] for r in obj}):
        for size in sorted({r["size"] for r in obj}):
            cells = []
            for s in SYSTEMS:
                r = get(s, size, t)
                if r:
                    cells.append(f"{s} {r['create_ns']:.0f}/{r['update_ns']:.0f}/{r['read_ns']:.0f}/{r['delete_ns']:.0f}")
            p, m, f = get("pvm", size, t), get("pmemobj", size, t), get("files", size, t)
            extra = ""
            if p and m:
                extra += f"  c {p['create_ns'] / m['create_ns']:.2f} u {p['update_ns'] / m['update_ns']:.2f}"
                extra += (f" (best of runs: c {p['create_ns_range'][0] / m['create_ns_range'][0]:.2f}"
                          f" u {p['update_ns_range'][0] / m['update_ns_range'][0]:.2f})")
            if p and f:
                # Throughput per thread from the median batch (the phase
                # totals in *_ops include whatever preempted it).
                extra += f"  vs files c {f['create_ns'] / p['create_ns']:.1f}x u {f['update_ns'] / p['update_ns']:.1f}x"
            lines.append(f"  {size:>8} B x{t}: " + "; ".join(cells) + extra)
    kvd = data.get("kv", {})
    if kvd:
        lines.append("kv ops/s: " + "; ".join(
            f"{k}: " + ", ".join(f"{b} {v[b]:.0f}" for b in ("fillseq", "fillrandom", "fillsync", "overwrite", "readrandom"))
            for k, v in kvd.items()))
        for k in ("pvm", "pvm-table"):
            if k in kvd and "leveldb-sync" in kvd:
                best = kvd[k]['fillsync_range'][1] / kvd['leveldb-sync']['fillsync_range'][1]
                lines.append(f"  fillsync {k} / leveldb sync: {kvd[k]['fillsync'] / kvd['leveldb-sync']['fillsync']:.2f}x"
                             f" (best of runs {best:.2f}x; target >= 2)")
    sn = data.get("snappy", {})
    if "pvm" in sn and "files" in sn:
        lines.append("snappy: " + "; ".join(f"{k} {v['mb_per_s']:.0f} MB/s kernel {v['sys_s']:.3f} s user {v['user_s']:.3f} s"
                                            for k, v in sn.items()))
        for k in ("pvm", "pvm-grow"):
            if k in sn:
                lines.append(f"  kernel time files/{k}: {sn['files']['sys_s'] / max(sn[k]['sys_s'], 1e-6):.1f}x (target >= 2)")
    pg = data.get("pages", {})
    if pg:
        lines.append("pages ns/page first touch / mapped: " + "; ".join(
            f"{k} {v['first_ns']:.0f}/{v['mapped_ns']:.1f}" for k, v in pg.items()))
    return "\n".join(lines)


def plot(data, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no PNG")
        return
    fig, ax = plt.subplots(2, 3, figsize=(17, 9))
    obj = data["objects"]
    for i, ph in enumerate(("create", "update", "delete")):
        a = ax[0][i]
        for s in SYSTEMS:
            for t, ls in ((1, "-"), (2, "--")):
                rs = sorted((r for r in obj if r["system"] == s and r["threads"] == t), key=lambda r: r["size"])
                if rs:
                    a.plot([r["size"] for r in rs], [r[f"{ph}_ns"] / 1000 for r in rs], ls, marker="o",
                           label=f"{s} x{t}")
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("object size (B)")
        a.set_ylabel("µs per operation")
        a.set_title(f"{ph} (+commit)" if ph != "read" else ph)
        a.legend(fontsize=7)
    kvd = data.get("kv", {})
    a = ax[1][0]
    benches = ("fillseq", "fillrandom", "fillsync", "overwrite", "readrandom")
    w = 0.8 / max(1, len(kvd))
    for j, (k, v) in enumerate(kvd.items()):
        a.bar([x + j * w for x in range(len(benches))], [v[b] for b in benches], w, label=k)
    a.set_xticks([x + 0.4 - w / 2 for x in range(len(benches))], benches, fontsize=8)
    a.set_yscale("log")
    a.set_ylabel("ops/s")
    a.set_title("db_bench-style, 16 B keys, 100 B values")
    a.legend(fontsize=8)
    sn = data.get("snappy", {})
    a = ax[1][1]
    if sn:
        ks = list(sn)
        a.bar(ks, [sn[k]["sys_s"] for k in ks], label="kernel s")
        a.bar(ks, [sn[k]["user_s"] for k in ks], bottom=[sn[k]["sys_s"] for k in ks], label="user s")
        a.set_ylabel("CPU seconds (storing phase)")
        a.set_title("Snappy corpus: output to objects vs files")
        a.legend(fontsize=8)
    pg = data.get("pages", {})
    a = ax[1][2]
    if pg:
        ks = list(pg)
        a.bar([x - 0.2 for x in range(len(ks))], [pg[k]["first_ns"] for k in ks], 0.4, label="first touch")
        a.bar([x + 0.2 for x in range(len(ks))], [pg[k]["mapped_ns"] for k in ks], 0.4, label="mapped")
        a.set_xticks(range(len(ks)), ks)
        a.set_ylabel("ns per page")
        a.set_title("page access (random order)")
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--out", default=str(REPO / "out" / "bench"))
    ap.add_argument("--dir", default="/dev/shm/chell-bench-pvm")
    ap.add_argument("--disk-dir", default="/var/tmp/chell-bench-pvm",
                    help="a disk file system for the leveldb-sync-disk context run ('' to skip)")
    ap.add_argument("--runs", type=int)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=("objects", "kv", "snappy", "pages"), action="append")
    ap.add_argument("--from-json")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        data = json.load(open(args.from_json))
    else:
        prog = Path(args.build) / "bin" / "chell_bench_pvm"
        chell = Path(args.build) / "bin" / "chell"
        if not prog.exists():
            sys.exit(f"bench_pvm: {prog} missing: build first")
        runs = args.runs or (1 if args.quick else 5)
        os.makedirs(args.dir, exist_ok=True)
        if args.disk_dir:
            os.makedirs(args.disk_dir, exist_ok=True)
        only = set(args.only or ("objects", "kv", "snappy", "pages"))
        data = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                            "kernel": platform.release()},
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": runs, "quick": args.quick,
                "objects": [], "kv": {}, "snappy": {}, "pages": {}}
        if "objects" in only:
            data["objects"] = objects(args, prog, chell, runs, SIZES, (1, 2))
        if "kv" in only:
            data["kv"] = kv(args, prog, runs, 5000 if args.quick else 50000)
        if "snappy" in only:
            data["snappy"] = snappy(args, prog, runs)
        if "pages" in only:
            data["pages"] = pages(args, prog, chell, runs)
        shutil.rmtree(args.dir, ignore_errors=True)
        if args.disk_dir:
            shutil.rmtree(args.disk_dir, ignore_errors=True)
        with open(out / "pvm.json", "w") as f:
            json.dump(data, f, indent=1)
    print(summary(data))
    plot(data, out / "pvm.png")
    log(f"wrote {out / 'pvm.json'} and {out / 'pvm.png'}")


if __name__ == "__main__":
    main()
