//! `ramforge-tools chat`: an interactive conversation with a model, through its own chat template.
//!
//! Each turn renders the whole conversation with the template (as Hugging Face's
//! `apply_chat_template` would) and generates the reply, streamed to stdout. Lines read from
//! stdin are user messages; `/reset` forgets the conversation, `/quit` or Ctrl-D (end of input)
//! ends it. Ctrl-C while a reply is being generated stops that reply, prints its stats and
//! returns to the prompt; Ctrl-C at the prompt quits.

use crate::args::{ModelChoice, RamBudget, Speculation, TemplateFile, Workers};
use crate::cancel::cancel_flag;
use crate::error::{CmdError, CmdResult};
use crate::expert_history::ExpertHistoryFlag;
use crate::generate::{generate_to_stdout, load_speculative};
use crate::verbosity::{quiet, verbose};
use ramforge_engine::budget::human_bytes;
use ramforge_engine::text::prompt::message;
use ramforge_engine::text::{ChatMessage, ChatPrompt};
use ramforge_engine::{
    process_memory, Engine, EngineOptions, GenerationStats, Model, SamplingParams, StopReason,
};
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::Ordering;

/// Interactive chat with a model (its own chat template; /reset, Ctrl-D to quit).
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelChoice,
    /// A system message that starts every conversation.
    #[arg(long)]
    pub system: Option<String>,
    #[command(flatten)]
    pub template: TemplateFile,
    /// Most tokens per reply.
    #[arg(short = 'n', long, default_value_t = 512)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub budget: RamBudget,
    /// Context positions for the whole conversation (default: min(trained, 2048)).
    #[arg(long)]
    pub ctx: Option<usize>,
    #[command(flatten)]
    pub workers: Workers,
    #[command(flatten)]
    pub speculation: Speculation,
    /// Sampling temperature; 0 = greedy.
    #[arg(long, default_value_t = 0.7)]
    pub temperature: f32,
    /// RNG seed (same seed, same conversation).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub history: ExpertHistoryFlag,
}

/// The conversation and what is needed to turn it into tokens.
struct Conversation {
    prompt: ChatPrompt,
    system: Option<String>,
    messages: Vec<ChatMessage>,
}

impl Conversation {
    fn reset(&mut self) {
        self.messages.clear();
        if let Some(s) = &self.system {
            self.messages.push(message("system", s));
        }
    }

    /// The conversation so far, rendered and tokenized, ending with the assistant's turn.
    fn prompt(&self, model: &Model) -> Result<Vec<u32>, CmdError> {
        Ok(self.prompt.tokens(&model.tokenizer, &self.messages)?)
    }
}

pub fn run(args: Args) -> CmdResult {
    let path = args.model.path(quiet())?;
    let model = Model::open(&path)?;
    let meta = &model.file.header().metadata;
    let mut chat = Conversation {
        prompt: ChatPrompt::for_model(meta, &model.tokenizer, args.template.read()?)?,
        system: args.system.clone(),
        messages: Vec::new(),
    };
    chat.reset();
    let options = EngineOptions {
        ram: args.budget.ram,
        ctx: args.ctx,
        threads: args.workers.threads,
        ..EngineOptions::default()
    };
    let mut engine = load_speculative(model, &options, &args.speculation)?;
    args.history.load(&mut engine);
    let params = SamplingParams {
        temperature: args.temperature,
        seed: args.seed,
        max_tokens: args.max_tokens,
        ..SamplingParams::default()
    };
    params.validate()?;

    let interactive = std::io::stdin().is_terminal();
    if interactive && !quiet() {
        eprintln!(
            "chatting with {} (context {} tokens); /reset forgets the conversation, Ctrl-D quits",
            path.display(),
            engine.context_size()
        );
    }
    let cancel = cancel_flag();
    let mut lines = std::io::stdin().lock().lines();
    let turns = Turns {
        params: &params,
        interactive,
        cancel,
        history: &args.history,
    };
    turns.converse(&mut engine, &mut chat, &mut lines)
}

/// What every turn of a conversation takes.
struct Turns<'a> {
    params: &'a SamplingParams,
    interactive: bool,
    cancel: &'a std::sync::atomic::AtomicBool,
    history: &'a ExpertHistoryFlag,
}

impl Turns<'_> {
    /// Reads user messages from `lines` and answers each until the input ends or asks to quit;
    /// the expert history is saved after every reply (Ctrl-C at the prompt exits at once).
    fn converse(
        &self,
        engine: &mut Engine,
        chat: &mut Conversation,
        lines: &mut impl Iterator<Item = std::io::Result<String>>,
    ) -> CmdResult {
        let (params, interactive, cancel) = (self.params, self.interactive, self.cancel);
        loop {
            // While waiting for input the flag stays raised, so Ctrl-C at the prompt quits at once.
            cancel.store(true, Ordering::SeqCst);
            if interactive {
                eprint!("> ");
            }
            let Some(line) = lines.next() else { break };
            let line = line.map_err(|e| format!("reading stdin: {e}"))?;
            let text = line.trim();
            match text {
                "" => continue,
                "/quit" | "/exit" => break,
                "/reset" => {
                    chat.reset();
                    if !quiet() {
                        eprintln!("(conversation cleared)");
                    }
                    continue;
                }
                _ => {}
            }
            chat.messages.push(message("user", text));
            cancel.store(false, Ordering::SeqCst);
            match reply(engine, chat, params) {
                Ok(stats) => {
                    chat.messages.push(message("assistant", &stats.text));
                    self.history.save(engine);
                    let interrupted = stats.stop_reason == StopReason::Cancelled;
                    if (interrupted || verbose()) && !quiet() {
                        eprint!("{}", stats_text(engine, &stats));
                    }
                }
                Err(e) => {
                    // The session goes on: the turn that failed is forgotten.
                    chat.messages.pop();
                    eprintln!("error: {e}");
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Generates the assistant's reply to the conversation, streaming it to stdout.
fn reply(
    engine: &mut Engine,
    chat: &Conversation,
    params: &SamplingParams,
) -> Result<GenerationStats, CmdError> {
    let prompt = chat.prompt(engine.model())?;
    let room = engine.context_size().saturating_sub(prompt.len());
    if room == 0 {
        return Err(format!(
            "the conversation ({} tokens) fills the context ({}); /reset to start over or use a larger --ctx",
            prompt.len(),
            engine.context_size()
        )
        .into());
    }
    let params = SamplingParams {
        max_tokens: params.max_tokens.min(room),
        ..params.clone()
    };
    let stats = generate_to_stdout(engine, &prompt, &params, None, true, true)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out)?;
    out.flush()?;
    Ok(stats)
}

/// One turn's figures, for stderr.
fn stats_text(engine: &Engine, s: &GenerationStats) -> String {
    let peak_rss = process_memory().map_or(0, |m| m.peak_rss);
    format!(
        "[{}prompt {} tokens ({} reused) in {:.2} s ({:.1} tok/s), reply {} tokens in {:.2} s ({:.1} tok/s), \
         context {}/{}, peak RSS {}]\n",
        if s.stop_reason == StopReason::Cancelled {
            "interrupted; "
        } else {
            ""
        },
        s.prompt_tokens,
        s.cached_tokens,
        s.prompt_secs,
        s.prompt_tokens_per_sec(),
        s.generated_tokens,
        s.decode_secs,
        s.decode_tokens_per_sec(),
        engine.n_past(),
        engine.context_size(),
        human_bytes(peak_rss),
    )
}
