#!/usr/bin/env python3
"""Record llama.cpp goldens for a BF16 model from its exact F32 expansion.

Why: ggml rounds the activations to bf16 before every product with a BF16 matrix (its
`vec_dot_type`), so llama.cpp's logits on a BF16 file carry bf16 rounding noise (on SmolLM2: mean
0.040 / max 0.17 against the same weights in F32), and that noise cascades chaotically, so no
implementation that is not bit-identical to ggml can reproduce it. Widening bf16 to f32 is exact,
so llama.cpp run on the F32 expansion computes the same model without that noise: an independent
reference that a float implementation can be held to at the float tolerance.

usage: golden_f32ref.py BF16.gguf PROMPTS.txt N OUT.jsonl [--kv f16|f32]
Writes the gen-*.jsonl record format of ../shared/golden/README.md (prompt `tokens`, greedy
`generated`, per-step top-5 `top`), with `model_sha256` of BF16.gguf (the file `verify` is run
on) and a `reference` field saying how the logits were made. --kv sets llama.cpp's KV cache type
(default f16, as in the shared goldens). Needs the reference venv (llama_cpp 0.3.36, gguf-py).
"""
import argparse, ctypes, hashlib, json, os, tempfile

import numpy as np
import gguf
import llama_cpp
from gguf.quants import dequantize
from llama_cpp import Llama

GGML_TYPE = {"f32": 0, "f16": 1}
TOP_K = 5


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def unescape(line: str) -> str:
    """The prompt-file escapes: \\n, \\t and \\\\."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line):
            out.append({"n": "\n", "t": "\t", "\\": "\\"}.get(line[i + 1], line[i:i + 2]))
            i += 2
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def widen_to_f32(src: str, dst: str) -> None:
    """llama.cpp's own converter, all tensors to F32; then check every value is unchanged."""
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 2
    if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"converting {src} to F32 failed")
    a, b = gguf.GGUFReader(src), gguf.GGUFReader(dst)
    wide = {t.name: t for t in b.tensors}
    for t in a.tensors:
        w = wide[t.name]
        if w.tensor_type != gguf.GGMLQuantizationType.F32:
            raise SystemExit(f"{t.name}: not F32 in the widened file")
        if not np.array_equal(dequantize(t.data, t.tensor_type).reshape(-1),
                              np.asarray(w.data, dtype=np.float32).reshape(-1)):
            raise SystemExit(f"{t.name}: widened values differ from the BF16 values")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompts")
    ap.add_argument("steps", type=int)
    ap.add_argument("out")
    ap.add_argument("--kv", choices=sorted(GGML_TYPE), default="f16")
    args = ap.parse_args()
    prompts = [unescape(l.rstrip("\n")) for l in open(args.prompts, encoding="utf-8") if l.strip()]
    digest = sha256(args.model)
    kv = GGML_TYPE[args.kv]
    note = (f"llama.cpp (llama-cpp-python {llama_cpp.__version__}) on the exact F32 expansion of this "
            f"file, {args.kv} KV cache, 2 threads, n_ctx 1024; scripts/golden_f32ref.py")
    with tempfile.TemporaryDirectory() as tmp:
        wide = os.path.join(tmp, "f32.gguf")
        widen_to_f32(args.model, wide)
        llm = Llama(model_path=wide, n_ctx=1024, n_batch=512, n_threads=2, logits_all=True,
                    verbose=False, type_k=kv, type_v=kv)
        with open(args.out, "w", encoding="utf-8") as out:
            for text in prompts:
                llm.reset()
                tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
                llm.eval(tokens)
                generated, top = [], []
                for _ in range(args.steps):
                    logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
                    best = np.argsort(-logits, kind="stable")[:TOP_K]
                    top.append([[int(t), round(float(logits[t]), 5)] for t in best])
                    generated.append(int(best[0]))
                    llm.eval([int(best[0])])
                rec = {"model_sha256": digest, "reference": note, "text": text, "tokens": tokens,
                       "generated": generated, "top": top}
                out.write(json.dumps(rec, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
