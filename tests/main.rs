//! Integration tests on real components.
mod agent_cases;
mod agent_common;
mod agent_masking;
mod agent_refund;
mod cli;
mod gateway;
mod interpreted_skills;
mod kept_runs;
mod llm_client;
mod mcp;
mod observability;
mod reload;
mod runtime;
mod support;
