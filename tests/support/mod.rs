//! Helpers shared by the integration tests.

pub mod collector;
pub mod configmap;
pub mod crm;
pub mod environment;
pub mod fixtures;
pub mod hand_written;
pub mod mcp;
pub mod scripted_llm;
pub mod signing;
