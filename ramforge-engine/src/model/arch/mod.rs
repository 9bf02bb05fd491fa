//! Architecture descriptions: for each `general.architecture`, the tensors a layer binds and the
//! block it runs, composed from the shared ops in `crate::forward`.
//!
//! Every architecture reads the common hyper-parameter keys (`<arch>.block_count`,
//! `<arch>.embedding_length`, ...; see [`crate::model::ModelConfig`]). Adding an architecture is
//! one file here that defines an [`Architecture`], one line in [`ALL`], and its tests.

mod deepseek2;
mod deepseek4;
mod gemma3;
mod glm4moe;
mod glm_dsa;
mod gpt_oss;
mod llama;
mod minimax_m2;
mod olmoe;
mod qwen2;
mod qwen2moe;
mod qwen3;
mod qwen35moe;
mod qwen3moe;
mod qwen3next;
mod spec;

pub(crate) use spec::layer_tensor;
pub use spec::{
    Architecture, Dim, ExpertActivation, ExpertWidth, Ffn, Gating, LocalRopeBase, Normalize,
    Presence, Role, RopeStyle, Router, Shape, SharedExpert, SlidingWindow, TensorSpec,
};

/// Every architecture the engine runs, in the order the README's support table lists them.
pub const ALL: &[&Architecture] = &[
    &llama::LLAMA,
    &qwen2::QWEN2,
    &qwen3::QWEN3,
    &qwen3moe::QWEN3MOE,
    &gemma3::GEMMA3,
    &qwen2moe::QWEN2MOE,
    &olmoe::OLMOE,
    &glm4moe::GLM4MOE,
    &minimax_m2::MINIMAX_M2,
    &gpt_oss::GPT_OSS,
    &deepseek2::DEEPSEEK2,
    &glm_dsa::GLM_DSA,
    &qwen35moe::QWEN35MOE,
    &qwen3next::QWEN3NEXT,
    &deepseek4::DEEPSEEK4,
];

impl Architecture {
    /// The architecture called `name`, if the engine runs it.
    pub fn named(name: &str) -> Option<&'static Architecture> {
        ALL.iter().copied().find(|a| a.name == name)
    }

    /// The names of every architecture, for error messages.
    pub fn supported_names() -> String {
        ALL.iter().map(|a| a.name).collect::<Vec<_>>().join(", ")
    }

    /// The layer tensor that plays `role`, if this architecture has one.
    pub fn spec(&self, role: Role) -> Option<&'static TensorSpec> {
        self.layer.iter().find(|s| s.role == role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_description_is_well_formed() {
        for a in ALL {
            assert_eq!(Architecture::named(a.name), Some(*a));
            for (i, s) in a.layer.iter().enumerate() {
                assert!(
                    a.layer[..i]
                        .iter()
                        .all(|t| t.role != s.role && t.name != s.name),
                    "{}: {} listed twice",
                    a.name,
                    s.name
                );
            }
            for (i, &r) in Role::ALL.iter().enumerate() {
                assert_eq!(r as usize, i);
            }
            assert!(
                a.spec(Role::AttnNorm).is_some(),
                "{} lacks AttnNorm",
                a.name
            );
            // An output projection: whole, or grouped through a low rank (deepseek4).
            assert!(
                a.spec(Role::AttnOutput).is_some() || a.spec(Role::AttnOutputB).is_some(),
                "{} has no attention output",
                a.name
            );
            // A query projection: plain, or through a q-LoRA (glm-dsa has only the latter).
            assert!(
                a.spec(Role::AttnQ).is_some() || a.spec(Role::AttnQA).is_some(),
                "{} has no query projection",
                a.name
            );
            assert!(
                a.spec(Role::FfnDown).is_some() || a.spec(Role::FfnDownExps).is_some(),
                "{} has no FFN",
                a.name
            );
        }
        assert_eq!(
            Architecture::supported_names(),
            "llama, qwen2, qwen3, qwen3moe, gemma3, qwen2moe, olmoe, glm4moe, minimax-m2, gpt-oss, deepseek2, glm-dsa, qwen35moe, qwen3next, deepseek4"
        );
    }
}
