//! Streaming: how the layers that are not pinned reach the compute, pass after pass.
//!
//! The data path: [`layout`] says where a layer's matrices lie (a few aligned segments); the
//! I/O thread of [`prefetch`] fills a ring of [`aligned`] buffers ahead of the compute through
//! [`reader`] (`O_DIRECT` or buffered reads dropped from the [`page_cache`]), or, on a warm
//! file, [`mapped`] windows used in place (a [`sigbus`] guard turns a vanished page into an
//! error). [`depth`] adapts how many reads are in flight; [`identity`] notices a model file
//! replaced or rewritten under the run; [`stats`] records the traffic.
//!
//! A split model's shards are read through handles of their own: every segment names its shard
//! (see [`layout`]), and offsets are in that shard's file.

pub(crate) mod aligned;
pub(crate) mod depth;
pub(crate) mod identity;
pub(crate) mod layout;
pub(crate) mod mapped;
pub(crate) mod page_cache;
pub(crate) mod prefetch;
pub(crate) mod reader;
pub(crate) mod sigbus;
pub(crate) mod stats;

pub use depth::{DepthDecision, WINDOW_PASSES};
pub use stats::ResidencyStats;

pub(crate) use aligned::{aligned_buf_charge, AlignedBuf};
pub(crate) use layout::{LayerLayout, MappedLayer};
pub(crate) use page_cache::drop_read;
pub(crate) use prefetch::Prefetcher;
pub(crate) use reader::{ReadMode, StreamFile, WARM_FRACTION};

/// Another handle on each of the model's files (by shard), for the reader threads' owners to
/// tell where a file ends now.
pub(crate) fn model_handles(
    model: &ramforge_gguf::GgufFile,
) -> Result<Vec<std::fs::File>, ramforge_gguf::GgufError> {
    model
        .shards()
        .iter()
        .map(|s| {
            s.file()
                .try_clone()
                .map_err(|source| ramforge_gguf::GgufError::Io {
                    path: s.path().display().to_string(),
                    source,
                })
        })
        .collect()
}
