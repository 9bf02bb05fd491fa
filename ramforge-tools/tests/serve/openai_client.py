"""The real `openai` client against `ramforge-tools serve` (run by openai_client.rs).

usage: openai_client.py BASE_URL API_KEY   (BASE_URL ends in /v1)
Prints one line per check and, last, "all openai client checks passed"; any failure raises.
"""
import concurrent.futures
import sys
import time

import openai

base_url, key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=300)

models = client.models.list().data
assert len(models) == 1, models
model = models[0].id
print("models:", model)


def chat(messages, **kw):
    return client.chat.completions.create(
        model=model, messages=messages, temperature=0, **kw)


def streamed_chat(messages, **kw):
    parts, finish = [], None
    for chunk in chat(messages, stream=True, **kw):
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    return "".join(parts), finish


question = [{"role": "user", "content": "Give me one tip for writing clear code."}]
plain = chat(question, max_tokens=32)
text = plain.choices[0].message.content
assert text, plain
assert plain.choices[0].finish_reason in ("stop", "length"), plain
assert plain.usage.completion_tokens <= 32, plain.usage
assert streamed_chat(question, max_tokens=32) == (text, plain.choices[0].finish_reason)
print("chat plain == streamed:", repr(text[:40]))

# Usage on a stream, via stream_options.
usage = None
for chunk in chat(question, max_tokens=8, stream=True, stream_options={"include_usage": True}):
    usage = chunk.usage or usage
assert usage is not None and usage.completion_tokens <= 8, usage
print("stream usage:", usage.prompt_tokens, usage.completion_tokens)

# 8 concurrent requests, each identical to the same request made alone.
prompts = [f"Write one sentence about the number {i}." for i in range(8)]
one = lambda p: chat([{"role": "user", "content": p}], max_tokens=16).choices[0].message.content
sequential = [one(p) for p in prompts]
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    concurrent_ = list(pool.map(one, prompts))
assert concurrent_ == sequential, (concurrent_, sequential)
print("8 concurrent == sequential")

# A conversation: each later turn reuses the cached prefix.
conversation = [{"role": "user", "content": "Name a fruit."}]
previous_prompt = 0
for turn in range(3):
    r = chat(conversation, max_tokens=12)
    cached = r.usage.prompt_tokens_details.cached_tokens
    if turn > 0:
        assert cached >= previous_prompt, (turn, cached, previous_prompt)
    previous_prompt = r.usage.prompt_tokens
    conversation += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": "And another?"}]
    print(f"turn {turn}: prompt {r.usage.prompt_tokens}, cached {cached}")

# Completions, plain and streamed.
c = client.completions.create(model=model, prompt="The capital of France is", max_tokens=12, temperature=0)
parts = [ch.choices[0].text for ch in client.completions.create(
    model=model, prompt="The capital of France is", max_tokens=12, temperature=0, stream=True) if ch.choices]
assert c.choices[0].text and "".join(parts) == c.choices[0].text, (c, parts)
print("completion:", repr(c.choices[0].text))


def fails(error, call, param=None):
    try:
        call()
    except error as e:
        if param is not None:
            assert e.body.get("param") == param, e.body
        return e
    raise AssertionError(f"expected {error.__name__}")


fails(openai.BadRequestError, lambda: chat(question, n=2), "n")
fails(openai.BadRequestError, lambda: chat(question, presence_penalty=3.0), "presence_penalty")
fails(openai.BadRequestError, lambda: chat(question, logprobs=True, top_logprobs=21), "top_logprobs")
fails(openai.BadRequestError, lambda: chat(question, tools=[{"type": "function", "function": {"name": "f"}}]), "tools")
fails(openai.BadRequestError, lambda: chat(question, extra_body={"mystery": 1}), "mystery")
fails(openai.BadRequestError, lambda: chat([{"role": "user", "content": "word " * 1100}]), "messages")
fails(openai.NotFoundError, lambda: client.chat.completions.create(model="gpt-4o", messages=question))
fails(openai.AuthenticationError, lambda: openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list())
print("errors: 400 (n, presence_penalty, logprobs, tools, unknown field, too long), 404, 401")

# Hanging up mid-stream: the server cancels and answers the next request promptly.
stream = client.completions.create(model=model, prompt="1, 2, 3, 4,", max_tokens=900, temperature=0, stream=True)
next(iter(stream))
stream.close()
started = time.time()
c2 = client.completions.create(model=model, prompt="The capital of France is", max_tokens=12, temperature=0)
assert c2.choices[0].text == c.choices[0].text
print(f"after a hang-up mid-stream the next request took {time.time() - started:.1f} s")

print("all openai client checks passed")
