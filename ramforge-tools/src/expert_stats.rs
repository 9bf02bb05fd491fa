//! An expert cache's figures as `run --json` and `bench --json` print them: the whole call's
//! counts and decoding's, per token; `run` adds the first and last decoding windows.

use ramforge_engine::stream::ResidencyStats;
use ramforge_engine::{GenerationStats, WINDOW_EVALS};

/// The figures of `whole` (the call) and `decode` (its decoding passes); `None` unless the
/// model's experts were streamed one by one.
pub fn json(whole: &ResidencyStats, decode: &ResidencyStats) -> Option<serde_json::Value> {
    whole.streams_experts().then(|| {
        serde_json::json!({
            "slots_per_layer": whole.expert_slots_per_layer,
            "hits": whole.expert_hits,
            "misses": whole.expert_misses,
            "admitted": whole.experts_admitted,
            "bytes_read": whole.expert_bytes_read,
            "mapped": whole.experts_mapped,
            "read_secs": whole.expert_read_secs,
            "wait_secs": whole.expert_wait_secs,
            "decode_hits": decode.expert_hits,
            "decode_misses": decode.expert_misses,
            "decode_bytes_read": decode.expert_bytes_read,
            "decode_mapped": decode.experts_mapped,
            "decode_read_secs": decode.expert_read_secs,
            "decode_wait_secs": decode.expert_wait_secs,
            "decode_reads_per_token": decode.expert_reads_per_token(),
            "decode_hit_rate": decode.expert_hit_rate(),
            "preloaded": whole.experts_preloaded,
            "read_ahead": whole.experts_read_ahead,
            "ahead_wait_secs": whole.ahead_wait_secs,
            "decode_read_ahead": decode.experts_read_ahead,
            "decode_ahead_wait_secs": decode.ahead_wait_secs,
        })
    })
}

/// Adds to `x` the hit rates of the first and last [`WINDOW_EVALS`] decoding evals of `s`:
/// how warm the cache started (the expert history's effect) and where it ended up.
pub fn add_windows(x: &mut serde_json::Value, s: &GenerationStats) {
    let (first, last) = (&s.first_decode_residency, &s.last_decode_residency);
    x["window_evals"] = WINDOW_EVALS.into();
    x["first_decode_hits"] = first.expert_hits.into();
    x["first_decode_misses"] = first.expert_misses.into();
    x["first_decode_hit_rate"] = first.expert_hit_rate().into();
    x["last_decode_hits"] = last.expert_hits.into();
    x["last_decode_misses"] = last.expert_misses.into();
    x["last_decode_hit_rate"] = last.expert_hit_rate().into();
}
