//! The `skillhost` command.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    cli::init_tracing(&args);
    let runtime = tokio::runtime::Runtime::new().expect("starting the tokio runtime");
    match runtime.block_on(cli::run(args)) {
        Ok(code) => code,
        Err(error) => {
            cli::report_error(&error);
            std::process::ExitCode::FAILURE
        }
    }
}
