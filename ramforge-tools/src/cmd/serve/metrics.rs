//! The figures `/metrics` (Prometheus text format) and `/status` (JSON, the chat page's live
//! panel) report: requests by route and status, the queue, tokens, decoding passes, and the
//! memory hierarchy the engine reports for `run --json` (budget and RSS, pinned against
//! streamed layers, bytes read, prefetch and expert-cache hits).
//!
//! The engine thread copies its figures here after every prefill and decoding pass; the HTTP
//! side counts requests; a scrape reads both, plus the budget's ledger and the kernel's RSS.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use ramforge_engine::{process_memory, Engine, MemoryBudget, ResidencyStats};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// What the engine thread has done so far.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct EngineFigures {
    /// Storage traffic and layout, as `run --json` reports them.
    pub residency: ResidencyStats,
    /// Prompts prefilled, and their tokens (those reused from a kept context included).
    pub prefills: u64,
    pub prompt_tokens: u64,
    /// Prompt tokens reused from a slot's kept context instead of evaluated.
    pub cached_prompt_tokens: u64,
    /// Batched decoding passes (one pass over the weights each), and the tokens they evaluated.
    pub passes: u64,
    pub pass_tokens: u64,
    /// Speculative passes (among `passes`), the tokens drafted for them and those accepted.
    pub speculative_passes: u64,
    pub drafted_tokens: u64,
    pub accepted_tokens: u64,
    /// Tokens generated for finished requests, and how many requests finished.
    pub completion_tokens: u64,
    pub finished: u64,
    /// Requests being decoded now.
    pub active: u64,
}

/// The shared figures; one per server.
pub struct Telemetry {
    budget: MemoryBudget,
    minimum_budget: u64,
    started: Instant,
    engine: Mutex<EngineFigures>,
    /// Answered requests by (route, status).
    requests: Mutex<BTreeMap<(String, u16), u64>>,
}

impl Telemetry {
    /// Figures for `engine` as loaded: its budget (a clone shares the ledger), its plan's
    /// minimum and its layout, before any request.
    pub fn new(engine: &Engine) -> Telemetry {
        Telemetry {
            budget: engine.budget().clone(),
            minimum_budget: engine.plan().minimum,
            started: Instant::now(),
            engine: Mutex::new(EngineFigures {
                residency: *engine.residency(),
                ..EngineFigures::default()
            }),
            requests: Mutex::new(BTreeMap::new()),
        }
    }

    fn engine(&self) -> std::sync::MutexGuard<'_, EngineFigures> {
        self.engine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// After a prompt of `tokens` was prefilled, `cached` of them reused.
    pub fn prefilled(&self, engine: &Engine, tokens: usize, cached: usize) {
        let mut f = self.engine();
        f.residency = *engine.residency();
        f.prefills += 1;
        f.prompt_tokens += tokens as u64;
        f.cached_prompt_tokens += cached as u64;
    }

    /// After one decoding pass over `rows` requests.
    pub fn stepped(&self, engine: &Engine, rows: usize) {
        let mut f = self.engine();
        f.residency = *engine.residency();
        f.passes += 1;
        f.pass_tokens += rows as u64;
    }

    /// After one speculative pass (also counted by [`Telemetry::stepped`]) that checked
    /// `drafted` tokens and accepted `accepted` of them.
    pub fn speculated(&self, drafted: u64, accepted: u64) {
        let mut f = self.engine();
        f.speculative_passes += 1;
        f.drafted_tokens += drafted;
        f.accepted_tokens += accepted;
    }

    /// A request finished with `completion_tokens` generated.
    pub fn finished(&self, completion_tokens: usize) {
        let mut f = self.engine();
        f.completion_tokens += completion_tokens as u64;
        f.finished += 1;
    }

    /// `n` requests are being decoded now.
    pub fn set_active(&self, n: usize) {
        self.engine().active = n as u64;
    }

    fn count(&self, route: String, status: u16) {
        let mut r = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        *r.entry((route, status)).or_default() += 1;
    }

    /// Everything at once, with the queue's figures given by the caller.
    pub fn snapshot(&self, queue: QueueFigures) -> Snapshot {
        let mem = process_memory().unwrap_or_default();
        let requests = self
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|((route, status), n)| RequestCount {
                route: route.clone(),
                status: *status,
                count: *n,
            })
            .collect();
        Snapshot {
            uptime_secs: self.started.elapsed().as_secs_f64(),
            budget_bytes: (!self.budget.is_unlimited()).then(|| self.budget.limit()),
            minimum_budget_bytes: self.minimum_budget,
            managed_bytes: self.budget.held(),
            peak_managed_bytes: self.budget.peak(),
            rss_bytes: mem.rss,
            peak_rss_bytes: mem.peak_rss,
            queue,
            engine: *self.engine(),
            requests,
        }
    }
}

/// The queue as the HTTP side sees it.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct QueueFigures {
    /// Requests held: waiting or being decoded.
    pub held: usize,
    /// The most it holds (`--queue` + `--parallel`); more get a 503.
    pub capacity: usize,
    /// Requests decoded together at most (`--parallel`).
    pub parallel: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct RequestCount {
    pub route: String,
    pub status: u16,
    pub count: u64,
}

/// One reading of every figure (`/status` serves it as JSON).
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    pub uptime_secs: f64,
    /// `None`: no `--ram` budget.
    pub budget_bytes: Option<u64>,
    pub minimum_budget_bytes: u64,
    /// Bytes charged to the budget now, and at most so far.
    pub managed_bytes: u64,
    pub peak_managed_bytes: u64,
    pub rss_bytes: u64,
    pub peak_rss_bytes: u64,
    pub queue: QueueFigures,
    pub engine: EngineFigures,
    pub requests: Vec<RequestCount>,
}

/// Counts every answered request by its route (the pattern, so the label set stays small)
/// and status.
pub async fn count_requests(
    State(telemetry): State<Arc<Telemetry>>,
    request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "other".to_string(), |m| m.as_str().to_string());
    let response = next.run(request).await;
    telemetry.count(route, response.status().as_u16());
    response
}

/// The snapshot in Prometheus' text exposition format (version 0.0.4).
pub fn prometheus_text(s: &Snapshot) -> String {
    let mut out = Exposition(String::new());
    let e = &s.engine;
    let r = &e.residency;
    out.family(
        "ramforge_requests_total",
        "counter",
        "HTTP requests answered, by route and status.",
    );
    for c in &s.requests {
        let labels = format!("route=\"{}\",code=\"{}\"", escape_label(&c.route), c.status);
        out.sample("ramforge_requests_total", &labels, c.count as f64);
    }
    out.gauge(
        "ramforge_queue_requests",
        "Requests held now: waiting or being decoded.",
        s.queue.held as f64,
    );
    out.gauge(
        "ramforge_queue_capacity",
        "Requests the queue holds at most (--queue + --parallel).",
        s.queue.capacity as f64,
    );
    out.gauge(
        "ramforge_parallel",
        "Requests decoded together at most (--parallel).",
        s.queue.parallel as f64,
    );
    out.gauge(
        "ramforge_active_requests",
        "Requests being decoded now.",
        e.active as f64,
    );
    out.counter(
        "ramforge_finished_requests_total",
        "Generations that finished.",
        e.finished as f64,
    );
    out.counter(
        "ramforge_prompt_tokens_total",
        "Prompt tokens of the prefilled requests.",
        e.prompt_tokens as f64,
    );
    out.counter(
        "ramforge_prompt_tokens_cached_total",
        "Prompt tokens reused from a kept context, not evaluated.",
        e.cached_prompt_tokens as f64,
    );
    out.counter(
        "ramforge_completion_tokens_total",
        "Tokens generated for finished requests.",
        e.completion_tokens as f64,
    );
    out.counter(
        "ramforge_decode_passes_total",
        "Batched decoding passes (one pass over the weights each).",
        e.passes as f64,
    );
    out.counter(
        "ramforge_decode_pass_tokens_total",
        "Tokens evaluated by the decoding passes (over passes: tokens per pass).",
        e.pass_tokens as f64,
    );
    out.counter(
        "ramforge_speculative_passes_total",
        "Decoding passes that verified drafted tokens (--lookup, --draft, --mtp).",
        e.speculative_passes as f64,
    );
    out.counter(
        "ramforge_draft_tokens_total",
        "Tokens drafted for speculative passes.",
        e.drafted_tokens as f64,
    );
    out.counter(
        "ramforge_draft_tokens_accepted_total",
        "Drafted tokens the model accepted.",
        e.accepted_tokens as f64,
    );
    out.counter(
        "ramforge_tokens_evaluated_total",
        "Tokens run through the model, prompt and generated.",
        r.tokens as f64,
    );
    out.counter(
        "ramforge_read_bytes_total",
        "Bytes read from the model file while generating.",
        r.bytes_read as f64,
    );
    out.counter(
        "ramforge_read_seconds_total",
        "Seconds spent reading the model file while generating.",
        r.read_secs,
    );
    out.counter(
        "ramforge_io_wait_seconds_total",
        "Seconds the compute waited for storage.",
        r.io_wait_secs,
    );
    out.counter(
        "ramforge_eval_seconds_total",
        "Seconds spent evaluating (compute and I/O wait).",
        r.eval_secs,
    );
    out.counter(
        "ramforge_layers_streamed_total",
        "Layers read into a streaming buffer.",
        r.layers_loaded as f64,
    );
    out.counter(
        "ramforge_layers_pinned_hits_total",
        "Layer uses served from pinned memory without a read.",
        r.layers_pinned_hits as f64,
    );
    out.counter(
        "ramforge_prefetch_hits_total",
        "Streamed layers read before the compute asked for them.",
        r.prefetch_hits as f64,
    );
    out.counter(
        "ramforge_prefetch_late_total",
        "Streamed layers the compute had to wait for.",
        r.prefetch_late as f64,
    );
    out.counter(
        "ramforge_expert_hits_total",
        "MoE experts found in the expert cache.",
        r.expert_hits as f64,
    );
    out.counter(
        "ramforge_expert_misses_total",
        "MoE experts read from storage.",
        r.expert_misses as f64,
    );
    out.counter(
        "ramforge_expert_read_bytes_total",
        "Bytes read for MoE experts (part of ramforge_read_bytes_total).",
        r.expert_bytes_read as f64,
    );
    out.gauge(
        "ramforge_expert_hit_ratio",
        "Fraction of expert uses served from the cache (0 when none).",
        r.expert_hit_rate(),
    );
    out.gauge(
        "ramforge_experts_preloaded",
        "MoE experts read into the cache at start, as the expert history named them.",
        r.experts_preloaded as f64,
    );
    out.gauge(
        "ramforge_pinned_layers",
        "Layers pinned in memory.",
        r.pinned_layers as f64,
    );
    out.gauge(
        "ramforge_streamed_layers",
        "Layers streamed from storage every pass.",
        r.streamed_layers as f64,
    );
    out.gauge(
        "ramforge_pinned_layer_bytes",
        "Matrix bytes of the pinned layers.",
        r.pinned_bytes as f64,
    );
    out.gauge(
        "ramforge_streamed_layer_bytes",
        "Matrix bytes of the streamed layers (read every pass).",
        r.streamed_bytes as f64,
    );
    out.gauge(
        "ramforge_load_bytes",
        "Bytes read from the model file while loading.",
        r.load_bytes as f64,
    );
    let budget = s.budget_bytes.map_or(f64::INFINITY, |b| b as f64);
    out.gauge(
        "ramforge_budget_bytes",
        "The --ram budget (+Inf without one).",
        budget,
    );
    out.gauge(
        "ramforge_budget_minimum_bytes",
        "The smallest budget the plan could run in.",
        s.minimum_budget_bytes as f64,
    );
    out.gauge(
        "ramforge_managed_bytes",
        "Bytes charged to the budget now.",
        s.managed_bytes as f64,
    );
    out.gauge(
        "ramforge_managed_peak_bytes",
        "Most bytes charged to the budget at once.",
        s.peak_managed_bytes as f64,
    );
    out.gauge(
        "ramforge_rss_bytes",
        "Resident set size now (VmRSS).",
        s.rss_bytes as f64,
    );
    out.gauge(
        "ramforge_rss_peak_bytes",
        "Peak resident set size (VmHWM).",
        s.peak_rss_bytes as f64,
    );
    out.gauge(
        "ramforge_uptime_seconds",
        "Seconds since the server started.",
        s.uptime_secs,
    );
    out.0
}

/// The text being written: `# HELP` and `# TYPE` lines, then samples.
struct Exposition(String);

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &str, value: f64) {
        let value = if value.is_infinite() && value > 0.0 {
            "+Inf".to_string()
        } else {
            format!("{value}")
        };
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {value}");
        } else {
            let _ = writeln!(self.0, "{name}{{{labels}}} {value}");
        }
    }

    fn counter(&mut self, name: &str, help: &str, value: f64) {
        self.family(name, "counter", help);
        self.sample(name, "", value);
    }

    fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.family(name, "gauge", help);
        self.sample(name, "", value);
    }
}

/// A label value with `\`, `"` and newlines escaped, as the format wants.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped_and_infinity_is_written_as_the_format_wants() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let mut e = Exposition(String::new());
        e.gauge("x", "help", f64::INFINITY);
        e.sample("y", "a=\"1\"", 2.5);
        assert_eq!(
            e.0,
            "# HELP x help\n# TYPE x gauge\nx +Inf\ny{a=\"1\"} 2.5\n"
        );
    }
}
