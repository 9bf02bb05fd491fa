#!/usr/bin/env python3
"""Independent check of `ramforge-tools inspect --json` against the gguf Python package.

    inspect_oracle.py [--tool PATH] MODEL.gguf [MODEL.gguf ...]

For every file: version, alignment, data offset, the metadata keys in file order with their
values (arrays: full when short, else length and first items as `inspect` summarizes them),
and the tensor table (name, type, shape, offset, bytes) in file order must equal what gguf-py
reads. gguf-py's GGUF.* pseudo-fields (version and counts) are compared against the header
fields, not listed as keys. Exit status 1 on any difference, 2 on usage errors.

Run with the reference venv's python (it has gguf), e.g. $RAMFORGE_REFERENCE_PY.
The tool defaults to $RAMFORGE_TOOLS, else target/release/ramforge-tools.
"""

import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
from pathlib import Path

try:
    import gguf
except ImportError:
    sys.exit("inspect_oracle.py: the gguf package is missing; run it with $RAMFORGE_REFERENCE_PY "
             "(scripts/test.sh sets it up)")

ROOT = Path(__file__).resolve().parent.parent


def field_value(field):
    """A gguf-py field as plain Python: str, int, float, bool or list (nested lists allowed)."""
    return field.contents()


def same(ours, theirs, where, problems):
    """Strict comparison: a bool is not an int, a float equals only itself."""
    if isinstance(theirs, bool) or isinstance(ours, bool):
        ok = type(ours) is type(theirs) and ours == theirs
    elif isinstance(theirs, float):
        ok = isinstance(ours, (int, float)) and (
            ours == theirs or (math.isnan(theirs) and ours is None))
    elif isinstance(theirs, int):
        ok = isinstance(ours, int) and not isinstance(ours, bool) and ours == theirs
    elif isinstance(theirs, str):
        ok = ours == theirs
    elif isinstance(theirs, list):
        if isinstance(ours, dict):  # summarized long array
            ok = ours.get("len") == len(theirs)
            first = ours.get("first", [])
            ok = ok and len(first) <= len(theirs) and (len(first) > 0 or not theirs)
            if ok:
                for i, item in enumerate(first):
                    same(item, theirs[i], f"{where}[{i}]", problems)
        else:
            ok = isinstance(ours, list) and len(ours) == len(theirs)
            if ok:
                for i, (a, b) in enumerate(zip(ours, theirs)):
                    same(a, b, f"{where}[{i}]", problems)
    else:
        ok = False
    if not ok:
        problems.append(f"{where}: ours {short(ours)} != gguf-py {short(theirs)}")


def short(v):
    s = repr(v)
    return s if len(s) <= 120 else s[:117] + "..."


def check(tool, model):
    problems = []
    run = subprocess.run([tool, "inspect", "--json", str(model)], capture_output=True, text=True)
    if run.returncode != 0:
        return [f"inspect failed ({run.returncode}): {run.stderr.strip()}"]
    ours = json.loads(run.stdout)
    reader = gguf.GGUFReader(str(model))

    header = {k: f for k, f in reader.fields.items() if k.startswith("GGUF.")}
    same(ours["version"], field_value(header["GGUF.version"]), "version", problems)
    same(ours["tensor_count"], field_value(header["GGUF.tensor_count"]), "tensor_count", problems)
    same(ours["metadata_count"], field_value(header["GGUF.kv_count"]), "metadata_count", problems)
    same(ours["alignment"], reader.alignment, "alignment", problems)
    same(ours["data_offset"], reader.data_offset, "data_offset", problems)

    their_keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    our_keys = list(ours["metadata"].keys())
    if our_keys != their_keys:
        problems.append(f"metadata keys differ: ours {short(our_keys)} gguf-py {short(their_keys)}")
    for key in their_keys:
        if key in ours["metadata"]:
            same(ours["metadata"][key], field_value(reader.fields[key]), f"metadata[{key!r}]", problems)

    their_tensors = [
        {
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(d) for d in t.shape],
            "file_offset": int(t.data_offset),
            "bytes": int(t.n_bytes),
        }
        for t in reader.tensors
    ]
    our_tensors = [
        {k: t[k] for k in ("name", "type", "shape", "file_offset", "bytes")} for t in ours["tensors"]
    ]
    if len(our_tensors) != len(their_tensors):
        problems.append(f"{len(our_tensors)} tensors, gguf-py has {len(their_tensors)}")
    for i, (a, b) in enumerate(zip(our_tensors, their_tensors)):
        if a != b:
            problems.append(f"tensor {i}: ours {a} gguf-py {b}")
        if ours["tensors"][i]["offset"] + ours["data_offset"] != a["file_offset"]:
            problems.append(f"tensor {i}: offset and file_offset disagree")
    if sum(t["bytes"] for t in our_tensors) != ours["totals"]["weight_bytes"]:
        problems.append("totals.weight_bytes is not the sum of the tensor bytes")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tool", default=os.environ.get("RAMFORGE_TOOLS",
                                                     str(ROOT / "target/release/ramforge-tools")))
    ap.add_argument("-j", "--jobs", type=int, default=min(4, os.cpu_count() or 1),
                    help="files checked in parallel (gguf-py is slow on big vocabularies)")
    ap.add_argument("models", nargs="+", type=Path)
    args = ap.parse_args()
    if not Path(args.tool).is_file():
        print(f"inspect_oracle.py: no ramforge-tools at {args.tool} (build it or pass --tool)",
              file=sys.stderr)
        return 2
    failed = 0
    missing = [m for m in args.models if not m.is_file()]
    for model in missing:
        print(f"FAIL {model}: missing (run scripts/test.sh to fetch the models)")
        failed += 1
    present = [m for m in args.models if m.is_file()]
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = pool.map(check, [args.tool] * len(present), present)
    for model, problems in zip(present, results):
        if problems:
            failed += 1
            print(f"FAIL {model.name}: {len(problems)} differences")
            for p in problems[:20]:
                print(f"  {p}")
        else:
            print(f"ok   {model.name}", flush=True)
    print(f"{len(args.models) - failed}/{len(args.models)} files agree with gguf-py")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
