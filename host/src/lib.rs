//! skillhost: a host for LLM-agent skills shipped as signed WebAssembly components.
//!
//! Embedders start at [`embed::SkillHost::builder`]; [`gateway`] serves a
//! host over HTTP (`skillhost serve`). See `ARCHITECTURE.md` at the
//! repository root for the code map and the invariants each module keeps.

/// The skill contract (`wit/skill@0.1.0/skill.wit`) as text: the world a
/// component implements, compiled in for what builds one (`skillhost pack`,
/// `skillhost new`).
pub const SKILL_WIT: &str = include_str!("../../wit/skill@0.1.0/skill.wit");

pub mod agent;
mod blocking;
pub mod embed;
pub mod gateway;
mod private_dir;
mod recent;
pub mod runtime;
mod schema;
pub mod scope;
pub mod skills;
pub mod text;
pub mod tools;
pub mod trace_context;
