//! `skillhost test`: run the test cases skills carry in their manifests.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use serde_json::json;

use super::config;
use super::config::ConfigFile;
use super::progress::{self, Progress};
use super::{HostArgs, StandIns};
use skillhost::agent::cases::{CaseReport, Verdict, run_case};
use skillhost::agent::llm::{ConfigError, LlmClient};
use skillhost::agent::{Agent, SkillPath};
use skillhost::runtime::Runtime;
use skillhost::skills::{LoadFailure, SkillRegistry};

/// `skillhost test`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Each case runs on its own fresh in-memory demo shop, so cases cannot \
    interfere and nothing is written anywhere (--db is not used): write tools are APPROVED \
    AUTOMATICALLY during `skillhost test`.\n\nSkills with deterministic steps need no LLM. Skills that run on their \
    instructions use the configured model (SKILLHOST_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY, \
    or [llm] in the --config file); without one their cases are reported as skipped. The \
    --config file's [sandbox] limits apply; its HTTP tools are registered as stand-ins that are \
    never called, since writes are approved here.\n\nExits non-zero when a case fails or, when no skill is named, when a file \
    in the skills directory fails to load."
)]
pub struct TestArgs {
    /// Skills to test, by name. Default: every loaded skill.
    #[arg(value_name = "SKILL")]
    names: Vec<String>,
    /// Print the reports as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub(super) host: HostArgs,
}

pub async fn test(args: &TestArgs) -> anyhow::Result<ExitCode> {
    let file = args.host.config_file()?;
    let llm = match file.llm_config() {
        Ok(config) => Some(LlmClient::new(config)?),
        Err(ConfigError::NotConfigured { .. }) => None,
        Err(error) => return Err(error.into()),
    };
    let runtime =
        Runtime::new(args.host.runtime_config(&file)?).map_err(config::name_sandbox_keys)?;
    let stand_ins = StandIns::of(&file, "test").await?;
    let skills = Arc::new(load_skills(&args.host, &file, &stand_ins, runtime).await?);
    let snapshot = skills.snapshot();
    let selected: Vec<_> = if args.names.is_empty() {
        snapshot.skills().collect()
    } else {
        args.names
            .iter()
            .map(|name| {
                snapshot
                    .get(name)
                    .with_context(|| snapshot.not_loaded(name))
            })
            .collect::<anyhow::Result<_>>()?
    };
    // Files that did not load are failures only when every skill is tested.
    let load_failures: Vec<&LoadFailure> = if args.names.is_empty() {
        snapshot.failures().collect()
    } else {
        Vec::new()
    };
    if !args.json {
        for failure in &load_failures {
            println!(
                "FAIL {}: did not load: {}",
                failure.path.display(),
                failure.reason
            );
        }
    }
    let mut reports: Vec<CaseReport> = Vec::new();
    let mut without_cases = Vec::new();
    let total_cases = selected
        .iter()
        .map(|skill| skill.component.manifest().test_cases.len())
        .sum();
    let progress = Progress::counter("testing", total_cases);
    for skill in selected {
        let manifest = skill.component.manifest();
        if manifest.test_cases.is_empty() {
            without_cases.push(manifest.name.to_string());
            if !args.json {
                progress.suspend(|| println!("---- {} has no test cases", manifest.name));
            }
            continue;
        }
        for case in &manifest.test_cases {
            progress.set_message(format!("{} › {}", manifest.name, case.name));
            let mut agent = Agent::builder(skills.clone()).tools(stand_ins.with_fresh_shop()?);
            if let Some(llm) = &llm {
                agent = agent.llm(llm.clone());
            }
            let report = run_case(&agent.build()?, &manifest.name, case).await;
            progress.advance();
            if !args.json {
                progress.suspend(|| print_report(&report));
            }
            reports.push(report);
        }
    }
    drop(progress);
    let count = |wanted: fn(&Verdict) -> bool| {
        reports
            .iter()
            .filter(|report| wanted(&report.verdict))
            .count()
    };
    let passed = count(|verdict| matches!(verdict, Verdict::Passed));
    let failed = count(|verdict| matches!(verdict, Verdict::Failed { .. }));
    let skipped = count(|verdict| matches!(verdict, Verdict::Skipped { .. }));
    if args.json {
        let summary = json!({
            "cases": reports,
            "load_failures": load_failures,
            "without_cases": without_cases,
            "passed": passed,
            "failed": failed,
            "skipped": skipped,
        });
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        let unloaded = match load_failures.len() {
            0 => String::new(),
            1 => "; 1 file did not load".to_owned(),
            files => format!("; {files} files did not load"),
        };
        println!("cases: {passed} passed, {failed} failed, {skipped} skipped{unloaded}");
    }
    Ok(if failed > 0 || !load_failures.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The skills of the directory, resolved against the demo tools and the
/// config file's HTTP and MCP tools (stand-ins). The tools' database is a
/// throwaway: cases run on their own.
async fn load_skills(
    args: &HostArgs,
    file: &ConfigFile,
    stand_ins: &StandIns,
    runtime: Runtime,
) -> anyhow::Result<SkillRegistry> {
    let policy = args.signature_policy(&file.key_scopes()?)?;
    Ok(SkillRegistry::load_dir_with_progress(
        runtime,
        stand_ins.with_fresh_shop()?,
        policy,
        args.skills_dir()?,
        progress::loading_skills(),
    )
    .await?)
}

fn print_report(report: &CaseReport) {
    let path = match report.path {
        Some(SkillPath::Steps) => "steps",
        Some(SkillPath::Llm) => "LLM",
        None => "not started",
    };
    let title = format!("{} › {}", report.skill, report.case);
    match &report.verdict {
        Verdict::Passed => println!(
            "PASS {title} ({path}; called {}; {} LLM call(s); {:.1} ms)",
            list(&report.tools_called),
            report.llm_calls,
            report.elapsed.as_secs_f64() * 1e3
        ),
        Verdict::Failed { failures } => {
            println!("FAIL {title} ({path})");
            for failure in failures {
                println!("       {failure}");
            }
            if let Some(result) = &report.result {
                println!("       result: {result}");
            }
        }
        Verdict::Skipped { reason } => println!("SKIP {title}: {reason}"),
    }
    if !report.auto_approved.is_empty() {
        println!("       auto-approved: {}", report.auto_approved.join(", "));
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "no tools".to_owned()
    } else {
        items.join(", ")
    }
}
