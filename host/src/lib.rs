//! skillhost: a host for LLM-agent skills shipped as signed WebAssembly components.
//!
//! Embedders start at [`embed::SkillHost::builder`]; [`gateway`] serves a
//! host over HTTP (`skillhost serve`). See `ARCHITECTURE.md` at the
//! repository root for the code map and the invariants each module keeps.

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
