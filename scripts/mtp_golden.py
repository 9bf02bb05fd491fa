#!/usr/bin/env python3
"""llama.cpp's MTP (nextn) head, teacher-forced: the judge of `--mtp` drafts.

For each prompt (one per line of PROMPTS.txt, tokenized by llama.cpp with its BOS rule) the
target context evaluates the prompt in one batch with llama.cpp's nextn output on, giving each
position's hidden state h_p; an MTP context (LLAMA_CONTEXT_TYPE_MTP on the same model) then
evaluates, as llama.cpp's own MTP drafter ingests a batch, row p = (token x_p, h_{p-1}) at
position p (h_{-1} = zeros), each row predicting x_{p+1}. Per row it records the MTP head's
top TOP logits and its own nextn output (the hidden state a chained draft step takes as its h).

usage: mtp_golden.py MODEL PROMPTS.txt OUT.json (one prompt per line; the escapes \\n, \\t and
\\\\ are decoded, as ../shared/reference/golden.py decodes them)
OUT: [{"prompt", "tokens", "n_embd", "n_vocab",
       "top": per row the TOP largest (id, logit) pairs, largest first,
       "hidden": per row the MTP's nextn output, "target_hidden": per row the target's}]
"""
import ctypes, json, sys

import llama_cpp.llama_cpp as C
import llama_cpp.llama_cpp_ext as X
import numpy as np

TOP = 16


def unescape(line):
    out, chars = [], iter(line)
    for c in chars:
        if c == "\\":
            n = next(chars, "")
            out.append({"n": "\n", "t": "\t", "\\": "\\"}.get(n, "\\" + n))
        else:
            out.append(c)
    return "".join(out)


def main():
    model_path, prompts_path, out_path = sys.argv[1:4]
    lines = open(prompts_path, encoding="utf-8").read().split("\n")
    prompts = [unescape(l) for l in lines if l]
    C.llama_backend_init()
    mp = C.llama_model_default_params()
    mp.load_mtp = True
    model = C.llama_model_load_from_file(model_path.encode(), mp)
    if not model:
        sys.exit(f"llama.cpp could not load {model_path}")
    if C.llama_model_n_layer_nextn(model) < 1:
        sys.exit(f"{model_path} has no MTP (nextn) layer")
    vocab = C.llama_model_get_vocab(model)
    n_vocab = C.llama_vocab_n_tokens(vocab)
    n_embd = C.llama_model_n_embd_out(model)
    records = []
    for prompt in prompts:
        text = prompt.encode()
        buf = (C.llama_token * (len(text) + 8))()
        n = C.llama_tokenize(vocab, text, len(text), buf, len(buf), True, False)
        if n < 1:
            sys.exit(f"prompt {prompt!r} tokenizes to {n} tokens")
        tokens = list(buf[:n])

        def context(kind):
            cp = C.llama_context_default_params()
            cp.n_ctx = 512
            cp.n_batch = 512
            cp.n_ubatch = 512
            cp.n_threads = 2
            cp.n_threads_batch = 2
            cp.ctx_type = kind
            ctx = C.llama_init_from_model(model, cp)
            if not ctx:
                sys.exit("llama.cpp could not make a context")
            return ctx

        target = context(C.LLAMA_CONTEXT_TYPE_DEFAULT)
        X.llama_set_embeddings_nextn(target, True, False)
        batch = C.llama_batch_init(n, 0, 1)
        for i, t in enumerate(tokens):
            batch.token[i] = t
            batch.pos[i] = i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1
        batch.n_tokens = n
        if C.llama_decode(target, batch) != 0:
            sys.exit("target decode failed")
        h = np.ctypeslib.as_array(X.llama_get_embeddings_nextn(target), shape=(n * n_embd,))
        h = h.reshape(n, n_embd).copy()
        C.llama_batch_free(batch)

        mtp = context(C.LLAMA_CONTEXT_TYPE_MTP)
        X.llama_set_embeddings_nextn(mtp, True, True)
        batch = C.llama_batch_init(n, n_embd, 1)
        token_ids = (C.llama_token * n)()
        batch.token = token_ids
        embd = np.ctypeslib.as_array(batch.embd, shape=(n * n_embd,))
        for i, t in enumerate(tokens):
            token_ids[i] = t
            batch.pos[i] = i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1
            embd[i * n_embd:(i + 1) * n_embd] = h[i - 1] if i > 0 else 0.0
        batch.n_tokens = n
        if C.llama_decode(mtp, batch) != 0:
            sys.exit("MTP decode failed")
        top, hidden = [], []
        for i in range(n):
            row = np.ctypeslib.as_array(C.llama_get_logits_ith(mtp, i), shape=(n_vocab,))
            ids = np.argsort(-row, kind="stable")[:TOP]
            top.append([[int(t), float(row[t])] for t in ids])
            hr = np.ctypeslib.as_array(X.llama_get_embeddings_nextn_ith(mtp, i), shape=(n_embd,))
            hidden.append([float(v) for v in hr])
        batch.token = ctypes.POINTER(C.llama_token)()
        C.llama_batch_free(batch)
        C.llama_free(mtp)
        C.llama_free(target)
        records.append({"prompt": prompt, "tokens": tokens, "n_embd": n_embd,
                        "n_vocab": n_vocab, "top": top, "hidden": hidden,
                        "target_hidden": h.tolist()})
    with open(out_path, "w") as f:
        json.dump(records, f)
    C.llama_model_free(model)


if __name__ == "__main__":
    main()
