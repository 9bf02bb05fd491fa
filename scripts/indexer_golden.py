#!/usr/bin/env python3
"""A llama.cpp golden of a glm-dsa or deepseek4 file, and how far apart its lightning-indexer
scores are where the top-k cuts.

Records what ../shared/reference/golden.py's `gen` records (the prompt evaluated in one batch,
then N tokens decoded greedily one at a time; per step the top-5 (id, logit) pairs) into OUT,
with an eval callback that reads every layer's `indexer_score-<layer>` (glm-dsa) or
`lid_score_masked-<layer>` (deepseek4: scores of the compressed rows) (each query row's
scores of every cached position, the causal mask added). For every row whose query sees more
than TOP_K positions it takes the gap between the TOP_K-th and the next score, relative to the
row's largest |score|. A golden over the sparse path is only as stable as the smallest gap:
where that is near the two implementations' rounding, the choice of positions can flip and the
logits jump. --kv sets llama.cpp's cache type (its indexer key cache too); with f32 and an F32
file llama.cpp's products are f32 throughout, so `verify --kv-type f32` differs from it by
summation order alone (~1e-6), far below any gap this asserts.

usage: indexer_golden.py MODEL PROMPTS.txt N TOP_K OUT.jsonl [--kv f16|f32]
prints one JSON object: {"selections": rows that cut, "min_margin": the smallest relative gap
  (null when no row cut),
  "at": {"prompt", "layer", "row", "positions"} of it, "rows_seen": rows read}
"""
import argparse, ctypes, hashlib, json, math, sys

import llama_cpp.llama_cpp as C
import numpy as np
from llama_cpp import Llama


class Tensor(ctypes.Structure):
    # The head of ggml.h's struct ggml_tensor, up to its name.
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4),
                ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16), ("flags", ctypes.c_int32),
                ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p), ("view_offs", ctypes.c_size_t),
                ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64)]


GGML_TYPE_F32 = 0
# The indexer's scores: glm-dsa's, deepseek4's.
SCORE_NAMES = ("indexer_score-", "lid_score_masked-")
# Per layer, the rows of the last score tensor (SCORE_NAMES) of the graph being computed:
# the fused op's output, or in the unfused graph the last of the tensors of that name (the
# scores with the mask added; the earlier ones are partial products).
latest = {}
rows = []  # (layer, scores of the row's visible positions), per evaluation in layer order


@C.ggml_backend_sched_eval_callback
def observe(t, ask, _user):
    x = ctypes.cast(t, ctypes.POINTER(Tensor)).contents
    name = x.name.decode(errors="replace")
    prefix = next((p for p in SCORE_NAMES if name.startswith(p)), None)
    if prefix is None or not name[len(prefix):].isdigit():
        return not ask
    if ask:
        return True
    ne, nb = list(x.ne), list(x.nb)
    if x.type != GGML_TYPE_F32 or nb[0] != 4 or nb[1] != 4 * ne[0] or ne[2] * ne[3] != 1:
        return True
    data = np.ctypeslib.as_array(ctypes.cast(x.data, ctypes.POINTER(ctypes.c_float)), shape=(ne[0] * ne[1],))
    latest[int(name[len(prefix):])] = [row[np.isfinite(row)].copy() for row in data.reshape(-1, ne[0])]
    return True


def collect() -> None:
    """Moves the last evaluation's rows from `latest` to `rows`."""
    for layer in sorted(latest):
        rows.extend((layer, r) for r in latest[layer])
    latest.clear()


def unescape(line: str) -> str:
    out, i = [], 0
    while i < len(line):
        c = line[i]
        if c == "\\" and i + 1 < len(line):
            out.append({"n": "\n", "t": "\t", "\\": "\\"}.get(line[i + 1], "\\" + line[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompts")
    ap.add_argument("n_gen", type=int)
    ap.add_argument("top_k", type=int)
    ap.add_argument("out")
    ap.add_argument("--kv", choices=["f16", "f32"], default="f16")
    a = ap.parse_args()
    model, n_gen, top_k = a.model, a.n_gen, a.top_k
    default_params = C.llama_context_default_params

    def with_callback():
        p = default_params()
        p.cb_eval = observe
        p.type_k = p.type_v = {"f16": 1, "f32": 0}[a.kv]
        return p

    C.llama_context_default_params = with_callback
    items = [unescape(l.rstrip("\n")) for l in open(a.prompts, encoding="utf-8") if l.rstrip("\n")]
    digest = sha256(model)
    out = open(a.out, "w", encoding="utf-8")
    llm = Llama(model_path=model, n_ctx=1024, n_batch=512, n_threads=2, logits_all=True, verbose=False)
    best = {"selections": 0, "min_margin": math.inf, "at": None, "rows_seen": 0}
    for pi, text in enumerate(items):
        llm.reset()
        rows.clear()
        toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        llm.eval(toks)
        collect()
        generated, steps = [], []
        for _ in range(n_gen):
            logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            top = np.argsort(-logits, kind="stable")[:5]
            steps.append([[int(t), round(float(logits[t]), 5)] for t in top])
            generated.append(int(top[0]))
            llm.eval([int(top[0])])
            collect()
        print(json.dumps({"model_sha256": digest, "text": text, "tokens": toks,
                          "generated": generated, "top": steps,
                          "reference": f"llama.cpp, {a.kv} KV cache (scripts/indexer_golden.py)"},
                         ensure_ascii=False), file=out)
        best["rows_seen"] += len(rows)
        for ri, (layer, s) in enumerate(rows):
            if len(s) <= top_k:
                continue
            best["selections"] += 1
            desc = np.sort(s)[::-1]
            margin = float((desc[top_k - 1] - desc[top_k]) / max(np.abs(desc).max(), 1e-30))
            if margin < best["min_margin"]:
                best["min_margin"] = margin
                best["at"] = {"prompt": pi, "layer": layer, "row": ri, "positions": len(s)}
    if best["rows_seen"] == 0:
        sys.exit("no indexer score tensor seen: not a glm-dsa or deepseek4 file, or llama.cpp renamed it")
    if best["selections"] == 0:
        best["min_margin"] = None  # no row cut: every query saw at most TOP_K positions
    print(json.dumps(best))


if __name__ == "__main__":
    main()
