"""The real `openai` client against `ramforge-tools serve` (run by openai_client.rs).

usage: openai_client.py BASE_URL API_KEY   (BASE_URL ends in /v1)
Prints one line per check and, last, "all openai client checks passed"; any failure raises.
"""
import concurrent.futures
import json
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
fails(openai.BadRequestError, lambda: chat(question, tools=[{"type": "function", "function": {"name": "a b"}}]), "tools[0].function.name")
fails(openai.BadRequestError, lambda: chat(question, extra_body={"mystery": 1}), "mystery")
fails(openai.BadRequestError, lambda: chat([{"role": "user", "content": "word " * 1100}]), "messages")
fails(openai.NotFoundError, lambda: client.chat.completions.create(model="gpt-4o", messages=question))
fails(openai.AuthenticationError, lambda: openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list())
print("errors: 400 (n, presence_penalty, logprobs, tools, unknown field, too long), 404, 401")

# A required tool call, whole and streamed (the client gathers delta.tool_calls), then its
# result fed back as the client's own message objects; and a json_schema answer.
weather = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
                   "properties": {"city": {"type": "string", "maxLength": 24},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}}]
ask = [{"role": "user", "content": "What is the weather in Paris?"}]
r = chat(ask, tools=weather, tool_choice="required", max_tokens=80)
assert r.choices[0].finish_reason == "tool_calls", r
call = r.choices[0].message.tool_calls[0]
args = json.loads(call.function.arguments)
assert call.function.name == "get_weather" and set(args) == {"city", "unit"}, call
assert args["unit"] in ("celsius", "fahrenheit") and len(args["city"]) <= 24, args
gathered, finish = {}, None
for chunk in chat(ask, tools=weather, tool_choice="required", max_tokens=80, stream=True):
    for choice in chunk.choices:
        for d in choice.delta.tool_calls or []:
            g = gathered.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
            g["id"] += d.id or ""
            g["name"] += (d.function.name or "") if d.function else ""
            g["arguments"] += (d.function.arguments or "") if d.function else ""
        finish = choice.finish_reason or finish
assert finish == "tool_calls" and len(gathered) == 1, (finish, gathered)
assert gathered[0]["name"] == "get_weather" and json.loads(gathered[0]["arguments"]) == args, gathered
followup = ask + [r.choices[0].message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, sunny"}]
answer = chat(followup, tools=weather, max_tokens=16)
assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls"), answer
print("tool call:", call.function.name, call.function.arguments, "-> after its result:",
      repr(answer.choices[0].message.content))
person = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}}}
p = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Describe a person as JSON."}],
    temperature=1.0, seed=3, max_tokens=60,
    response_format={"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": person}})
v = json.loads(p.choices[0].message.content)
assert set(v) == {"name", "age"} and 0 <= v["age"] <= 120 and len(v["name"]) <= 12, v
print("json_schema:", p.choices[0].message.content)

# Hanging up mid-stream: the server cancels and answers the next request promptly.
stream = client.completions.create(model=model, prompt="1, 2, 3, 4,", max_tokens=900, temperature=0, stream=True)
next(iter(stream))
stream.close()
started = time.time()
c2 = client.completions.create(model=model, prompt="The capital of France is", max_tokens=12, temperature=0)
assert c2.choices[0].text == c.choices[0].text
print(f"after a hang-up mid-stream the next request took {time.time() - started:.1f} s")

print("all openai client checks passed")
