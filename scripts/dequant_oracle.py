#!/usr/bin/env python3
"""Independent oracle for ramforge-quant's dequantization: compares it with gguf-py.

Usage: dequant_oracle.py BIN [--models DIR] [--max-rows N] [--random-blocks N] [--seed S]

BIN is ramforge-quant's `dequant-stdio` (requests on stdin, f32 on stdout). Checks:
  1. the Rust type table (block size, bytes per block) against gguf.GGML_QUANT_SIZES
     (Q8_1 excepted: ggml's C block is 36 bytes, gguf-py lists 40);
  2. random blocks of every supported format, with edge-case scales (zero, negative,
     subnormal and large f16; no inf/nan), against gguf.quants.dequantize
     (gguf-py has no Q8_1/Q8_K dequantizer: those two use the numpy formula d * qs);
     block layouts (sizes, where the scales are) are read from the spec files in specs/;
  3. the codebook grids the specs name (specs/grids/*.hex) against gguf-py's packed
     constants (scripts/iq_grids.py --check), so the grids are gguf-py's, not a copy of ours;
  4. every tensor of every *.gguf file in DIR (all rows, or with --max-rows N a sample of
     N rows per tensor including the first and last).
Agreement means |ours - ref| <= 1e-6 * |ref| element-wise (and bit-equal zeros).
Exit status 1 on any disagreement, with one line per failure on stderr.
"""

import argparse
import struct
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
import gguf.quants

REL_TOL = 1e-6

SPECS = Path(__file__).resolve().parent.parent / "specs"


def load_specs() -> dict:
    """The block-format specs (specs/*.toml) by type: the one home of block layouts."""
    specs = {}
    for f in sorted(SPECS.glob("*.toml")):
        spec = tomllib.loads(f.read_text())
        specs[T[spec["name"]]] = spec
    return specs


BLOCK_SPECS = load_specs()


def field(qtype, name) -> dict:
    """The spec's field `name` of `qtype` (offset, type, count)."""
    return next(f for f in BLOCK_SPECS[qtype]["field"] if f["name"] == name)


def geometry(qtype) -> tuple[int, int]:
    """(elements, bytes) per block: the spec's, else gguf-py's (for the float types)."""
    spec = BLOCK_SPECS.get(qtype)
    return (spec["block"], spec["bytes"]) if spec else tuple(gguf.GGML_QUANT_SIZES[qtype])


# Byte offsets of the f16 scale fields of each format (where edge values are planted).
F16_FIELDS = {qt: [f["offset"] for f in spec["field"] if f["type"] == "f16" and "count" not in f]
              for qt, spec in BLOCK_SPECS.items()}
EDGE_F16 = np.array([0.0, -0.0, 1.0, -1.0, 6e-8, -6e-8, 3e-5, -3e-5, 6.1e-5, 65504.0, -65504.0,
                     0.0123, -7.5], dtype=np.float16)


class Rust:
    """A running dequant-stdio process."""

    def __init__(self, binary):
        self.proc = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def dequantize(self, qtype, raw: bytes, count: int) -> np.ndarray:
        self.proc.stdin.write(struct.pack("<IQ", int(qtype), count))
        self.proc.stdin.write(raw)
        self.proc.stdin.flush()
        out = self.proc.stdout.read(4 * count)
        if len(out) != 4 * count:
            raise RuntimeError(f"dequant-stdio died on {qtype.name} ({len(out)} of {4 * count} bytes)")
        return np.frombuffer(out, dtype="<f4")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def reference(qtype, raw: np.ndarray, count: int) -> np.ndarray:
    """gguf-py's dequantization (numpy formula for the two types gguf-py lacks)."""
    if qtype in (T.Q8_1, T.Q8_K):
        return scale_times_quants(qtype, raw)
    if qtype == T.F32:
        return raw.view(np.float32).reshape(-1)
    with np.errstate(over="ignore"):  # MXFP4's largest exponents overflow f32, as in ggml
        return np.asarray(gguf.quants.dequantize(raw, qtype), dtype=np.float32).reshape(-1)[:count]


def scale_times_quants(qtype, raw: np.ndarray) -> np.ndarray:
    """`d * qs` per block, with the spec's fields (d: f16 or f32, qs: i8)."""
    b = raw.reshape(-1, geometry(qtype)[1])
    d, qs = field(qtype, "d"), field(qtype, "qs")
    width = {"f16": 2, "f32": 4}[d["type"]]
    dt = {"f16": np.float16, "f32": np.float32}[d["type"]]
    scale = b[:, d["offset"]:d["offset"] + width].copy().view(dt).astype(np.float32)
    quants = b[:, qs["offset"]:qs["offset"] + qs["count"]].view(np.int8).astype(np.float32)
    return (scale * quants).reshape(-1)


def compare(label, ours, ref) -> str | None:
    if ours.shape != ref.shape:
        return f"{label}: {ours.shape[0]} values, reference has {ref.shape[0]}"
    if not np.array_equal(np.isnan(ours), np.isnan(ref)):
        return f"{label}: NaN positions differ"
    with np.errstate(invalid="ignore"):  # inf - inf, where both are the same infinity
        ok = np.isnan(ref) | (ours == ref) | (np.abs(ours.astype(np.float64) - ref) <= REL_TOL * np.abs(ref.astype(np.float64)))
    if ok.all():
        return None
    i = int(np.argmin(ok))
    return f"{label}: {int((~ok).sum())} of {ok.size} values differ, first at {i}: ours {ours[i]!r} ref {ref[i]!r}"


def check_table(binary) -> list[str]:
    out = subprocess.run([binary, "--table"], check=True, capture_output=True, text=True).stdout
    errors, supported = [], []
    for line in out.splitlines():
        tid, name, block, size, sup = line.split()
        tid, block, size = int(tid), int(block), int(size)
        qt = T(tid)
        if qt.name != name:
            errors.append(f"type id {tid}: Rust calls it {name}, gguf-py {qt.name}")
        want = geometry(qt) if qt == T.Q8_1 else tuple(gguf.GGML_QUANT_SIZES[qt])
        if (block, size) != want:
            errors.append(f"{name}: Rust has block {block}/{size} bytes, expected {want}")
        if sup == "true":
            supported.append(qt)
    errors += [f"{qt.name} has a spec but Rust does not support it" for qt in BLOCK_SPECS if qt not in supported]
    return errors, supported


def random_blocks(qtype, n_blocks, rng) -> np.ndarray:
    block, size = geometry(qtype)
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    if qtype in (T.F16, T.BF16, T.F32, T.Q8_K):
        # Plain floats and the f32 scale: random finite values plus edge cases.
        # (Q8_K's f32 scale is its field d, at offset 0.)
        assert qtype != T.Q8_K or field(qtype, "d") == {"name": "d", "type": "f32", "offset": 0}
        width = {T.F16: 2, T.BF16: 2, T.F32: 4, T.Q8_K: 4}[qtype]
        dt = {T.F16: np.float16, T.BF16: np.float32, T.F32: np.float32, T.Q8_K: np.float32}[qtype]
        if qtype == T.BF16:
            vals = (rng.standard_normal(n_blocks) * 10.0 ** rng.integers(-40, 30, n_blocks)).astype(np.float32)
            vals[: len(EDGE_F16)] = EDGE_F16.astype(np.float32)
            raw[:, :2] = (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(-1, 2)
        else:
            vals = (rng.standard_normal(n_blocks) * 10.0 ** rng.integers(-6, 4, n_blocks)).astype(dt)
            vals[: len(EDGE_F16)] = EDGE_F16.astype(dt)
            raw[:, :width] = vals.view(np.uint8).reshape(-1, width)
        return raw.reshape(-1)
    for off in F16_FIELDS[qtype]:
        vals = (rng.standard_normal(n_blocks) * 10.0 ** rng.integers(-7, 3, n_blocks)).astype(np.float16)
        pick = rng.integers(0, 3, n_blocks) == 0
        vals[pick] = rng.choice(EDGE_F16, int(pick.sum()))
        vals[~np.isfinite(vals)] = np.float16(1.0)
        raw[:, off:off + 2] = vals.view(np.uint8).reshape(-1, 2)
    return raw.reshape(-1)


def check_grids() -> list[str]:
    """Every grid file a spec names is gguf-py's grid (same packing, shape and levels)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import iq_grids
    errors, by_file = [], {}
    for qt, spec in BLOCK_SPECS.items():
        for name, grid in spec.get("grids", {}).items():
            stem = Path(grid["file"]).stem
            cls = iq_grids.SOURCES.get(stem)
            if cls is None:
                errors.append(f"{qt.name}: grid {name} ({grid['file']}) is not one of gguf-py's")
                continue
            if (tuple(grid["shape"]), tuple(grid["levels"])) != (cls.grid_shape, cls.grid_map):
                errors.append(f"{qt.name}: grid {name} has shape/levels {grid['shape']}/{grid['levels']}, "
                              f"gguf-py {cls.grid_shape}/{cls.grid_map}")
            by_file[SPECS / grid["file"]] = cls
    for path, cls in by_file.items():
        if not path.is_file() or path.read_text() != iq_grids.text(cls):
            errors.append(f"{path}: differs from gguf-py's {cls.__name__}.grid_hex")
    return errors


def check_random(rust, types, n_blocks, rng) -> list[str]:
    errors = []
    for qt in types:
        block, _ = geometry(qt)
        raw = random_blocks(qt, n_blocks, rng)
        count = n_blocks * block
        err = compare(f"random {qt.name}", rust.dequantize(qt, raw.tobytes(), count), reference(qt, raw, count))
        if err:
            errors.append(err)
    return errors


class TensorReader(gguf.GGUFReader):
    """gguf-py's reader, minus the metadata arrays' elements, which this oracle never reads.

    GGUFReader makes one numpy view per array element: the tokenizer tables of one small model
    took it ~7 s of the oracle's ~8 s per file. Here an array is stepped over by its length
    alone (its type and length kept); the header, every other key and the tensor table are
    gguf-py's own parsing."""

    def _get_field_parts(self, orig_offs, raw_type):
        if gguf.GGUFValueType(raw_type) != gguf.GGUFValueType.ARRAY:
            return super()._get_field_parts(orig_offs, raw_type)
        raw_itype = self._get(orig_offs, np.uint32)
        alen = self._get(orig_offs + 4, np.uint64)
        itype = gguf.GGUFValueType(raw_itype[0])
        offs = orig_offs + 12
        if itype == gguf.GGUFValueType.STRING:
            data, order = self.data, "big" if self.byte_order == "S" else "little"  # "S": swapped
            for _ in range(int(alen[0])):
                offs += 8 + int.from_bytes(data[offs:offs + 8].tobytes(), order)
        elif itype == gguf.GGUFValueType.ARRAY:
            return super()._get_field_parts(orig_offs, raw_type)  # nested: rare, keep gguf-py's walk
        else:
            offs += int(alen[0]) * np.dtype(self.gguf_scalar_to_np[itype]).itemsize
        return offs - orig_offs, [raw_itype, alen], [], [gguf.GGUFValueType.ARRAY, itype]


def check_model(rust, path: Path, max_rows: int, rng) -> tuple[list[str], int]:
    errors, checked = [], 0
    reader = TensorReader(path)
    for t in reader.tensors:
        qt = T(t.tensor_type)
        ne0 = int(t.shape[0])
        n_rows = int(t.n_elements) // ne0
        rows = np.ascontiguousarray(t.data).view(np.uint8).reshape(n_rows, -1)
        if 0 < max_rows < n_rows:
            # First and last rows plus a random sample in between.
            pick = np.unique(np.concatenate([[0, n_rows - 1], rng.integers(0, n_rows, max_rows - 2)]))
            rows = rows[pick]
        count = rows.shape[0] * ne0
        raw = np.ascontiguousarray(rows).reshape(-1)
        err = compare(f"{path.name}: {t.name} ({qt.name})", rust.dequantize(qt, raw.tobytes(), count),
                      reference(qt, raw, count))
        if err:
            errors.append(err)
        checked += 1
    return errors, checked


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--models", type=Path)
    ap.add_argument("--random-blocks", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-rows", type=int, default=0,
                    help="check at most this many rows of each tensor (first, last, random); 0 = all")
    args = ap.parse_args()

    errors, supported = check_table(args.binary)
    errors += check_grids()
    rust = Rust(args.binary)
    rng = np.random.default_rng(args.seed)
    errors += check_random(rust, supported, args.random_blocks, rng)
    print(f"random blocks: {len(supported)} types x {args.random_blocks} blocks checked")
    if args.models:
        files = sorted(args.models.glob("*.gguf"))
        if not files:
            errors.append(f"no *.gguf files in {args.models} (run scripts/test.sh to fetch them)")
        for f in files:
            start = time.time()
            errs, n = check_model(rust, f, args.max_rows, rng)
            errors += errs
            print(f"{f.name}: {n} tensors, {len(errs)} mismatching ({time.time() - start:.1f}s)")
    rust.close()
    for e in errors:
        print(e, file=sys.stderr)
    print("oracle:", "FAIL" if errors else "ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
