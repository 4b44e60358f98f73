//! `skillhost run` and `skillhost skills`.

use std::process::ExitCode;

use anyhow::Context;
use serde_json::{Value, json};

use skillhost::runtime::RunOutcome;
use skillhost::skills::SkillRegistry;

use super::LoadedHost;

pub async fn run(
    host: &LoadedHost,
    name: &str,
    input: &str,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let snapshot = host.skills.snapshot();
    let Some(skill) = snapshot.get(name) else {
        let known: Vec<_> = snapshot
            .skills()
            .map(|s| s.component.name().to_string())
            .collect();
        anyhow::bail!(
            "no skill named `{name}` is loaded (loaded: {})",
            known.join(", ")
        );
    };
    let input: Value = serde_json::from_str(input).context("--input is not valid JSON")?;
    let report = skill.component.run(&input, host.tools.clone()).await?;
    let calls: Vec<_> = report
        .tool_calls
        .iter()
        .map(|call| json!({ "tool": call.tool, "error": call.error }))
        .collect();
    if json {
        let (kind, value) = match &report.outcome {
            RunOutcome::Done(result) => ("done", result.clone()),
            RunOutcome::Handover(note) => ("handover", Value::String(note.clone())),
        };
        let report = json!({
            "skill": name,
            "outcome": kind,
            "result": value,
            "tool_calls": calls,
            "elapsed_us": report.elapsed.as_micros() as u64,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    for call in &report.tool_calls {
        match &call.error {
            None => eprintln!("tool {}: ok", call.tool),
            Some(error) => eprintln!("tool {}: {error}", call.tool),
        }
    }
    match report.outcome {
        RunOutcome::Done(result) => {
            println!("{}", serde_json::to_string_pretty(&result)?);
            Ok(ExitCode::SUCCESS)
        }
        RunOutcome::Handover(note) => {
            eprintln!("the steps handed over to the LLM-driven path, which `run` does not start:");
            println!("{note}");
            Ok(ExitCode::from(2))
        }
    }
}

pub fn list(skills: &SkillRegistry, json: bool) -> anyhow::Result<ExitCode> {
    let snapshot = skills.snapshot();
    if json {
        let loaded: Vec<_> = snapshot
            .skills()
            .map(|skill| {
                let manifest = skill.component.manifest();
                json!({
                    "name": manifest.name,
                    "version": manifest.version.to_string(),
                    "digest": skill.component.digest(),
                    "path": skill.path,
                    "tools": manifest.tools,
                    "unlocks": manifest.unlocks,
                    "steps": manifest.has_steps,
                    "signer": skill.signer,
                })
            })
            .collect();
        let failed: Vec<_> = snapshot.failures().collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "skills": loaded, "failed": failed }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = vec![
        [
            "NAME", "VERSION", "DIGEST", "SIGNER", "STEPS", "TOOLS", "UNLOCKS",
        ]
        .map(String::from),
    ];
    for skill in snapshot.skills() {
        let manifest = skill.component.manifest();
        rows.push([
            manifest.name.to_string(),
            manifest.version.to_string(),
            // `sha256:` and the first 12 hex digits, as container tools shorten ids.
            skill.component.digest()[..19].to_owned(),
            skill
                .signer
                .map_or_else(|| "unverified".to_owned(), |key| key.to_string()),
            if manifest.has_steps { "yes" } else { "no" }.to_owned(),
            manifest.tools.join(","),
            manifest.unlocks.join(","),
        ]);
    }
    print_table(&rows);
    for failure in snapshot.failures() {
        println!("FAILED {}: {}", failure.path.display(), failure.reason);
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints rows as left-aligned columns, each as wide as its widest cell.
fn print_table<const N: usize>(rows: &[[String; N]]) {
    let mut widths = [0; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}
