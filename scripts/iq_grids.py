#!/usr/bin/env python3
"""Writes (or with --check, compares) the IQ codebook grids in specs/grids/ from gguf-py.

Usage: iq_grids.py [--check]

Each grid file holds gguf-py's packed hexadecimal form of one grid (`grid_hex` of
gguf.quants.IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S), 64 characters a line. The spec that
uses a grid names the file with gguf-py's `grid_shape` and `grid_map` (its `shape` and
`levels`), and ramforge-macros unpacks it as gguf-py's `init_grid` does. --check exits 1 when a
file differs from gguf-py's constant (the oracle test runs it).
"""

import sys
from pathlib import Path

import gguf.quants as q

GRIDS = Path(__file__).resolve().parent.parent / "specs" / "grids"
SOURCES = {
    "iq2xxs": q.IQ2_XXS,
    "iq2xs": q.IQ2_XS,
    "iq2s": q.IQ2_S,
    "iq3xxs": q.IQ3_XXS,
    "iq3s": q.IQ3_S,
    "iq1s": q.IQ1_S,
}


def text(cls) -> str:
    h = cls.grid_hex.decode()
    return "".join(h[i:i + 64] + "\n" for i in range(0, len(h), 64))


def main() -> int:
    check = "--check" in sys.argv[1:]
    bad = []
    for name, cls in SOURCES.items():
        path = GRIDS / f"{name}.hex"
        want = text(cls)
        if check:
            if not path.is_file() or path.read_text() != want:
                bad.append(f"{path}: differs from gguf-py's {cls.__name__}.grid_hex")
        else:
            path.write_text(want)
    for b in bad:
        print(b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
