#!/usr/bin/env python3
"""Per-open cost, side by side in one run: bench/suite/chell_bench_openclose
(FILES files of 16 KB on /dev/shm, ROUNDS passes of open(O_RDONLY) + one
4 KB read + close) plainly (the kernel, the physical floor of this call
sequence) and under `chell run --mode direct` and `--mode warp`, the arms
alternated round by round so all see the same machine. With --before
BUILD_DIR, a build of an earlier commit runs warp too ("warp_before"), for
a before/after of a change in the same run.

Prints each arm's median ns per open+read+close, its range and its ratio to
the kernel; writes JSON (every round) and a PNG.

    scripts/bench_openclose.py [--rounds 5] [--files 50] [--passes 200]
        [--before /tmp/base/build] [--out bench/results/warp_openclose_s23]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one(build, mode, d, files, passes, settings):
    argv = [str(build / "bin" / "chell_bench_openclose"), str(d), str(files), str(passes)]
    if mode:
        cmd = [str(build / "bin" / "chell"), "run", "--mode", mode, "--path", str(d)]
        for s in settings:
            cmd += ["--set", s]
        argv = cmd + ["--"] + argv
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHELL_") and k != "LD_PRELOAD"}
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        sys.exit(f"bench_openclose: {mode or 'kernel'} failed ({r.returncode}): {r.stderr[-2000:]}")
    return json.loads(r.stdout)["ns_per_open_read_close"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(REPO / "build"), help="build directory (default: build)")
    ap.add_argument("--before", help="build directory of an earlier commit: adds the arm warp_before")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--files", type=int, default=50)
    ap.add_argument("--passes", type=int, default=200)
    ap.add_argument("--out", help="write OUT.json and OUT.png")
    a = ap.parse_args()
    build = Path(a.build)
    arms = [("kernel", build, None, []), ("direct", build, "direct", []), ("warp", build, "warp", []),
            ("warp_map0", build, "warp", ["warp.map_after=0"])]
    if a.before:
        arms.append(("warp_before", Path(a.before), "warp", []))
    d = Path("/dev/shm") / f"chell-openclose-{os.getpid()}"
    d.mkdir()
    rounds = []
    try:
        for r in range(a.rounds):
            order = arms if r % 2 == 0 else list(reversed(arms))
            got = {}
            for name, b, mode, settings in order:
                got[name] = one(b, mode, d, a.files, a.passes, settings)
            rounds.append(got)
            print(f"round {r + 1}: " + ", ".join(f"{k} {v / 1000:.1f} us" for k, v in got.items()), flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    med = {n: statistics.median(x[n] for x in rounds) for n, *_ in arms}
    print("\n| arm | us per open+read+close, median [min-max] | / kernel |\n|---|---|---:|")
    for n, *_ in arms:
        v = [x[n] for x in rounds]
        print(f"| {n} | {med[n] / 1000:.1f} [{min(v) / 1000:.1f}-{max(v) / 1000:.1f}] | "
              f"{med[n] / med['kernel']:.1f} |")
    if a.out:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        res = {"bench": f"chell_bench_openclose DIR {a.files} {a.passes}",
               "unit": "ns per open(O_RDONLY)+4 KB read+close", "commit": commit,
               "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "before": a.before,
               "load_before": os.getloadavg()[0], "rounds": rounds, "median": med,
               "ratio_to_kernel": {n: med[n] / med["kernel"] for n in med}}
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = [n for n, *_ in arms]
        fig, ax = plt.subplots(figsize=(7, 3.5))
        ax.bar(names, [med[n] / 1000 for n in names], color="#4477aa")
        for i, n in enumerate(names):
            ax.scatter([i] * len(rounds), [x[n] / 1000 for x in rounds], color="k", s=8, zorder=3)
            ax.text(i, med[n] / 1000, f"{med[n] / med['kernel']:.1f}x", ha="center", va="bottom")
        ax.set_ylabel("us per open + 4 KB read + close")
        ax.set_title(f"per-open cost, {a.files} files of 16 KB, {a.rounds} rounds (dots), {commit}")
        fig.tight_layout()
        fig.savefig(out.with_suffix(".png"), dpi=110)
        print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
