//! The expert history of `run`, `chat` and `serve`: an MoE model streamed expert by expert
//! saves its expert cache's use counts at exit into the cache directory
//! (`$XDG_CACHE_HOME/ramforge/expert-history/`, see [`ramforge_engine::ExpertHistory`]) and
//! the next process on the same model file loads them before its first token, preloading the
//! experts the last one used most. A history that cannot be used is one warning line, and the
//! run goes on as without one.

use crate::verbosity::{quiet, verbose};
use ramforge_engine::Engine;

/// `--no-expert-history`.
#[derive(clap::Args)]
pub struct ExpertHistoryFlag {
    /// Neither load nor save the expert history. By default an MoE model whose experts are
    /// streamed starts with the experts its last run used most already cached, and leaves its
    /// own counts for the next run ($XDG_CACHE_HOME/ramforge/expert-history/, one small file
    /// per model path).
    #[arg(long)]
    pub no_expert_history: bool,
}

impl ExpertHistoryFlag {
    /// The cache directory, unless the history is off or there is none (no HOME).
    fn dir(&self) -> Option<std::path::PathBuf> {
        if self.no_expert_history {
            return None;
        }
        crate::default_model::cache_dir().ok()
    }

    /// Loads the model's history into `engine` (before its first pass); warns and goes on
    /// without it when it cannot be used.
    pub fn load(&self, engine: &mut Engine) {
        let Some(dir) = self.dir() else { return };
        match engine.load_expert_history(&dir) {
            Ok(0) => {}
            Ok(n) => {
                if verbose() {
                    eprintln!(
                        "expert history: {n} experts preloaded from {}",
                        engine.expert_history_path(&dir).display()
                    );
                }
            }
            Err(e) => {
                if !quiet() {
                    eprintln!(
                        "warning: expert history {}: {e}; ignored",
                        engine.expert_history_path(&dir).display()
                    );
                }
            }
        }
    }

    /// Saves the engine's expert counts for the next process; warns when that fails.
    pub fn save(&self, engine: &Engine) {
        let Some(dir) = self.dir() else { return };
        if let Err(e) = engine.save_expert_history(&dir) {
            if !quiet() {
                eprintln!(
                    "warning: expert history {}: not saved: {e}",
                    engine.expert_history_path(&dir).display()
                );
            }
        }
    }
}
