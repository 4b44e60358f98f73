//! `skillhost runs`: the runs a runs directory keeps, read without a host.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;

use skillhost::agent::{KeptRunInfo, Returned, list_kept_runs};

use super::config::ConfigFile;

/// `skillhost runs`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The directory is only read: it may be listed while serve keeps its runs there. \
    A waiting run is resumed by the next serve on the directory, its confirmation pending again; \
    an approved one is running while a serve holds the directory, and interrupted once none does \
    (its approved call was under way when its serve stopped, or had returned before the run's \
    end): the next serve reports it, and does not run it again.\n\nExits non-zero when a file of the directory holds no run serve \
    could resume (it is listed with the reason, and left where it is)."
)]
pub struct RunsArgs {
    /// The directory serve keeps its runs in (serve's --runs-dir) [default:
    /// the config file's [server] runs_dir].
    #[arg(long, value_name = "DIR", env = "SKILLHOST_RUNS_DIR")]
    runs_dir: Option<PathBuf>,
    /// A config file whose [server] runs_dir names the directory.
    #[arg(long, value_name = "FILE", env = "SKILLHOST_CONFIG")]
    config: Option<PathBuf>,
    /// Print one JSON object: runs [{run, requested_by, state, kind, skill,
    /// confirmation, summary, expires_at, approved_by, approved_at,
    /// returned?, trace_id}] and unreadable [{file, reason}].
    #[arg(long)]
    json: bool,
}

pub fn runs(args: &RunsArgs) -> anyhow::Result<ExitCode> {
    let dir = match &args.runs_dir {
        Some(dir) => dir.clone(),
        None => ConfigFile::load_or_default(args.config.as_deref())?
            .server
            .runs_dir
            .context("no runs directory: pass --runs-dir DIR (serve's), or a config file with [server] runs_dir")?,
    };
    anyhow::ensure!(
        dir.is_dir(),
        "runs directory {}: not a directory",
        dir.display()
    );
    let (kept, unreadable) = list_kept_runs(&dir);
    if args.json {
        let unreadable: Vec<_> = unreadable
            .iter()
            .map(|file| json!({"file": file.path, "reason": file.reason}))
            .collect();
        println!("{}", json!({"runs": kept, "unreadable": unreadable}));
    } else {
        println!("{} run(s) kept in {}", kept.len(), dir.display());
        for run in &kept {
            println!("{}", describe(run));
        }
        for file in &unreadable {
            println!(
                "unreadable: {}: {} (left where it is)",
                file.path.display(),
                file.reason
            );
        }
    }
    Ok(if unreadable.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// One line for a kept run: where it stands, its call, and what it is.
fn describe(run: &KeptRunInfo) -> String {
    let what = match (&run.skill, run.kind) {
        (Some(skill), _) => format!("skill {} {}", skill.name, skill.version),
        (None, Some(kind)) => kind.to_owned(),
        (None, None) => "run".to_owned(),
    };
    let stands = match &run.approved_at {
        Some(at) => format!(
            "{}: approved{} at {at}, {}",
            run.state,
            run.approved_by
                .as_ref()
                .map(|by| format!(" by {by}"))
                .unwrap_or_default(),
            match (run.state, &run.returned) {
                ("running", None) => "its call under way in the serve holding the directory",
                ("running", Some(_)) =>
                    "its call returned; the run goes on in the serve holding the directory",
                (_, None) => "its call may or may not have run",
                (_, Some(Returned::Result(_))) => "its call ran; the run did not end",
                (_, Some(Returned::Error(_))) => "its call failed; the run did not end",
            }
        ),
        None => format!("waiting, expires {}", run.expires_at),
    };
    let acting = run
        .requested_by
        .as_ref()
        .map(|principal| format!(", for {principal}"))
        .unwrap_or_default();
    let traced = run
        .trace_id
        .as_ref()
        .map(|trace| format!("; trace {trace}"))
        .unwrap_or_default();
    format!(
        "{}  {}  ({stands}; {what}{acting}; confirmation {}{traced})",
        run.run, run.summary, run.confirmation
    )
}
