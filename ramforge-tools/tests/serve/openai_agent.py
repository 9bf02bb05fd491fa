"""The real `openai` client as an agent would use it, against `ramforge-tools serve` on a model
whose chat template renders tools (Qwen2.5-Coder-0.5B-Instruct; run by openai_client.rs).

usage: openai_agent.py BASE_URL
Prints one line per check and, last, "all agent checks passed"; any failure raises.
"""
import collections
import json
import sys

import jsonschema
import openai

client = openai.OpenAI(base_url=sys.argv[1], api_key="none", max_retries=0, timeout=600)
model = client.models.list().data[0].id
print("model:", model)


def chat(messages, **kw):
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=model, messages=messages, **kw)


weather_params = {
    "type": "object", "additionalProperties": False, "required": ["city", "unit"],
    "properties": {"city": {"type": "string", "maxLength": 32},
                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}
tools = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": weather_params}}]
ask = [{"role": "system", "content": "You are a helpful assistant."},
       {"role": "user", "content": "What is the weather like in Paris right now?"}]

# A required tool call: its arguments validate against the function's schema.
r = chat(ask, tools=tools, tool_choice="required", max_tokens=96)
assert r.choices[0].finish_reason == "tool_calls", r
call = r.choices[0].message.tool_calls[0]
assert call.type == "function" and call.function.name == "get_weather" and call.id, call
args = json.loads(call.function.arguments)
jsonschema.validate(args, weather_params)
print("required call:", call.function.name, call.function.arguments)

# The same call streamed: the client gathers delta.tool_calls into the same call.
gathered, finish = collections.defaultdict(lambda: {"name": "", "arguments": ""}), None
for chunk in chat(ask, tools=tools, tool_choice="required", max_tokens=96, stream=True):
    for choice in chunk.choices:
        for d in choice.delta.tool_calls or []:
            if d.function:
                gathered[d.index]["name"] += d.function.name or ""
                gathered[d.index]["arguments"] += d.function.arguments or ""
        finish = choice.finish_reason or finish
assert finish == "tool_calls" and len(gathered) == 1, (finish, dict(gathered))
assert gathered[0]["name"] == "get_weather", gathered
assert json.loads(gathered[0]["arguments"]) == args, (gathered, args)
print("streamed call:", gathered[0]["arguments"])

# The tool's result fed back (the template renders the assistant's call and the tool turn):
# the model answers in text, using it (tool_choice "none": no further call).
followup = ask + [r.choices[0].message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.id, "content": json.dumps(
                      {"temperature": 18, "unit": "celsius", "sky": "sunny"})}]
answer = chat(followup, tools=tools, tool_choice="none", max_tokens=48)
text = answer.choices[0].message.content or ""
assert answer.choices[0].finish_reason in ("stop", "length"), answer
assert "18" in text, text
print("answer after the result:", repr(text))

# json_schema under sampling (temperature > 0), validated by the jsonschema package.
person = {"type": "object", "additionalProperties": False, "required": ["name", "age", "languages"],
          "properties": {"name": {"type": "string", "maxLength": 20},
                         "age": {"type": "integer", "minimum": 18, "maximum": 99},
                         "languages": {"type": "array", "maxItems": 3,
                                       "items": {"type": "string", "maxLength": 12}}}}
for seed in (1, 2, 3):
    p = chat([{"role": "user", "content": "Describe a programmer as JSON."}], temperature=0.8,
             seed=seed, max_tokens=96,
             response_format={"type": "json_schema",
                              "json_schema": {"name": "person", "strict": True, "schema": person}})
    v = json.loads(p.choices[0].message.content)
    jsonschema.validate(v, person)
    print(f"json_schema (seed {seed}):", p.choices[0].message.content)

# json_object: any JSON object.
o = chat([{"role": "user", "content": "Give me the capital of France as JSON."}], max_tokens=48,
         response_format={"type": "json_object"})
assert isinstance(json.loads(o.choices[0].message.content), dict), o
print("json_object:", o.choices[0].message.content)

# logprobs: at temperature 0 each chosen token is the top entry of its top_logprobs.
lp = chat([{"role": "user", "content": "Count from one to five."}], max_tokens=12,
          logprobs=True, top_logprobs=3)
entries = lp.choices[0].logprobs.content
assert len(entries) == lp.usage.completion_tokens, (len(entries), lp.usage)
for e in entries:
    assert len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token, e
    assert e.logprob <= 0 and e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob, e
print("logprobs: greedy token on top at each of", len(entries), "steps")

# Penalties: a strong frequency penalty changes a repetitive greedy answer and repeats no
# token more often than the unpenalized one.
rep = [{"role": "user", "content": "Write the word 'data' twenty times, separated by spaces."}]
plain = chat(rep, max_tokens=40, logprobs=True)
penal = chat(rep, max_tokens=40, logprobs=True, frequency_penalty=1.5, presence_penalty=0.5)
most = lambda c: max(collections.Counter(e.token for e in c.choices[0].logprobs.content).values())
assert penal.choices[0].message.content != plain.choices[0].message.content, penal
assert most(penal) < most(plain), (most(penal), most(plain))
print("penalties: most repeated token", most(plain), "->", most(penal))

print("all agent checks passed")
