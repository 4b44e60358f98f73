//! The fuzz targets' bodies, one module each with `run(input)`: the binaries
//! in `fuzz_targets/` hand them libFuzzer's inputs, and `tests/seeds.rs`
//! the committed seeds (on the stable toolchain, in CI).

pub mod agent_rounds;
pub mod declarative_skill;
pub mod gateway_request;
pub mod llm_response;
pub mod skill_component;
pub mod skill_file;
pub mod tool_call;
