//! Integration tests on real components.
mod agent_common;
mod agent_masking;
mod agent_refund;
mod llm_client;
mod runtime;
mod support;
