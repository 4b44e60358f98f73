//! skillhost: a host for LLM-agent skills shipped as signed WebAssembly components.
//!
//! See `ARCHITECTURE.md` at the repository root for the code map and the
//! invariants each module keeps.

pub mod agent;
pub mod runtime;
mod schema;
pub mod skills;
pub mod tools;
