//! `componentize <input.wasm> <output.wasm>`
//!
//! Turns a core module built by wit-bindgen (`wasm32-unknown-unknown`) into a
//! component, using the component-type custom section wit-bindgen embedded.
//! A component (as `wasm32-wasip2` produces) is validated and copied as is.
//! The output depends only on the input bytes, so rebuilds stay byte-identical.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use wasmparser::Validator;
use wit_component::ComponentEncoder;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("componentize: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        bail!("usage: componentize <input.wasm> <output.wasm>");
    };
    let bytes = std::fs::read(input).with_context(|| format!("reading {input}"))?;
    let component = componentize(&bytes).with_context(|| format!("componentizing {input}"))?;
    std::fs::write(output, component).with_context(|| format!("writing {output}"))
}

fn componentize(bytes: &[u8]) -> Result<Vec<u8>> {
    if wasmparser::Parser::is_component(bytes) {
        Validator::new().validate_all(bytes)?;
        return Ok(bytes.to_vec());
    }
    ComponentEncoder::default()
        .module(bytes)?
        .validate(true)
        .encode()
}
