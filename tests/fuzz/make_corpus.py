#!/usr/bin/env python3
"""Regenerate the seed corpus of fuzz_region_open (tests/fuzz/corpus/region_open).

The seeds are committed; this script is how they were made, so they can be
remade when the format changes:

    cmake -S . -B build -G Ninja && ninja -C build
    tests/fuzz/make_corpus.py [--build build]

Valid images of several layouts come from build/bin/chell_pool_image (through
the API: committed and unfinished transactions); their offsets from
`chell pool info --json`. Each is then damaged in the ways a crash, a bad
copy or a hostile file would: truncated at structure boundaries, single
bytes flipped in the superblock fields, a journal header, the master
journal's slots, and an undo entry. Small layouts keep each seed a few KiB
(libFuzzer mutates small inputs much faster).
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OUT = HERE / "corpus" / "region_open"

# name: chell_pool_image arguments
VALID = {
    "min": ["--journals", "1", "--entries", "2", "--size", "64"],
    "small": ["--journals", "2", "--entries", "8", "--size", "512", "--committed", "3"],
    "unfinished": ["--journals", "2", "--entries", "16", "--size", "1024", "--committed", "4",
                   "--unfinished", "2", "--seed", "7"],
    "multi": ["--journals", "4", "--entries", "32", "--size", "4096", "--committed", "12",
              "--unfinished", "1", "--seed", "3"],
}


def flip(data, off, mask=0x01):
    b = bytearray(data)
    if 0 <= off < len(b):
        b[off] ^= mask
    return bytes(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(REPO / "build"))
    args = ap.parse_args()
    bindir = Path(args.build) / "bin"
    tool, chell = bindir / "chell_pool_image", bindir / "chell"
    for p in (tool, chell):
        if not p.exists():
            sys.exit(f"make_corpus: {p} is not built")
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    seeds = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in VALID.items():
            path = Path(tmp) / name
            subprocess.run([str(tool), str(path)] + argv, check=True, capture_output=True)
            info = json.loads(subprocess.run([str(chell), "pool", "info", "--json", str(path)],
                                             check=True, capture_output=True, text=True).stdout)
            seeds[name] = (path.read_bytes(), info)

    def put(name, data):
        (OUT / name).write_bytes(data)

    for name, (img, info) in seeds.items():
        put(f"valid-{name}", img)
    img, info = seeds["small"]
    jo, js, mo, ho = (info["journal_offset"], info["journal_size"], info["master_journal"]["offset"],
                      info["heap_offset"])
    # Truncations: inside the superblock, at each structure boundary, one short.
    for cut in (0, 8, 100, 4095, mo, mo + 32, jo, jo + js, ho, len(img) - 1):
        put(f"trunc-small-{cut}", img[:cut])
    # Superblock fields (offsets from src/pmem/pmem_internal.h): magic,
    # version, flags, uuid, journals, entries, each offset/size, crc,
    # reserved; each flip also breaks the CRC, which is the point: the
    # validator must reject them all without reading through the bad field.
    for off in (0, 8, 12, 16, 32, 36, 40, 48, 56, 64, 72, 80, 88, 96, 200, 4095):
        put(f"sb-flip-{off}", flip(img, off))
    # A journal header (magic, index, uuid, crc) and the master header.
    for rel in (0, 8, 12, 16, 60):
        put(f"jhdr-flip-{rel}", flip(img, jo + rel))
        put(f"master-flip-{rel}", flip(img, mo + rel))
    # The unfinished image: its master slots and undo entries feed recovery.
    img, info = seeds["unfinished"]
    jo, js, mo = info["journal_offset"], info["journal_size"], info["master_journal"]["offset"]
    for rel in (64, 72):                       # slot words of journals 0 and 1
        put(f"unf-slot-flip-{rel}", flip(img, mo + rel, 0x02))
        put(f"unf-slot-active-{rel}", flip(img, mo + rel, 0x01))
    for rel in (64, 68, 69, 72, 80, 128 + 5):  # first entries: crc, type, len, off, data
        put(f"unf-entry-flip-{rel}", flip(img, jo + rel))
    put("unf-trunc-heap", img[:info["heap_offset"] + 16])
    # Not a region at all.
    put("empty", b"")
    put("zeros-8k", bytes(8192))
    put("text", b"CHELLPM1 is the magic, but this is not a region\n" * 100)
    print(f"make_corpus: {len(list(OUT.iterdir()))} files in {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
