//! One module per subcommand; each owns its clap `Args` and a `run` function, and none uses
//! another: what several share lives outside `cmd/` (`args`, `generate`, `default_model`, ...).

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
