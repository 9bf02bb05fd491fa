//! An expert cache's figures as `run --json` and `bench --json` print them: the whole call's
//! counts and decoding's, per token.

use ramforge_engine::stream::ResidencyStats;

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
        })
    })
}
