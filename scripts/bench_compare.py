#!/usr/bin/env python3
"""Before/after table from several runs of bench_direct.py or bench_cache.py.

    scripts/bench_compare.py --before B1.json B2.json ... --after A1.json A2.json ... [--out FILE.md]

On a shared machine one run of each build says little: run the suite for
the two builds alternately, several times, in one session (for example
`--quick --build build-before --out d-before-1`, then `--build build
--out d-after-1`, and again), then give this script every run's JSON.

For every row of the suite's summaries it takes the main ratio (the one
whose direction is known: Chell against the kernel or the page cache, see
RATIOS), and prints per build the median over the runs and the range
(min-max). A row counts as worse when the after median is on the wrong
side of the before median by more than the noise, taken as the larger of
the two builds' ranges (with one run per build nothing can be told from
noise, and every change is listed as "one run").
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

# section -> (ratio field, True if higher is better, the row's key fields)
RATIOS = {
    "direct": {
        "latency": ("kernel_over_chell", True, ("op", "pattern", "bs")),
        "append": ("chell_over_kernel", False, ("op", "bs")),
        "bandwidth": ("chell_over_kernel", True, ("threads", "pattern", "read_pct")),
        "fio": ("chell_over_kernel", True, ("engine", "rw")),
        "get_read_buf": ("kernel_read_over_chell_grb", True, ("size",)),
        "sqlite": ("chell_over_kernel", True, ("phase",)),
        "bdb": ("chell_over_kernel", True, ("phase",)),
    },
    "cache": {
        "append": ("cache_over_pagecache", False, ("op", "bs")),
        "zipf": ("cache_over_pagecache", True, ("theta", "rw")),
        "bdb": ("cache_over_pagecache", True, ("threads",)),
    },
}
# extra ratios of one section (field, higher better, key fields)
EXTRA = {
    ("direct", "fio"): [("cpu_kernel_over_chell", True, ("engine", "rw"))],
    ("direct", "latency"): [("chell_over_positional", False, ("op", "pattern", "bs"))],
}


def kind_of(res):
    return "cache" if "lat" in res and "zipf" in res else "direct"


def rows_of(res):
    """(row name, higher-is-better, value) for every known ratio of one run."""
    kind = kind_of(res)
    out = []
    if kind == "cache" and isinstance(res.get("lat"), dict):
        for op, r in (res["lat"].get("summary") or {}).items():
            if isinstance(r, dict) and r.get("cache_over_pagecache") is not None:
                out.append((f"lat 4 KB {op} hit: cache/page cache time", False, r["cache_over_pagecache"]))
    for sec, (field, up, keys) in RATIOS[kind].items():
        summ = (res.get(sec) or {}).get("summary") if isinstance(res.get(sec), dict) else None
        if not isinstance(summ, list):
            continue
        for fld, hi, ks in [(field, up, keys)] + EXTRA.get((kind, sec), []):
            for r in summ:
                if r.get(fld) is None:
                    continue
                name = f"{sec} " + " ".join(str(r.get(k)) for k in ks) + f": {fld}"
                out.append((name, hi, r[fld]))
    return kind, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", nargs="+", type=Path, required=True)
    ap.add_argument("--after", nargs="+", type=Path, required=True)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    vals, order, kinds, up = {"before": {}, "after": {}}, [], set(), {}
    for arm, files in (("before", a.before), ("after", a.after)):
        for f in files:
            kind, rows = rows_of(json.loads(f.read_text()))
            kinds.add(kind)
            for name, hi, v in rows:
                if name not in up:
                    order.append(name)
                up[name] = hi
                vals[arm].setdefault(name, []).append(v)
    if len(kinds) != 1:
        sys.exit("bench_compare: give runs of one suite (direct or cache), not both")
    L = [f"Before: {len(a.before)} run(s), after: {len(a.after)} run(s); median [min-max] of each "
         "build's runs; 'worse' = the after median on the wrong side of the before median by more "
         "than the larger range.", "",
         "| row | better | before | after | after/before | verdict |", "|---|---|---|---|---:|---|"]
    worse = []

    def cell(v):
        return f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]" if v else "-"
    for name in order:
        b, f = vals["before"].get(name, []), vals["after"].get(name, [])
        verdict, change = "", None
        if b and f:
            mb, mf = statistics.median(b), statistics.median(f)
            change = mf / mb if mb else None
            noise = max(max(b) - min(b), max(f) - min(f))
            bad = (mb - mf) if up[name] else (mf - mb)
            if len(b) < 2 or len(f) < 2:
                verdict = "one run"
            elif bad > noise:
                verdict = "WORSE"
                worse.append(name)
            elif -bad > noise:
                verdict = "better"
            else:
                verdict = "within noise"
        L.append(f"| {name} | {'higher' if up[name] else 'lower'} | {cell(b)} | {cell(f)} | "
                 f"{'-' if change is None else format(change, '.2f')} | {verdict} |")
    L += ["", f"Rows worse by more than noise: {len(worse)}" + (": " + "; ".join(worse) if worse else ".")]
    text = "\n".join(L) + "\n"
    if a.out:
        a.out.write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
