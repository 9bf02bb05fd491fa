//! One module per subcommand, each owning its clap `Args` and a `run` function.
//!
//! No command uses another: what several share lives outside `cmd/` (`args`, `generate`,
//! `default_model`, ...).

pub mod bench;
pub mod chat;
pub mod chat_render;
pub mod fetch;
pub mod inspect;
pub mod plan;
pub mod run;
pub mod synth;
pub mod tokenize;
pub mod verify;
