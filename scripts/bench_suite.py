#!/usr/bin/env python3
"""The workload suite (issue 11): every workload under every mode and tier
preset this build has, side by side in one run.

Workloads (docs/WORKLOADS.md):
  filebench   fileserver, webserver, webproxy, varmail (build/bin/chell_filebench:
              filebench's personalities, scaled), and the WARP paper's I/O-size
              sweeps: seqread and randwrite, 4 KB .. 4 MB
  programs    postmark, dbench, sysbench fileio, cat of a large file (1 GB;
              smaller with --quick), grep -r over a source tree, make of a
              source tree (this repository's C sources, a generated Makefile,
              built twice: the second build is the "repeated make")

Arms (what exists in the build is discovered from `chell config --keys --json`;
the rest is reported as unavailable, never an error):
  kernel      the program alone, no Chell (tier model none only)
  posix       `chell run --mode posix`: the kernel path, charged the tier model
  direct      `chell run --mode direct`
  warp        `chell run --mode warp` (when the build has the handler)
  cache       `chell run --mode cache`: chelld with a pool on /dev/shm in front of
              a backing directory on the real disk (--backing-dir); its reference
              is `pagecache`, the program alone on that same directory
each under every `tier.model` preset the build knows (`none` only without the
tier model). Ratios: each arm against the kernel path (posix, same preset; cache
against pagecache) and against the best static choice (the better of posix and
direct under that preset).

Every chell_filebench run verifies every byte it reads against what it wrote;
a mismatch fails the run (and the suite's exit status), whatever the timing.

    scripts/bench_suite.py [--quick|--smoke] [--out out/suite] [--doc docs/PERFORMANCE.md]
    scripts/bench_suite.py --from-json out/suite/suite.json [--doc docs/PERFORMANCE.md]

Writes <out>/suite.json (raw results, discovery, ratios), <out>/suite.md (the
tables) and one PNG per figure. Exit 0 when every run completed and verified,
1 when some run failed, 2 usage or missing build.
"""
import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from bench_cache import (build_info, cpu_busy, flat_numbers, fmt, log, machine_info, median,  # noqa: E402
                         ratio, update_doc)  # the shared machinery of the benchmark scripts

DOC_BEGIN = "<!-- bench_suite: begin generated tables -->"
DOC_END = "<!-- bench_suite: end generated tables -->"
MB = 1 << 20
PERSONALITIES = ("fileserver", "webserver", "webproxy", "varmail")
SWEEPS = ("seqread", "randwrite")
PROGRAMS = ("postmark", "dbench", "sysbench", "cat", "grep", "make")
TMPFS_ARMS = ("kernel", "posix", "direct", "warp")
ALL_ARMS = TMPFS_ARMS + ("pagecache", "cache")
STATIC = ("posix", "direct")  # the static choices WARP is compared with

# Sizes of everything, per profile. seconds: per personality run, sweep_s:
# per I/O size. files_scale multiplies filebench's published file counts.
PROFILES = {
    "full": dict(seconds=15, sweep_s=2, files_scale=0.1, sweep_file=256 * MB, sizes=None, rounds=2,
                 postmark_files=5000, postmark_tx=100000, dbench_s=10, dbench_clients=2,
                 sysbench_size=512 * MB, sysbench_s=10, cat_size=1024 * MB, cat_reps=3,
                 grep_tree="/usr/include", make_every=1),
    # quick: every arm under every preset (26 arms with warp, cache and five
    # presets) in about half an hour: 7 of the 11 sweep sizes (4 KB - 4 MB,
    # 2 MB included for the random-write target), every 8th make unit
    "quick": dict(seconds=2, sweep_s=0.4, files_scale=0.1, sweep_file=64 * MB,
                  sizes=[4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20], rounds=1,
                  postmark_files=1000, postmark_tx=10000, dbench_s=2, dbench_clients=2,
                  sysbench_size=64 * MB, sysbench_s=2, cat_size=256 * MB, cat_reps=2,
                  grep_tree="/usr/include", make_every=8),
    "smoke": dict(seconds=0.3, sweep_s=0.1, files_scale=0.005, sweep_file=8 * MB,
                  sizes=[4096, 1 << 20], rounds=1,
                  postmark_files=50, postmark_tx=200, dbench_s=2, dbench_clients=1,
                  sysbench_size=8 * MB, sysbench_s=1, cat_size=16 * MB, cat_reps=1,
                  grep_tree=str(REPO / "src" / "common"), make_every=40),
}


def human(n):
    for unit, div in (("G", 1 << 30), ("M", MB), ("K", 1024)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


# ---------------------------------------------------------------- discovery

def discover(chell):
    """What this build has: handlers (the `mode` key's choices, or a
    `handlers` list if the registry prints one), tier presets (the
    `tier.model` key's choices without `custom`), the `chell warp` command."""
    out = {"handlers": [], "tier_presets": ["none"], "tier": False, "warp": False, "warp_cli": False,
           "keys": [], "unavailable": []}
    r = subprocess.run([str(chell), "config", "--keys", "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"chell config --keys --json failed: {r.stderr.strip()[-500:]}")
    data = json.loads(r.stdout)
    keys = data.get("settings", data.get("keys", [])) if isinstance(data, dict) else data
    handlers = []
    if isinstance(data, dict) and isinstance(data.get("handlers"), list):
        handlers = [h["name"] if isinstance(h, dict) else h for h in data["handlers"]]
    by_key = {k.get("key"): k for k in keys if isinstance(k, dict)}
    out["keys"] = sorted(by_key)
    if not handlers and "mode" in by_key:
        handlers = [c for c in by_key["mode"].get("choices", [])]
    out["handlers"] = handlers
    tm = by_key.get("tier.model")
    if tm:
        out["tier"] = True
        presets = [c for c in tm.get("choices", []) if c != "custom"]
        out["tier_presets"] = ["none"] + [p for p in presets if p != "none"]
    else:
        out["unavailable"].append({"what": "tier presets (pcm, stt-ram, memristor, optane, cxl)",
                                   "why": "no tier.model setting in this build: only `none` runs"})
    out["warp"] = "warp" in handlers
    if not out["warp"]:
        out["unavailable"].append({"what": "warp arm", "why": "no warp handler in this build"})
    h = subprocess.run([str(chell), "help"], capture_output=True, text=True)
    out["warp_cli"] = bool(re.search(r"^\s+warp\s", h.stdout + h.stderr, re.M))
    out["warp_keys"] = [k for k in out["keys"] if k.startswith("warp.")]
    return out


# ---------------------------------------------------------------- arms

class Arms:
    """Builds the command line of a program in an arm and owns the scratch
    directories: one per arm on /dev/shm, the cache arm's backing directory
    on the real disk, and chelld for the cache arm."""

    def __init__(self, args, disc, stack):
        self.bin = args.build / "bin"
        self.chell = self.bin / "chell"
        self.disc = disc
        # No Chell settings leak into the arms, except where the tier model
        # keeps its per-boot state (the tests point it at a directory of
        # their own, removed after them).
        self.env = {k: v for k, v in os.environ.items()
                    if (not k.startswith("CHELL_") or k == "CHELL_TIER_STATE") and k != "LD_PRELOAD"}
        self.shm = Path(tempfile.mkdtemp(prefix="chell-suite-", dir="/dev/shm"))
        stack.callback(shutil.rmtree, self.shm, True)
        self.backing = Path(tempfile.mkdtemp(prefix="chell-suite-back-", dir=args.backing_dir))
        stack.callback(shutil.rmtree, self.backing, True)
        self.scratch = Path(tempfile.mkdtemp(prefix="chell-suite-aux-"))
        stack.callback(shutil.rmtree, self.scratch, True)
        self.pool = None
        self.pool_size = args.pool_size
        self.stats_dir = None
        # warp.patterns of the current run (outside every --path: a patterns
        # file inside the warp arm's directory would itself be opened under
        # warp), fresh for each workload so its first run starts cold
        self.patterns = None
        # warp.patterns_files of the current workload (None: the default,
        # 1024 files): a workload over more files than that sizes it
        self.patterns_files = None
        stack.callback(self.stop_cache)

    def dir(self, arm):
        """The data directory of an arm (created empty)."""
        d = (self.backing if arm in ("cache", "pagecache") else self.shm) / arm
        d.mkdir(parents=True, exist_ok=True)
        return d

    def start_cache(self):
        self.stop_cache()
        self.pool = self.shm / f"pool-{time.monotonic_ns()}"
        self.pool.mkdir()
        r = subprocess.run([str(self.chell), "cache", "start", "--pool", str(self.pool), "--size",
                            self.pool_size, "--backing", str(self.backing)],
                           capture_output=True, text=True, env=self.env, timeout=120)
        if r.returncode != 0:
            pool, self.pool = self.pool, None
            shutil.rmtree(pool, ignore_errors=True)
            raise RuntimeError(f"chell cache start: {r.stderr.strip()[-800:]}")

    def stop_cache(self):
        if self.pool is None:
            return
        r = subprocess.run([str(self.chell), "cache", "stop", "--pool", str(self.pool), "--timeout", "600"],
                           capture_output=True, text=True, env=self.env, timeout=700)
        if r.returncode != 0:
            log(f"warning: chell cache stop: {r.stderr.strip()[-300:]}")
        shutil.rmtree(self.pool, ignore_errors=True)
        self.pool = None

    def argv(self, arm, preset, cmd, stats=None):
        cmd = [str(c) for c in cmd]
        if arm in ("kernel", "pagecache"):
            return cmd
        extra = []
        if preset != "none":
            extra += ["--set", f"tier.model={preset}"]
        if stats:
            extra += ["--set", f"stats.file={stats}"]
        if arm == "warp" and self.patterns:
            extra += ["--set", f"warp.patterns={self.patterns}"]
            if self.patterns_files:
                extra += ["--set", f"warp.patterns_files={self.patterns_files}"]
        if arm == "cache":
            return [str(self.chell), "run", "--mode", "cache", "--set", f"cache.pool={self.pool}",
                    "--set", f"cache.backing={self.backing}", *extra, "--", *cmd]
        return [str(self.chell), "run", "--mode", arm, "--path", str(self.shm / arm), *extra, "--", *cmd]

    def run(self, arm, preset, cmd, timeout=1800, ok_codes=(0,), cwd=None, stats=None, discard=False):
        """Run cmd in the arm; (CompletedProcess, wall seconds). discard:
        its standard output goes to /dev/null (cat's bytes)."""
        argv = self.argv(arm, preset, cmd, stats)
        t0 = time.monotonic()
        r = subprocess.run(argv, stdout=subprocess.DEVNULL if discard else subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=self.env, timeout=timeout, cwd=cwd)
        wall = time.monotonic() - t0
        if r.returncode not in ok_codes:
            raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stderr[-2000:]}\n{(r.stdout or '')[-1000:]}")
        return r, wall


# ---------------------------------------------------------------- workloads

def filebench_cmd(arms, prof, workload, d, seed):
    cmd = [arms.bin / "chell_filebench", workload, "--dir", d, "--seed", seed]
    if workload in SWEEPS:
        cmd += ["--seconds", prof["sweep_s"], "--file-size", prof["sweep_file"]]
        if prof["sizes"]:
            cmd += ["--iosize", ",".join(str(s) for s in prof["sizes"])]
    else:
        cmd += ["--seconds", prof["seconds"], "--scale", prof["files_scale"]]
    return cmd


def run_filebench(arms, prof, workload, arm, preset, rnd, stats):
    d = arms.dir(arm) / workload
    r, wall = arms.run(arm, preset, filebench_cmd(arms, prof, workload, d, 1 + rnd), stats=stats,
                       ok_codes=(0, 1))
    data = json.loads(r.stdout)
    if r.returncode != 0 or not data.get("ok"):
        raise RuntimeError(f"{workload} under {arm}/{preset}: not ok (errors {data.get('errors')}, "
                           f"mismatches {data.get('verify', {}).get('mismatches')}): {data.get('first_error')}")
    rows = []
    if workload in SWEEPS:
        for s in data["sweep"]:
            rows.append({"case": human(s["iosize"]), "iosize": s["iosize"], "unit": "MB/s", "value": s["mb_s"],
                         "p99_us": s["latency_us"]["p99"]})
    else:
        rows.append({"case": "", "unit": "ops/s", "value": data["ops_s"], "mb_s": data["mb_s"],
                     "p99_us": data["latency_us"]["p99"]})
    shutil.rmtree(d, ignore_errors=True)
    return rows, data


def prepare_programs(arms, prof, arm):
    """Inputs of the real programs in the arm's directory, written plainly
    (untimed): the cat file, the grep tree, the make tree."""
    d = arms.dir(arm) / "progs"
    d.mkdir(exist_ok=True)
    big = d / "big.bin"
    if not big.exists() or big.stat().st_size != prof["cat_size"]:
        chunk = os.urandom(MB)
        with open(big, "wb") as f:
            for _ in range(prof["cat_size"] // MB):
                f.write(chunk)
    tree = d / "tree"
    if not tree.exists():
        shutil.copytree(prof["grep_tree"], tree, symlinks=True)
    return d


def make_tree(dst, every):
    """A copy of this repository's C sources (every `every`-th file of src/)
    with a generated Makefile: gcc -O1 -c of each file, then ar. Returns the
    number of compile units."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(REPO / "include", dst / "include")
    shutil.copytree(REPO / "src", dst / "src")
    srcs = sorted(p.relative_to(dst) for p in (dst / "src").rglob("*.c"))[::every]
    incs = ["include"] + sorted(str(p.relative_to(dst)) for p in (dst / "src").rglob("*") if p.is_dir()) + ["src"]
    objs = [str(s.with_suffix(".o")) for s in srcs]
    L = ["# generated by scripts/bench_suite.py: a real compile of Chell's C sources",
         "CC = gcc",
         "CFLAGS = -std=gnu11 -O1 -D_GNU_SOURCE -DCHELL_VERSION_STRING='\"0\"' -DCHELL_VERSION='\"0\"' "
         "-DCHELL_INSTALL_LIBDIR='\"/usr/lib\"' " + " ".join(f"-I{i}" for i in incs),
         f"OBJS = {' '.join(objs)}",
         "libsuite.a: $(OBJS)",
         "\tar rcs $@ $(OBJS)",
         "%.o: %.c",
         "\t$(CC) $(CFLAGS) -c $< -o $@",
         "clean:",
         "\trm -f $(OBJS) libsuite.a",
         ".PHONY: clean"]
    (dst / "Makefile").write_text("\n".join(L) + "\n")
    return len(srcs)


def tree_bytes(p):
    return sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file() and not f.is_symlink())


def run_program(arms, prof, prog, arm, preset, rnd, stats):
    """One real program in the arm: rows of (case, unit, value), higher is better."""
    d = prepare_programs(arms, prof, arm)
    rows, raw = [], {}
    if prog == "postmark":
        w = d / "pm"
        shutil.rmtree(w, ignore_errors=True)
        w.mkdir()
        cfg = arms.scratch / f"postmark-{arm}.cfg"
        cfg.write_text(f"set location {w}\nset number {prof['postmark_files']}\n"
                       f"set transactions {prof['postmark_tx']}\nset seed {42 + rnd}\nrun\nquit\n")
        r, wall = arms.run(arm, preset, ["postmark", cfg], stats=stats)
        raw = {"stdout": r.stdout[-1500:], "wall_s": wall}
        rows.append({"case": "", "unit": "tx/s", "value": prof["postmark_tx"] / wall, "wall_s": wall})
        shutil.rmtree(w, ignore_errors=True)
    elif prog == "dbench":
        w = d / "db"
        shutil.rmtree(w, ignore_errors=True)
        w.mkdir()
        r, wall = arms.run(arm, preset, ["dbench", "-D", w, "-t", prof["dbench_s"], "-c",
                                         "/usr/share/dbench/client.txt", prof["dbench_clients"]], stats=stats)
        m = re.search(r"Throughput ([\d.]+) MB/sec", r.stdout)
        if not m or float(m.group(1)) <= 0:
            raise RuntimeError(f"dbench: no throughput line in its output: {r.stdout[-500:]}")
        raw = {"stdout": r.stdout[-600:], "wall_s": wall}
        rows.append({"case": "", "unit": "MB/s", "value": float(m.group(1))})
        shutil.rmtree(w, ignore_errors=True)
    elif prog == "sysbench":
        w = d / "sb"
        shutil.rmtree(w, ignore_errors=True)
        w.mkdir()
        base = ["sysbench", "fileio", f"--file-total-size={prof['sysbench_size']}", "--file-num=16"]
        subprocess.run(base + ["prepare"], cwd=w, capture_output=True, check=True, env=arms.env)
        r, wall = arms.run(arm, preset, base + ["--file-test-mode=rndrw", f"--time={prof['sysbench_s']}",
                                                "--threads=2", "run"], cwd=w, stats=stats)
        rd = re.search(r"read, MiB/s:\s+([\d.]+)", r.stdout)
        wr = re.search(r"written, MiB/s:\s+([\d.]+)", r.stdout)
        if not rd or not wr:
            raise RuntimeError(f"sysbench: no throughput lines in its output: {r.stdout[-500:]}")
        raw = {"stdout": r.stdout[-1200:], "wall_s": wall}
        rows.append({"case": "rndrw", "unit": "MiB/s", "value": float(rd.group(1)) + float(wr.group(1))})
        shutil.rmtree(w, ignore_errors=True)
    elif prog == "cat":
        # The first run and the runs after it (the same program restarted:
        # under warp, served from the persisted patterns) are two rows, each
        # with its own counters.
        big = d / "big.bin"
        walls, accs, sts = [], [], []
        for _ in range(prof["cat_reps"]):
            _, wall = arms.run(arm, preset, ["cat", big], stats=stats, discard=True)
            walls.append(wall)
            sts.append(collect_stats(arms, stats.parent) if stats else None)
            accs.append((sts[-1] or {}).get("accuracy"))
        raw = {"walls": walls, "stats": sts}
        size = human(prof["cat_size"])
        rows.append({"case": size, "unit": "MB/s", "value": prof["cat_size"] / walls[0] / 1e6,
                     "wall_s": walls[0], "accuracy": accs[0]})
        if len(walls) > 1:
            rows.append({"case": f"{size} again", "unit": "MB/s", "value": prof["cat_size"] / min(walls[1:]) / 1e6,
                         "wall_s": min(walls[1:]), "accuracy": median(accs[1:])})
    elif prog == "grep":
        # twice, as cat: the second run is the same program restarted
        tree = d / "tree"
        nbytes = tree_bytes(tree)
        # the patterns file remembers every file of the tree (/usr/include:
        # ~8,000; the default 1024 would keep only the last ones read, and
        # the restarted run, storing as it goes, would evict them first)
        nfiles = sum(1 for f in tree.rglob("*") if f.is_file())
        arms.patterns_files = min(65536, max(1024, 2 * nfiles))
        walls, accs, sts = [], [], []
        for _ in range(2):
            _, wall = arms.run(arm, preset, ["grep", "-r", "-F", "-e", "chell-suite-no-such-string", tree],
                               ok_codes=(1,), stats=stats)
            walls.append(wall)
            sts.append(collect_stats(arms, stats.parent) if stats else None)
            accs.append((sts[-1] or {}).get("accuracy"))
        arms.patterns_files = None
        raw = {"walls": walls, "bytes": nbytes, "stats": sts, "files": nfiles}
        rows.append({"case": "", "unit": "MB/s", "value": nbytes / walls[0] / 1e6, "wall_s": walls[0],
                     "accuracy": accs[0]})
        rows.append({"case": "again", "unit": "MB/s", "value": nbytes / walls[1] / 1e6, "wall_s": walls[1],
                     "accuracy": accs[1]})
    elif prog == "make":
        w = d / "mk"
        units = make_tree(w, prof["make_every"])
        walls, accs, sts = [], [], []
        for rep in range(2):
            if rep:
                subprocess.run(["make", "-s", "clean"], cwd=w, capture_output=True, check=True, env=arms.env)
            _, wall = arms.run(arm, preset, ["make", "-s", "-j2"], cwd=w, stats=stats)
            walls.append(wall)
            sts.append(collect_stats(arms, stats.parent) if stats else None)
            accs.append((sts[-1] or {}).get("accuracy"))
        if not (w / "libsuite.a").exists():
            raise RuntimeError("make: libsuite.a was not built")
        raw = {"walls": walls, "units": units, "stats": sts}
        rows.append({"case": f"{units} units", "unit": "builds/min", "value": 60 / walls[0], "wall_s": walls[0],
                     "accuracy": accs[0]})
        rows.append({"case": "repeated", "unit": "builds/min", "value": 60 / walls[1], "wall_s": walls[1],
                     "accuracy": accs[1]})
        shutil.rmtree(w, ignore_errors=True)
    return rows, raw


# ---------------------------------------------------------------- warp observability

WARP_WORDS = ("warp", "accura", "prefetch", "node", "transition", "writeback", "write_back", "buffer")


def collect_stats(arms, stats_glob_dir):
    """The counters the processes of one run wrote (stats.file), through
    `chell stat --json`; the total's WARP-related keys, whatever they are
    called, and accuracy if the handler reports one."""
    files = sorted(stats_glob_dir.glob("*.json"))
    if not files:
        return None
    r = subprocess.run([str(arms.chell), "stat", "--json", *map(str, files)], capture_output=True, text=True,
                       env=arms.env)
    for f in files:
        f.unlink()
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-300:]}
    try:
        data = json.loads(r.stdout)
    except ValueError:
        return {"error": "chell stat printed no JSON"}
    total = data.get("total", data) if isinstance(data, dict) else data
    procs = data.get("processes", []) if isinstance(data, dict) else []
    f = flat_numbers(total)
    keep = {k: v for k, v in f.items() if any(w in k.lower() for w in WARP_WORDS)}
    # an accuracy the handler computed (a fraction or a percentage), else
    # accurate / accesses (the paper's definition, brain.h's counters)
    acc = next((v for k, v in f.items() if k.lower().endswith("accuracy")), None)
    if acc is not None and acc > 1.0:
        acc /= 100.0
    if acc is None:
        a = next((v for k, v in f.items() if k.lower().endswith("accurate")), None)
        n = next((v for k, v in f.items() if k.lower().endswith("accesses")), None)
        acc = ratio(a, n)
    return {"warp": keep, "accuracy": acc, "reads": f.get("reads"), "writes": f.get("writes"),
            "procs": len(procs), "modes": sorted({p.get("mode", "?") for p in procs}),
            "tier_models": sorted({p.get("tier_model", "none") for p in procs}), "total": f}


def _sum(sts, *keys):
    return sum(st["total"].get(k, 0) for st in sts for k in keys)


def mode_check(arm, preset, sts):
    """Did the run really go through the arm's handler and the tier model it
    claims, or silently through the kernel alone? From the counters every
    process of the run wrote (stats.file): each process's `mode` is the arm,
    its `tier_model` the preset and the model charged bytes; the handler
    served operations itself (direct: its reads and writes; warp: node
    accesses, with the share served mapped and buffered; cache: its
    operations). ok None: nothing to check (no Chell, or posix without a
    model, which writes no counters by design: docs/TIER.md)."""
    if arm in ("kernel", "pagecache"):
        return {"ok": None, "why": "no Chell"}
    sts = [st for st in sts if st and "total" in st]
    if not sts:
        if arm == "posix" and preset == "none":
            return {"ok": None, "why": "posix writes no counters without a tier model"}
        return {"ok": False, "why": "no stats.file written"}
    out = {"procs": sum(st["procs"] for st in sts)}
    modes = sorted({m for st in sts for m in st["modes"]})
    models = sorted({m for st in sts for m in st["tier_models"]})
    out.update(modes=modes, tier_models=models)
    bad = []
    if modes != [arm]:
        bad.append(f"processes ran in mode(s) {', '.join(modes)}")
    if models != [preset]:
        bad.append(f"tier model(s) {', '.join(models)}")
    if preset != "none":
        out["tier_bytes"] = _sum(sts, "tier_read_bytes", "tier_write_bytes")
        if not out["tier_bytes"]:
            bad.append("the tier model charged no byte")
    ops = _sum(sts, "reads", "writes")
    out["ops"] = ops
    if arm in ("direct", "cache", "warp") and not ops:
        bad.append(f"{arm} served no read or write")
    if arm == "direct" and ops:
        out["kernel_fallback_share"] = round(_sum(sts, "kernel_fallbacks") / ops, 4)
    if arm == "warp":
        acc = _sum(sts, "accesses")
        out["node_accesses"] = acc
        if not acc:
            bad.append("warp accessed no node")
        if ops:
            out["mapped_read_share"] = round(_sum(sts, "mapped_reads") / ops, 4)
            out["buffered_share"] = round(_sum(sts, "buffered_reads", "buffered_writes") / ops, 4)
        out["transitions"] = _sum(sts, "transitions")
        out["checkpoints"] = _sum(sts, "checkpoints")
    out["ok"] = not bad
    out["why"] = "; ".join(bad) if bad else "ok"
    return out


def warp_node_map(arms, path):
    """`chell warp show FILE` (JSON if it has --json, else its text), as a
    list of node states; None when the command is missing or says nothing."""
    if not arms.disc.get("warp_cli"):
        return None
    pat = ["--patterns", str(arms.patterns)] if arms.patterns else []
    for argv in ([str(arms.chell), "warp", "show", "--json", *pat, str(path)],
                 [str(arms.chell), "warp", "show", *pat, str(path)]):
        r = subprocess.run(argv, capture_output=True, text=True, env=arms.env)
        if r.returncode != 0:
            continue
        try:
            data = json.loads(r.stdout)
            nodes = data.get("nodes", data) if isinstance(data, dict) else data
            states = [n.get("state") if isinstance(n, dict) else n for n in nodes]
            if states:
                return {"file": path.name, "states": states, "raw": data if len(r.stdout) < 20000 else None}
        except (ValueError, AttributeError, TypeError):
            pass
        states = re.findall(r"^\s*(\d+)\b.*?\b(normal|mapped|buffered|read-mapped|write-buffered)\b", r.stdout, re.M)
        if states:
            return {"states": [s for _, s in sorted(states, key=lambda x: int(x[0]))], "text": r.stdout[-4000:]}
    return None


# ---------------------------------------------------------------- the run

def plan(args, disc):
    arms = []
    for preset in disc["tier_presets"]:
        if args.presets and preset not in args.presets:
            continue
        for arm in ALL_ARMS:
            if args.modes and arm not in args.modes:
                continue
            if arm in ("kernel", "pagecache") and preset != "none":
                continue  # no tier model without Chell
            if arm == "warp" and not disc["warp"]:
                continue
            if arm in ("posix", "direct", "cache") and arm not in disc["handlers"]:
                continue
            arms.append((arm, preset))
    return arms


def startup_ms(arms, combos):
    """Wall time of `true` in each arm (median of 5): what every real
    program's time includes (chell run's checks, the library's start-up);
    the start-up of chelld is not in it."""
    out = {}
    for arm, preset in combos:
        if arm == "cache":
            continue
        times = []
        for _ in range(5):
            try:
                times.append(arms.run(arm, preset, ["true"])[1] * 1e3)
            except (RuntimeError, subprocess.SubprocessError):
                break
        out[f"{arm}/{preset}"] = median(times)
    return out


def run_all(args, prof, disc, arms, res):
    workloads = [w for w in PERSONALITIES + SWEEPS + PROGRAMS if not args.only or w in args.only]
    missing = [p for p in ("postmark", "dbench", "sysbench") if p in workloads and not shutil.which(p)]
    for p in missing:
        res["unavailable"].append({"what": p, "why": "not installed (scripts/setup.sh installs it)"})
        workloads.remove(p)
    combos = plan(args, disc)
    res["config"]["arms"] = [f"{a}/{p}" for a, p in combos]
    res["startup_ms"] = startup_ms(arms, combos)
    # the node-state maps (chell warp show) under one preset: pcm, the
    # issue's reference device, else the first one
    presets = [p for _, p in combos]
    map_preset = "pcm" if "pcm" in presets else (presets[0] if presets else None)
    failed = []
    for rnd in range(prof["rounds"]):
        order = combos if rnd % 2 == 0 else list(reversed(combos))
        for w in workloads:
            for arm, preset in order:
                tag = f"{w} {arm}/{preset} round {rnd + 1}/{prof['rounds']}"
                log(f"  {tag}")
                stats = None
                if arm not in ("kernel", "pagecache"):  # every Chell arm: the mode check needs them
                    arms.stats_dir = arms.scratch / "stats"
                    arms.stats_dir.mkdir(exist_ok=True)
                    for f in arms.stats_dir.glob("*.json"):
                        f.unlink()
                    stats = arms.stats_dir / f"{w}-%p.json"
                arms.patterns = None
                if arm == "warp":
                    arms.patterns = arms.scratch / f"warp-{w}-{preset}.patterns"
                    arms.patterns.unlink(missing_ok=True)
                t0 = time.monotonic()
                entry = {"workload": w, "arm": arm, "preset": preset, "round": rnd}
                try:
                    if w in PROGRAMS:  # inputs written plainly, before chelld looks at the directory
                        prepare_programs(arms, prof, arm)
                    if arm == "cache":
                        arms.start_cache()
                    if w in PROGRAMS:
                        rows, raw = run_program(arms, prof, w, arm, preset, rnd, stats)
                    else:
                        rows, raw = run_filebench(arms, prof, w, arm, preset, rnd, stats)
                    entry.update(ok=True, rows=rows, raw=raw)
                    if stats:
                        entry["stats"] = collect_stats(arms, arms.stats_dir)
                    entry["mode_check"] = mode_check(arm, preset, [entry.get("stats")] + list(raw.get("stats") or []))
                    if not entry["mode_check"]["ok"] and entry["mode_check"]["ok"] is not None:
                        log(f"    MODE CHECK: {entry['mode_check']['why']}")
                    if arm == "warp" and preset == map_preset:
                        entry["node_map"] = warp_map_for(arms, prof, w, preset)
                except (RuntimeError, ValueError, KeyError, OSError, subprocess.SubprocessError) as e:
                    log(f"    FAILED: {str(e)[:800]}")
                    entry.update(ok=False, error=str(e)[-3000:])
                    failed.append(tag)
                finally:
                    if arm == "cache":
                        arms.stop_cache()
                    if arms.patterns:
                        arms.patterns.unlink(missing_ok=True)
                        arms.patterns = None
                entry["elapsed_s"] = round(time.monotonic() - t0, 2)
                res["runs"].append(entry)
    return failed


def warp_map_for(arms, prof, workload, preset):
    """The per-node state map of a file after a run under warp, as stored in
    the run's patterns file (`chell warp show --json --patterns`): the `cat`
    file, and a random-write file (a short extra run that keeps its file);
    skipped cleanly without `chell warp`."""
    if not arms.disc.get("warp_cli"):
        return None
    if workload == "cat":
        return warp_node_map(arms, arms.dir("warp") / "progs" / "big.bin")
    if workload == "randwrite":  # the random-write file: where buffered nodes show
        d = arms.dir("warp") / f"{workload}-map"
        # without the read-back check, so that the last accesses the
        # patterns keep are the writes themselves
        cmd = filebench_cmd(arms, prof, workload, d, 1) + ["--keep", "--iosize", "4k,64k", "--verify", "none"]
        try:
            arms.run("warp", preset, cmd)
            return warp_node_map(arms, d / "largefile1")
        except (RuntimeError, subprocess.SubprocessError) as e:
            return {"error": str(e)[-500:]}
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return None


def summarize(res):
    """One row per (workload, case, preset): the median value per arm over
    rounds, the spread, and the ratios."""
    groups = {}
    for e in res["runs"]:
        if not e.get("ok"):
            continue
        for row in e["rows"]:
            key = (e["workload"], row["case"], e["preset"])
            g = groups.setdefault(key, {"unit": row["unit"], "vals": {}, "acc": {}})
            g["vals"].setdefault(e["arm"], []).append(row["value"])
            acc = row["accuracy"] if "accuracy" in row else (e.get("stats") or {}).get("accuracy")
            if acc is not None:
                g["acc"].setdefault(e["arm"], []).append(acc)
    order = {w: i for i, w in enumerate(PERSONALITIES + SWEEPS + PROGRAMS)}
    # presets in the build's order (none, then the registry's: pcm first)
    porder = {p: i for i, p in enumerate(res.get("discovered", {}).get("tier_presets", ["none"]))}
    rows = []
    for (w, case, preset), g in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][2] != "none",
                                                                         porder.get(kv[0][2], 99), kv[0][2],
                                                                         _case_key(kv[0][1]))):
        vals = {a: median(v) for a, v in g["vals"].items()}
        # the plain kernel and the page cache exist only without a model:
        # under a preset, the kernel path is posix with that model
        if preset != "none":
            for a in ("kernel", "pagecache"):
                base = next((r for r in rows if r["workload"] == w and r["case"] == case and r["preset"] == "none"), None)
                if base and base["values"].get(a) is not None:
                    vals.setdefault(a + " (none)", base["values"][a])
        kpath = vals.get("posix")
        statics = {a: vals[a] for a in STATIC if vals.get(a) is not None}
        best = max(statics, key=statics.get) if statics else None
        row = {"workload": w, "case": case, "preset": preset, "unit": g["unit"], "values": vals,
               "spread": {a: [min(v), max(v)] for a, v in g["vals"].items() if len(v) > 1},
               "n": {a: len(v) for a, v in g["vals"].items()},
               "best_static": best,
               "vs_kernel_path": {a: ratio(vals.get(a), kpath) for a in ("kernel", "direct", "warp")
                                  if vals.get(a) is not None},
               "vs_best_static": {a: ratio(vals.get(a), statics[best]) for a in ("posix", "direct", "warp")
                                  if best and vals.get(a) is not None},
               "cache_vs_pagecache": ratio(vals.get("cache"), vals.get("pagecache", vals.get("pagecache (none)"))),
               "accuracy": {a: median(v) for a, v in g["acc"].items()}}
        rows.append(row)
    return rows


def targets(res):
    """The issue's WARP targets from the summary rows (n/a without warp or
    without the preset they name)."""
    rows = res["summary"]
    out = []

    def add(target, vals, goal, ok):
        have = [v for v in vals if v[1] is not None]
        if not have:
            out.append({"target": target, "measured": "-", "goal": goal, "pass": None})
            return
        worst = min(have, key=lambda v: v[1])
        out.append({"target": target, "measured": f"{worst[1]:.3f} (worst: {worst[0]})", "goal": goal,
                    "pass": ok(worst[1])})

    def sel(pred, key):
        return [(f"{r['workload']} {r['case']} {r['preset']}".replace("  ", " "), key(r)) for r in rows if pred(r)]

    add("warp / best static, every workload and preset",
        sel(lambda r: True, lambda r: r["vs_best_static"].get("warp")), ">= 0.95", lambda v: v >= 0.95)
    add("warp / kernel path, fileserver and varmail, pcm",
        sel(lambda r: r["preset"] == "pcm" and r["workload"] in ("fileserver", "varmail"),
            lambda r: r["vs_kernel_path"].get("warp")), ">= 1.3", lambda v: v >= 1.3)
    add("warp / direct, random writes 4 KB - 2 MB, pcm",
        sel(lambda r: r["preset"] == "pcm" and r["workload"] == "randwrite" and _case_key(r["case"])[1] <= 2 << 20,
            lambda r: ratio(r["values"].get("warp"), r["values"].get("direct"))), ">= 1.5", lambda v: v >= 1.5)
    add("warp / direct, sequential reads, pcm",
        sel(lambda r: r["preset"] == "pcm" and r["workload"] == "seqread",
            lambda r: ratio(r["values"].get("warp"), r["values"].get("direct"))), ">= 0.95", lambda v: v >= 0.95)
    add("warp prediction accuracy: cat, grep -r, repeated make",
        sel(lambda r: (r["workload"] in ("cat", "grep") and not r["case"].endswith("again"))
            or (r["workload"] == "make" and r["case"] == "repeated"), lambda r: r["accuracy"].get("warp")),
        ">= 0.99", lambda v: v >= 0.99)
    add("warp prediction accuracy: cat and grep -r restarted (persisted patterns)",
        sel(lambda r: r["workload"] in ("cat", "grep") and r["case"].endswith("again"),
            lambda r: r["accuracy"].get("warp")),
        ">= 0.90", lambda v: v >= 0.90)
    return out


def _case_key(case):
    m = re.match(r"(\d+)([KMG]?)$", case)
    if not m:
        return (1, case)
    return (0, int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)])


# ---------------------------------------------------------------- report

def markdown(res):
    L = []
    m, cfg, disc = res["machine"], res["config"], res["discovered"]
    L.append(f"Run {res['when']} ({cfg['profile']} profile, {cfg['rounds']} round(s), arm order reversed every "
             f"round), commit {res['build'].get('commit', '?')}"
             f"{' (src/include modified)' if res['build'].get('src_dirty') else ''}, "
             f"{res['build'].get('build_type') or 'default'} build; {m.get('cores')} x {m.get('cpu_model')}, "
             f"{m.get('mem_gib', '?')} GiB, Linux {m.get('kernel')}. CPU busy with other work before the run: "
             f"{cfg.get('busy_before', 0):.0%}. Data on /dev/shm (tmpfs); cache/pagecache on "
             f"`{cfg.get('backing_fs', '?')}`. Arms run: {', '.join(cfg['arms'])}.")
    if res.get("startup_ms"):
        L.append("")
        L.append("Wall time of `true` (start-up, included in every real program's time): "
                 + ", ".join(f"{k} {fmt(v, '.1f')} ms" for k, v in res["startup_ms"].items()) + ".")
    L.append("")
    if res.get("targets"):
        L.append("**Issue 11 targets for WARP** (reported, never enforced):")
        L.append("")
        L.append("| target | measured | goal | verdict |")
        L.append("|---|---|---|---|")
        for t in res["targets"]:
            verdict = "n/a" if t["pass"] is None else ("PASS" if t["pass"] else "FAIL")
            L.append(f"| {t['target']} | {t['measured']} | {t['goal']} | {verdict} |")
        L.append("")
    L += warp_tables(res)
    L += mode_check_lines(res)
    if res.get("unavailable"):
        L.append("**Not in this build / not run:** " + "; ".join(f"{u['what']}: {u['why']}" for u in res["unavailable"]))
        L.append("")
    fails = [e for e in res["runs"] if not e.get("ok")]
    if fails:
        L.append("**Failed runs:** " + "; ".join(f"{e['workload']} {e['arm']}/{e['preset']}: "
                                                 f"{e['error'].splitlines()[0][:200]}" for e in fails))
        L.append("")
    L.append("Higher is better everywhere (ops/s, MB/s, tx/s, builds/min). *kernel* = the program alone; "
             "*posix* = `chell run --mode posix`, the kernel path (with the tier model when one is set); "
             "ratios are against that kernel path and against the best static choice (the better of posix and "
             "direct); *cache* runs on a backing directory on the disk and is compared with *pagecache*, the "
             "program alone on that directory. Every filebench run verified every byte it read.")
    L.append("")
    presets = []
    for r in res["summary"]:
        if r["preset"] not in presets:
            presets.append(r["preset"])
    have = {a for r in res["summary"] for a in r["values"]}
    cols = [a for a in ALL_ARMS if a in have]
    for preset in presets:
        rows = [r for r in res["summary"] if r["preset"] == preset]
        L.append(f"**Tier model `{preset}`**" + ("" if preset == "none" else " (kernel and pagecache: without a model)"))
        L.append("")
        head = ["workload", "unit"] + cols + ["direct / kernel path", "best static"]
        if "warp" in have:
            head += ["warp / kernel path", "warp / best static", "warp accuracy"]
        if "cache" in have:
            head += ["cache / pagecache"]
        L.append("| " + " | ".join(head) + " |")
        L.append("|" + "---|" * 2 + "---:|" * (len(head) - 2))
        for r in rows:
            name = r["workload"] + (f" {r['case']}" if r["case"] else "")
            cells = [name, r["unit"]]
            for a in cols:
                v = r["values"].get(a, r["values"].get(a + " (none)"))
                sp = r["spread"].get(a)
                cell = fmt(v, ",.0f" if v is not None and v >= 100 else ".2f")
                if sp and v:
                    cell += f" ±{(sp[1] - sp[0]) / 2 / v:.0%}"
                cells.append(cell)
            cells.append(fmt(r["vs_kernel_path"].get("direct"), ".2f"))
            cells.append(r["best_static"] or "-")
            if "warp" in have:
                acc = r["accuracy"].get("warp")
                cells += [fmt(r["vs_kernel_path"].get("warp"), ".2f"), fmt(r["vs_best_static"].get("warp"), ".2f"),
                          "-" if acc is None else f"{acc:.1%}"]
            if "cache" in have:
                cells.append(fmt(r["cache_vs_pagecache"], ".2f"))
            L.append("| " + " | ".join(cells) + " |")
        L.append("")
    if any(r["spread"] for r in res["summary"]):
        L.append("±: half the range over the rounds, relative to the median.")
        L.append("")
    return "\n".join(L)


def _name(r):
    return r["workload"] + (f" {r['case']}" if r["case"] else "")


def warp_tables(res):
    """The compact WARP views: warp / best static per workload and preset,
    the sweeps' warp / direct under pcm, and the prediction accuracy per
    workload and preset (accurate / node accesses, warp.md §VI-D)."""
    rows = [r for r in res["summary"] if "warp" in r["values"]]
    if not rows:
        return []
    presets = []
    for r in rows:
        if r["preset"] not in presets:
            presets.append(r["preset"])
    names = []
    for r in rows:
        if _name(r) not in names:
            names.append(_name(r))
    cell = {(_name(r), r["preset"]): r for r in rows}

    def matrix(title, value):
        """One table: a row per workload, a column per preset, value(row)."""
        out = [title, "", "| workload | " + " | ".join(presets) + " |", "|---|" + "---:|" * len(presets)]
        for n in names:
            out.append(f"| {n} | " + " | ".join(value(cell[n, p]) if (n, p) in cell else "-" for p in presets) + " |")
        return out + [""]

    def best(r):
        v = r["vs_best_static"].get("warp")
        return "-" if v is None else f"{v:.2f} ({r['best_static'][0]})"

    def acc(r):
        a = r["accuracy"].get("warp")
        return "-" if a is None else f"{a:.1%}"

    L = matrix("**warp / best static choice** (the better of posix and direct under the same preset; "
               "in brackets which one was best: p posix, d direct):", best)
    L += matrix("**warp / kernel path** (posix under the same preset):",
                lambda r: fmt(r["vs_kernel_path"].get("warp"), ".2f"))
    sw = [r for r in rows if r["preset"] == "pcm" and r["workload"] in SWEEPS]
    if sw:
        sizes = sorted({_case_key(r["case"])[1] for r in sw})
        by = {(r["workload"], _case_key(r["case"])[1]): r for r in sw}
        L += ["**I/O-size sweeps under pcm: warp / direct** (MB/s of each in brackets):", "",
              "| I/O size | seqread warp / direct | randwrite warp / direct |", "|---|---:|---:|"]
        for z in sizes:
            cs = []
            for w in SWEEPS:
                r = by.get((w, z))
                if not r:
                    cs.append("-")
                    continue
                wv, dv = r["values"].get("warp"), r["values"].get("direct")
                cs.append(f"{fmt(ratio(wv, dv), '.2f')} ({fmt(wv, ',.0f')} / {fmt(dv, ',.0f')})")
            L.append(f"| {human(z)} | " + " | ".join(cs) + " |")
        L.append("")
    L += matrix("**warp prediction accuracy** (accurate node accesses / node accesses; *again*: the same "
                "program restarted, from the patterns the first run persisted in `warp.patterns`; *repeated*: "
                "make after make clean, same patterns file; the sweeps: one figure per run, over all its I/O sizes):", acc)
    return L


def mode_check_lines(res):
    """Did every arm run in the mode it claims (mode_check per run)?"""
    runs = [e for e in res["runs"] if e.get("ok") and e.get("mode_check")]
    if not runs:
        return []
    good = [e for e in runs if e["mode_check"]["ok"]]
    bad = [e for e in runs if e["mode_check"]["ok"] is False]
    na = sorted({f"{e['arm']}/{e['preset']} ({e['mode_check']['why']})" for e in runs
                 if e["mode_check"]["ok"] is None and e["arm"] not in ("kernel", "pagecache")})
    L = [f"**Mode check** (every process's `stats.file` record names the arm's mode and the preset, the "
         f"model charged bytes, the handler served reads and writes itself): {len(good)} runs passed, "
         f"{len(bad)} failed" + (f"; not checkable: {', '.join(na)}" if na else "") + "."]
    for e in bad:
        L.append(f"* FAILED {e['workload']} {e['arm']}/{e['preset']}: {e['mode_check']['why']}")
    w = [e for e in good if e["arm"] == "warp" and "mapped_read_share" in e["mode_check"]]
    if w:
        mr = [e["mode_check"]["mapped_read_share"] for e in w]
        bf = [e["mode_check"]["buffered_share"] for e in w]
        L.append(f"Under warp, the share of reads and writes served mapped ranged {min(mr):.0%}-{max(mr):.0%} "
                 f"and buffered {min(bf):.0%}-{max(bf):.0%} over the runs (the rest: nodes in the normal state, "
                 f"the kernel path); per run in suite.json (`mode_check`).")
    d = [e["mode_check"]["kernel_fallback_share"] for e in good if "kernel_fallback_share" in e["mode_check"]]
    if d:
        L.append(f"Direct mode's kernel fallbacks: {min(d):.1%}-{max(d):.1%} of its reads and writes.")
    L.append("")
    return L


def plot(res, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no PNGs")
        return []
    colors = {"kernel": "#555555", "posix": "#1f77b4", "direct": "#2ca02c", "warp": "#d62728",
              "pagecache": "#9467bd", "cache": "#ff7f0e"}
    presets = []
    for r in res["summary"]:
        if r["preset"] not in presets:
            presets.append(r["preset"])
    made = []

    def arms_of(rows):
        have = {a for r in rows for a in r["values"] if " (" not in a}
        return [a for a in ALL_ARMS if a in have]

    def bars(name, workloads, title, normalize=False):
        fig, axes = plt.subplots(len(presets), 1, figsize=(11, 3.6 * len(presets)), squeeze=False)
        drew = False
        for ax, preset in zip(axes[:, 0], presets):
            rows = [r for r in res["summary"] if r["preset"] == preset and r["workload"] in workloads
                    and r["workload"] not in SWEEPS]
            if not rows:
                ax.axis("off")
                continue
            arms = arms_of(rows)
            wdt = 0.8 / max(1, len(arms))
            for i, a in enumerate(arms):
                ys = []
                for r in rows:
                    v = r["values"].get(a)
                    base = r["values"].get("pagecache" if a in ("cache", "pagecache") else "posix")
                    ys.append((ratio(v, base) if normalize else v) or 0)
                ax.bar([j + (i - (len(arms) - 1) / 2) * wdt for j in range(len(rows))], ys, wdt, label=a,
                       color=colors.get(a))
            ax.set_xticks(range(len(rows)))
            ax.set_xticklabels([r["workload"] + (f"\n{r['case']}" if r["case"] else "") + f"\n({r['unit']})"
                                for r in rows], fontsize=8)
            ax.set_ylabel("relative to the kernel path" if normalize else "ops/s")
            if normalize:
                ax.axhline(1.0, color="black", linewidth=0.8)
            else:
                ax.set_yscale("log")
            ax.set_title(f"{title} - tier model {preset}")
            ax.legend(fontsize=8, ncol=len(arms))
            drew = True
        if drew:
            fig.tight_layout()
            fig.savefig(out / name, dpi=80)
            made.append(name)
        plt.close(fig)

    bars("suite_personalities.png", PERSONALITIES, "filebench personalities (ops/s)")
    bars("suite_programs.png", PROGRAMS, "real programs, relative to the kernel path (cache: to pagecache)",
         normalize=True)
    for sw, title in (("seqread", "sequential read"), ("randwrite", "random write")):
        fig, axes = plt.subplots(1, len(presets), figsize=(6 * len(presets), 4), squeeze=False)
        drew = False
        for ax, preset in zip(axes[0], presets):
            rows = [r for r in res["summary"] if r["preset"] == preset and r["workload"] == sw]
            if not rows:
                ax.axis("off")
                continue
            for a in arms_of(rows):
                pts = [(_case_key(r["case"])[1], r["values"][a]) for r in rows if r["values"].get(a) is not None]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=a, color=colors.get(a))
            ax.set_xscale("log", base=2)
            ax.set_xlabel("I/O size (bytes)")
            ax.set_ylabel("MB/s")
            ax.set_title(f"{title} - tier model {preset}")
            ax.legend(fontsize=8)
            drew = True
        if drew:
            fig.tight_layout()
            fig.savefig(out / f"suite_{sw}.png", dpi=80)
            made.append(f"suite_{sw}.png")
        plt.close(fig)
    # WARP: the per-node state map of a file, one strip per run that has one
    maps = [e for e in res["runs"] if e.get("ok") and isinstance(e.get("node_map"), dict)
            and e["node_map"].get("states")]
    if maps:
        palette = {"normal": 0, "mapped": 1, "read-mapped": 1, "buffered": 2, "write-buffered": 2}
        fig, axes = plt.subplots(len(maps), 1, figsize=(11, 0.9 * len(maps) + 1), squeeze=False)
        from matplotlib.colors import ListedColormap
        cmap = ListedColormap(["#cccccc", "#2ca02c", "#d62728"])
        for ax, e in zip(axes[:, 0], maps):
            st = [palette.get(s, 0) for s in e["node_map"]["states"]]
            ax.imshow([st], aspect="auto", cmap=cmap, vmin=0, vmax=2, interpolation="nearest")
            ax.set_yticks([])
            ax.set_title(f"{e['workload']}, {e['node_map'].get('file', '')} ({e['preset']}): node states (grey normal, green mapped, red buffered)",
                         fontsize=8)
        axes[-1, 0].set_xlabel("node")
        fig.tight_layout()
        fig.savefig(out / "suite_warp_nodes.png", dpi=80)
        made.append("suite_warp_nodes.png")
        plt.close(fig)
    return made


def report(res, out, doc=None):
    out.mkdir(parents=True, exist_ok=True)
    res["summary"] = summarize(res)
    res["targets"] = targets(res)
    md = markdown(res)
    res["figures"] = plot(res, out)
    (out / "suite.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / "suite.md").write_text(md + "\n")
    print(md)
    print(f"json: {out / 'suite.json'}\ntables: {out / 'suite.md'}")
    for f in res["figures"]:
        print(f"figure: {out / f}")
    if doc and update_doc(doc, md, DOC_BEGIN, DOC_END):
        print(f"updated: {doc}")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--build", type=Path, default=Path(os.environ.get("CHELL_BUILD_DIR", REPO / "build")))
    ap.add_argument("--out", type=Path, default=REPO / "out" / "suite")
    prof_g = ap.add_mutually_exclusive_group()
    prof_g.add_argument("--quick", action="store_true", help="shorter runs, smaller inputs (a few minutes)")
    prof_g.add_argument("--smoke", action="store_true", help="tiny: exercises the runner itself (CI, < 1 minute)")
    ap.add_argument("--only", help=f"comma-separated workloads (default all: {','.join(PERSONALITIES + SWEEPS + PROGRAMS)})")
    ap.add_argument("--modes", help=f"comma-separated arms (default all available: {','.join(ALL_ARMS)})")
    ap.add_argument("--presets", help="comma-separated tier presets (default all available)")
    ap.add_argument("--rounds", type=int, help="repetitions, arm order reversed every round (default: profile's)")
    ap.add_argument("--seconds", type=float, help="personality run time (default: profile's)")
    ap.add_argument("--backing-dir", type=Path, default=Path("/var/tmp"),
                    help="real-disk directory for the cache arm's backing files (default /var/tmp)")
    ap.add_argument("--pool-size", default="3G", help="cache arm: chelld pool size (default 3G)")
    ap.add_argument("--wait-quiet", type=int, default=0, metavar="SECONDS",
                    help="first wait up to SECONDS for the machine to be idle (< 15%% busy)")
    ap.add_argument("--doc", type=Path, help="also replace the generated tables in this file (docs/PERFORMANCE.md)")
    ap.add_argument("--from-json", type=Path, metavar="FILE", help="only redo the report from FILE")
    args = ap.parse_args()
    args.build = args.build.resolve()
    for name in ("only", "modes", "presets"):
        v = getattr(args, name)
        setattr(args, name, [x for x in v.split(",") if x] if v else None)
    if args.only:
        bad = [w for w in args.only if w not in PERSONALITIES + SWEEPS + PROGRAMS]
        if bad:
            ap.error(f"--only: unknown workload(s) {', '.join(bad)}")
    if args.modes:
        bad = [a for a in args.modes if a not in ALL_ARMS]
        if bad:
            ap.error(f"--modes: unknown arm(s) {', '.join(bad)} (arms: {', '.join(ALL_ARMS)})")

    if args.from_json:
        report(json.loads(args.from_json.read_text()), args.out, args.doc)
        return 0
    for prog in ("chell", "chell_filebench"):
        if not (args.build / "bin" / prog).exists():
            log(f"{args.build / 'bin' / prog} missing: build first (cmake -S . -B build -G Ninja && ninja -C build)")
            return 2
    profile = "smoke" if args.smoke else "quick" if args.quick else "full"
    prof = dict(PROFILES[profile])
    if args.rounds:
        prof["rounds"] = args.rounds
    if args.seconds:
        prof["seconds"] = args.seconds
    disc = discover(args.build / "bin" / "chell")
    busy = cpu_busy(1 if args.smoke else 2)
    deadline = time.monotonic() + args.wait_quiet
    while busy > 0.15 and time.monotonic() < deadline:
        log(f"  machine busy ({busy:.0%} of CPU time), waiting...")
        busy = cpu_busy(3)
    t_start = time.monotonic()
    res = {"schema": 1, "when": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine_info(),
           "build": build_info(args.build), "discovered": disc, "unavailable": list(disc["unavailable"]),
           "config": {"profile": profile, **prof, "busy_before": busy}, "runs": []}
    lib = args.build / "lib" / "libchell.so"
    lib_mtime = lib.stat().st_mtime if lib.exists() else None
    with contextlib.ExitStack() as stack:
        arms = Arms(args, disc, stack)
        res["config"]["backing_fs"] = subprocess.run(["df", "--output=fstype", str(arms.backing)], capture_output=True,
                                                     text=True).stdout.split()[-1]
        if res["config"]["backing_fs"] == "tmpfs":
            res["unavailable"].append({"what": "cache arm on a real disk",
                                       "why": f"--backing-dir {args.backing_dir} is on tmpfs"})
        log(f"suite ({profile}): handlers {', '.join(disc['handlers'])}; tier presets "
            f"{', '.join(disc['tier_presets'])}")
        failed = run_all(args, prof, disc, arms, res)
    problems = []
    if lib_mtime != (lib.stat().st_mtime if lib.exists() else None):
        problems.append("build/lib/libchell.so was rebuilt during the run")
    res["problems"] = problems
    res["failed"] = failed
    res["elapsed_s"] = round(time.monotonic() - t_start, 1)
    report(res, args.out, args.doc)
    log(f"done in {res['elapsed_s']:.0f} s" + (f"; FAILED: {'; '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        log("interrupted; scratch directories and chelld were removed")
        sys.exit(130)
