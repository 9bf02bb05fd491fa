//! Out-of-core streaming on the real model: the prefetch ring reads only what is not pinned,
//! gives the all-resident tokens (copied with O_DIRECT from a cold file, used in place from a
//! warm one), and a file truncated mid-generation ends that generation with an error naming
//! the tensor and offset, releases every charge, and leaves the engine usable.

mod common;

use common::{greedy, model, options, PROMPT};
use ramforge_engine::{Engine, EngineOptions, SamplingParams};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;

#[test]
fn streaming_reads_only_the_unpinned_layers_and_gives_the_resident_tokens() {
    let resident = greedy(&mut Engine::load(model(), &options(None)).unwrap(), 12);
    let mut e = Engine::load(model(), &options(Some(40 << 20))).unwrap();
    let plan = e.plan().clone();
    assert!(
        plan.stream_buffers >= 1 && plan.streamed_layers() > 0,
        "{plan:?}"
    );
    let n_pinned = plan.pinned.iter().filter(|&&p| p).count();
    assert!(
        plan.pinned[..n_pinned].iter().all(|&p| p),
        "the pinned layers are a prefix: {:?}",
        plan.pinned
    );
    let streamed = greedy(&mut e, 12);
    assert_eq!(streamed.tokens, resident.tokens);

    // Decode only: one token per eval, each reading the streamed layers once (plus one
    // embedding row, and the output projection when it is not resident).
    let before = *e.residency();
    let n = 6u64;
    let mut next = *streamed.tokens.last().unwrap();
    for _ in 0..n {
        let logits = e.eval(&[next]).unwrap();
        next = ramforge_engine::sampling::argmax(logits) as u32;
    }
    let d = e.residency().since(&before);
    let must_read = plan.streamed_bytes_per_token() + plan.embd_row_bytes;
    let per_token = d.bytes_read as f64 / n as f64;
    assert!(
        per_token >= must_read as f64 && per_token <= 1.05 * must_read as f64,
        "read {per_token} bytes per decoded token; the plan streams {must_read}"
    );
    assert_eq!(d.layers_loaded, n * plan.streamed_layers() as u64);
    assert_eq!(d.prefetch_hits + d.prefetch_late, d.layers_loaded);
    assert!(d.eval_secs > 0.0 && d.io_wait_secs <= d.eval_secs);
    assert_eq!(d.stream_buffers, plan.stream_buffers as u64);
    assert_eq!(d.pinned_bytes, plan.pinned_bytes());
    assert!(e.budget().peak() <= 40 << 20);

    // The measured speeds feed the same policy: a plan from them still fits the budget and
    // streams through at least one buffer.
    let timing = d.measured_timing().expect("layers were read and computed");
    assert!(timing.read_secs_per_byte > 0.0 && timing.compute_secs_per_layer > 0.0);
    let m = e.model();
    let replanned =
        ramforge_engine::MemoryPlan::with_timing(&m.config, &m.tensors, plan.request, timing)
            .unwrap();
    assert!(replanned.stream_buffers >= 1 && replanned.total_bytes() <= 40 << 20);
}

/// Sets the file back to `bytes`, in place (the engine's open handles see it), with the
/// modification time it had at load (`loaded`): the file as the engine loaded it.
fn restore(path: &Path, bytes: &[u8], loaded: std::time::SystemTime) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f.set_modified(loaded).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn a_warm_file_streams_in_place_and_gives_the_resident_tokens() {
    let path = warm_copy("in-place");
    let resident = greedy(&mut Engine::load(&path, &options(None)).unwrap(), 12);
    let mut e = Engine::load(&path, &options(Some(24 << 20))).unwrap();
    assert!(e.residency().mapped_io, "a warm file is mapped, not copied");
    let streamed = greedy(&mut e, 12);
    assert_eq!(streamed.tokens, resident.tokens);
    assert!(streamed.residency.layers_loaded > 0);
    assert!(streamed.residency.mapped_io);
    assert!(e.budget().peak() <= 24 << 20);
    drop(e);
    std::fs::remove_dir_all(path.parent().unwrap()).ok();
}

/// A copy of the model in its own directory, whole in the page cache (just written).
fn warm_copy(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ramforge-ooc-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.gguf");
    std::fs::write(&path, std::fs::read(model()).unwrap()).unwrap();
    path
}

/// A copy of the model in its own directory, none of it in the page cache.
fn cold_copy(tag: &str) -> std::path::PathBuf {
    let path = warm_copy(tag);
    drop_from_page_cache(&path);
    path
}

#[cfg(target_os = "linux")]
fn drop_from_page_cache(path: &std::path::Path) {
    let f = std::fs::File::open(path).unwrap();
    // Written pages are dirty, and only clean ones can be dropped.
    f.sync_all().unwrap();
    // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is open.
    unsafe {
        libc::posix_fadvise(
            std::os::unix::io::AsRawFd::as_raw_fd(&f),
            0,
            0,
            libc::POSIX_FADV_DONTNEED,
        );
    }
}

/// Only Linux can drop one file from the page cache (macOS has no per-file drop).
#[cfg(not(target_os = "linux"))]
fn drop_from_page_cache(path: &std::path::Path) {
    panic!(
        "cannot drop {} from the page cache on this system",
        path.display()
    );
}

#[test]
fn a_cold_load_leaves_the_weights_it_pinned_out_of_the_page_cache() {
    // Under a memory limit that counts the page cache, a second copy of the pinned weights
    // there would only press on the limit until reclaimed.
    let path = cold_copy("pinned");
    let e = Engine::load(&path, &options(Some(40 << 20))).unwrap();
    let plan = e.plan();
    assert!(
        plan.pinned.iter().any(|&p| p) && plan.output_resident,
        "{plan:?}"
    );
    let (file, tensors) = (&e.model().file, &e.model().tensors);
    let pinned = tensors.layers.iter().zip(&plan.pinned).filter(|(_, &p)| p);
    let loaded: Vec<_> = pinned
        .flat_map(|(l, _)| l.matrices())
        .chain([&tensors.output])
        .collect();
    let total: u64 = loaded.iter().map(|t| t.n_bytes).sum();
    let cached: u64 = loaded.iter().map(|t| file.cached_bytes(t).unwrap()).sum();
    // At most the 2 MiB folio where the last pinned layer meets the first streamed one.
    assert!(
        cached <= 2 << 20,
        "{cached} of the {total} loaded bytes are still in the page cache"
    );
    drop(e);
    std::fs::remove_dir_all(path.parent().unwrap()).ok();
}

/// Where a test cuts the file.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// Into the streamed matrix that lies last in the file: its layer is read (or mapped)
    /// after the cut.
    LastInFile,
    /// Into the first streamed layer: it is read ahead (or mapped and filled) before the
    /// cut, so a mapped one is found cut while the compute reads it.
    FirstStreamed,
}

#[test]
fn a_file_truncated_mid_generation_fails_names_the_tensor_and_releases_every_charge() {
    // Cold: the copy is evicted from the page cache, so layers stream with O_DIRECT (where
    // the file system has it); warm: the cache holds the copy, so layers are mapped in place.
    truncate_mid_generation("cold", true, Cut::LastInFile);
    truncate_mid_generation("warm", false, Cut::LastInFile);
    // A layer copied before the cut holds good bytes (the copy path fails at the next read);
    // a mapped one has lost its pages, so it must fail itself.
    truncate_mid_generation("warm", false, Cut::FirstStreamed);
}

fn truncate_mid_generation(tag: &str, evict: bool, cut_at: Cut) {
    let path = if evict {
        cold_copy(tag)
    } else {
        warm_copy(tag)
    };
    let dir = path.parent().unwrap().to_path_buf();
    let bytes = std::fs::read(model()).unwrap();
    let loaded = std::fs::metadata(&path).unwrap().modified().unwrap();

    let mut e = Engine::load(&path, &options(Some(24 << 20))).unwrap();
    eprintln!(
        "{tag}, cut {cut_at:?}: streamed with O_DIRECT: {}, mapped: {}",
        e.residency().direct_io,
        e.residency().mapped_io
    );
    if !evict {
        assert!(e.residency().mapped_io, "a warm file is mapped in place");
    }
    let held_after_load = e.budget().held();
    let baseline = greedy(&mut e, 10);

    // Cut the file 1000 bytes into the chosen matrix (layers are not stored in numeric
    // order: blk.9 may follow blk.29).
    let plan = e.plan().clone();
    let mut streamed = e
        .model()
        .tensors
        .layers
        .iter()
        .zip(&plan.pinned)
        .filter(|(_, &pinned)| !pinned)
        .map(|(l, _)| l.matrices());
    let first = match cut_at {
        Cut::LastInFile => streamed.flatten().max_by_key(|t| t.offset),
        Cut::FirstStreamed => streamed.next().unwrap().min_by_key(|t| t.offset),
    }
    .unwrap()
    .clone();
    let cut = e.model().file.absolute_offset(&first) + 1000;
    // Cut during a pass, after its first layer (the prompt's progress callback runs between
    // layers), so that the reads, or the mapped layer the reader prepared before the cut,
    // find it (between passes the engine sees the shorter file before reading anything).
    let prompt = e.model().tokenizer.encode(PROMPT, true, true);
    let was_cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (cut_path, cut_flag) = (path.clone(), std::sync::Arc::clone(&was_cut));
    e.set_prompt_progress(Some(Box::new(move |_, _| {
        if !cut_flag.swap(true, std::sync::atomic::Ordering::Relaxed) {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&cut_path)
                .unwrap();
            f.set_len(cut).unwrap();
        }
    })));
    let result = e.generate(
        &prompt,
        &SamplingParams::greedy(10),
        &mut |_, _| {},
        &AtomicBool::new(false),
    );
    e.set_prompt_progress(None);
    let err = match result {
        Ok(s) => panic!("generation over a truncated file succeeded: {:?}", s.tokens),
        Err(e) => e.to_string(),
    };
    assert!(
        was_cut.load(std::sync::atomic::Ordering::Relaxed),
        "the file was cut during generation"
    );
    assert!(
        err.contains(&format!("\"{}\"", first.name))
            && err.contains(&format!("short read at file offset {cut}")),
        "{err}"
    );
    assert_eq!(
        e.budget().held(),
        held_after_load,
        "every charge of the failed generation is released"
    );
    assert_eq!(e.n_past(), 0, "the context was reset");

    // The file restored, the same engine generates the same tokens again.
    restore(&path, &bytes, loaded);
    let again = greedy(&mut e, 10);
    assert_eq!(again.tokens, baseline.tokens);
    assert!(again.residency.layers_loaded > 0);
    drop(e);
    std::fs::remove_dir_all(&dir).ok();
}

/// A prompt longer than the rows a budget holds runs layer by layer over each run of held rows
/// (whole 16-token batches): every streamed layer is read once per run instead of once per
/// batch, and the logits are those of the batches run one by one all resident, bit for bit;
/// decoding after it gives the same tokens.
#[test]
fn a_long_prompt_reads_each_streamed_layer_once_per_run_of_held_rows() {
    let opts = |ram| EngineOptions {
        ram,
        ctx: Some(256),
        threads: 2,
        batch: 16,
        ..Default::default()
    };
    let m = ramforge_engine::Model::open(model()).unwrap();
    let n_vocab = m.tokenizer.vocab_size() as u32;
    let prompt: Vec<u32> = (0..240u32).map(|i| (i * 7919 + 13) % n_vocab).collect();
    // A budget whose leftover holds fewer rows than the prompt, at least two batches.
    let ram = (40..64u64)
        .map(|mib| mib << 20)
        .find(|&ram| {
            m.plan(&opts(Some(ram))).is_ok_and(|p| {
                p.streamed_layers() > 0 && p.held_rows >= 32 && p.held_rows < prompt.len()
            })
        })
        .expect("a budget of 40-63 MiB holds 32-239 rows");

    let mut resident = Engine::load(model(), &opts(None)).unwrap();
    let want = resident.eval(&prompt).unwrap().to_vec();
    let mut e = Engine::load(model(), &opts(Some(ram))).unwrap();
    let plan = e.plan().clone();
    assert_eq!(
        (plan.request.batch, plan.held_rows % 16),
        (16, 0),
        "{plan:?}"
    );
    let before = *e.residency();
    let got = e.eval(&prompt).unwrap().to_vec();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(&got) == bits(&want),
        "the logits differ from all resident"
    );
    let d = e.residency().since(&before);
    let runs = prompt.len().div_ceil(plan.held_rows) as u64;
    assert_eq!(
        d.layers_loaded,
        runs * plan.streamed_layers() as u64,
        "{runs} runs of {} rows (batch by batch: 15 passes)",
        plan.held_rows
    );
    assert!(e.budget().peak() <= ram);

    // Decoding goes on from the same context in both.
    let mut next = [ramforge_engine::sampling::argmax(&got) as u32; 2];
    for _ in 0..4 {
        let a = resident.eval(&next[..1]).unwrap();
        let b = e.eval(&next[1..]).unwrap();
        assert!(bits(a) == bits(b), "a decoded token's logits differ");
        next = [ramforge_engine::sampling::argmax(a) as u32; 2];
    }
}
