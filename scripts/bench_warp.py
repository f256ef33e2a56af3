#!/usr/bin/env python3
"""WARP's own targets (issue 11), side by side in one run: chell_filebench's
randwrite and seqread sweeps under `chell run --mode direct` and
`--mode warp`, both with `--set tier.model=PRESET` (pcm by default),
alternating the arms round by round so both see the same machine.

Prints, per I/O size, each arm's MB/s (median over the rounds, and the
range), the ratio warp / direct of the medians, and WARP's checkpoint cost:
checkpoint_lock_ns (the time checkpoints hold the buffer's lock: what the
application's calls can wait for) as a share of the warp runs' wall time,
and checkpoint_ns (all of it, with the background write-back's wait for the
emulated device). With --map, a PNG of the node states WARP settled on
over a file after a random-write and a sequential-read run (from
`chell warp show --json`, which reads the patterns file, warp.patterns).

    scripts/bench_warp.py [--rounds 3] [--seconds 2] [--preset pcm] [--json out.json] [--map nodes.png]

The full workload suite (every workload, mode and preset, its tables and
figures) is scripts/bench_suite.py; this is the quick check of the targets
"random writes 4 KB - 2 MB: warp >= 1.5x direct", "sequential reads within
5% of direct" and "checkpoint cost < 1% of run time".
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SWEEPS = {
    "randwrite": "4k,16k,64k,256k,1m,2m",
    "seqread": "4k,64k,1m,4m",
}


def run_arm(build, arm, preset, sweep, sizes, seconds, file_size, work, stats_dir):
    d = work / arm
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    argv = [str(build / "bin" / "chell"), "run", "--mode", arm, "--path", str(d),
            "--set", f"tier.model={preset}", "--set", f"stats.file={stats_dir}/st.%p.json", "--",
            str(build / "bin" / "chell_filebench"), sweep, "--dir", str(d / "f"), "--seconds", str(seconds),
            "--iosize", sizes, "--file-size", file_size]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHELL_") and k != "LD_PRELOAD"}
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"bench_warp: {arm} {sweep} failed ({r.returncode}): {r.stderr[-2000:]}")
    out = json.loads(r.stdout)
    ck = held = dec = 0
    for p in Path(stats_dir).glob("st.*.json"):
        s = json.loads(p.read_text())
        ck += s.get("checkpoint_ns", 0)
        held += s.get("checkpoint_lock_ns", 0)
        dec += s.get("decide_ns", 0)
        p.unlink()
    return {s["iosize"]: s["mb_s"] for s in out["sweep"]}, wall, ck, (held, dec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, default=Path(os.environ.get("CHELL_BUILD_DIR", REPO / "build")))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--preset", default="pcm")
    ap.add_argument("--file-size", default="128m")
    ap.add_argument("--sweeps", default="randwrite,seqread")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--map", type=Path, help="also write a PNG of the node states over a file")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="chell-bench-warp-", dir="/dev/shm"))
    stats_dir = work / "stats"
    stats_dir.mkdir()
    res = {}
    try:
        for sweep in (a.sweeps.split(",") if a.rounds > 0 else []):
            vals = {"direct": {}, "warp": {}}
            wall = ck = dec = judge = 0.0
            for rnd in range(a.rounds):
                for arm in (("direct", "warp") if rnd % 2 == 0 else ("warp", "direct")):
                    v, w, c, d = run_arm(a.build, arm, a.preset, sweep, SWEEPS[sweep], a.seconds, a.file_size,
                                         work, stats_dir)
                    for k, x in v.items():
                        vals[arm].setdefault(k, []).append(x)
                    if arm == "warp":
                        wall += w
                        ck += c / 1e9
                        dec += d[0] / 1e9
                        judge += d[1] / 1e9
            rows = []
            print(f"\n{sweep} under tier.model={a.preset}, {a.rounds} rounds of {a.seconds} s per size "
                  f"(MB/s: median [min-max])")
            print(f"{'iosize':>8} {'direct':>24} {'warp':>24} {'warp/direct':>12}")
            for k in sorted(vals["direct"]):
                dm, wm = statistics.median(vals["direct"][k]), statistics.median(vals["warp"][k])
                rows.append({"iosize": k, "direct": vals["direct"][k], "warp": vals["warp"][k],
                             "ratio": wm / dm if dm else None})
                fmt = lambda xs, m: f"{m:8.1f} [{min(xs):.0f}-{max(xs):.0f}]"
                print(f"{k:>8} {fmt(vals['direct'][k], dm):>24} {fmt(vals['warp'][k], wm):>24} {wm / dm:12.2f}")
            print(f"checkpoints (warp runs, {wall:.1f} s wall): holding the buffer's lock {dec:.3f} s "
                  f"({100 * dec / wall:.2f}% of the wall time: what the application can wait for), of which "
                  f"judging the nodes {judge:.4f} s ({100 * judge / wall:.3f}%) and the rest write-back; "
                  f"in all, with the background write-back and its wait for the device, {ck:.2f} s")
            res[sweep] = {"rows": rows, "warp_wall_s": wall, "checkpoint_s": ck, "checkpoint_lock_s": dec,
                          "decide_s": judge}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.map:
        res["node_map"] = node_map(a, work)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


def node_map(a, work):
    """A PNG of WARP's node states over one file: a random-write run and a
    sequential-read run under warp with a patterns file (warp.patterns),
    then `chell warp show --json` of each file, one strip per run."""
    chell, fb = a.build / "bin" / "chell", a.build / "bin" / "chell_filebench"
    pat = work / "patterns"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHELL_") and k != "LD_PRELOAD"}
    strips = []
    for sweep, size in (("randwrite", "4k"), ("seqread", "1m")):
        d = work / f"map-{sweep}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        r = subprocess.run([str(chell), "run", "--mode", "warp", "--path", str(d), "--set",
                            f"tier.model={a.preset}", "--set", f"warp.patterns={pat}", "--",
                            str(fb), sweep, "--dir", str(d), "--seconds", str(a.seconds), "--iosize", size,
                            "--file-size", a.file_size, "--keep", "--verify", "none"], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"bench_warp: map run {sweep} failed: {r.stderr[-2000:]}")
        s = subprocess.run([str(chell), "warp", "show", "--json", "--patterns", str(pat), str(d / "largefile1")],
                           capture_output=True, text=True, env=env)
        if s.returncode != 0:
            sys.exit(f"bench_warp: chell warp show failed: {s.stderr[-2000:]}")
        states = [n["state"] for n in json.loads(s.stdout).get("nodes", [])]
        strips.append((f"{sweep} {size} ({a.preset})", states))
        print(f"node map, {sweep} {size}: " + " ".join(f"{k} {states.count(k)}" for k in
                                                      ("normal", "mapped", "buffered")))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    code = {"normal": 0, "mapped": 1, "buffered": 2}
    fig, axes = plt.subplots(len(strips), 1, figsize=(10, 0.9 * len(strips) + 1), squeeze=False)
    for ax, (title, states) in zip(axes[:, 0], strips):
        ax.imshow([[code.get(x, 0) for x in states] or [0]], aspect="auto", interpolation="nearest",
                  cmap=ListedColormap(["#cccccc", "#2ca02c", "#d62728"]), vmin=0, vmax=2)
        ax.set_yticks([])
        ax.set_title(f"{title}: node states (grey normal, green mapped, red buffered)", fontsize=8)
    axes[-1, 0].set_xlabel(f"node ({a.file_size} file, warp.node_size)")
    fig.tight_layout()
    fig.savefig(a.map, dpi=80)
    print(f"node map: {a.map}")
    return {t: st for t, st in strips}


if __name__ == "__main__":
    sys.exit(main())
