//! `skillhost inspect`: what one skill file is, read as far as it can be.
//!
//! The digest, size and signature need only the bytes; the imports and
//! exports need a compiled component; the manifest needs the component to
//! link against the host and describe itself. Each step that fails stops
//! the ones after it, and what was read before is still shown.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;
use serde_json::Value;
use wasmtime::component::types::ComponentItem;

use skillhost::runtime::{
    Limits, LoadError, Runtime, RuntimeConfig, SkillComponent, compile, digest_of,
};
use skillhost::skills::FailureKind;
use skillhost::skills::signature::{self, Fingerprint, SignatureError, SignaturePolicy, Verified};
use skillhost::tools::ToolRegistry;

use super::StandIns;
use super::config::{self, ConfigFile};
use super::sign::KeyScopes;
use super::sign::TrustArgs;

/// `skillhost inspect`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The trust store is only consulted: a file signed by an unknown key, or \
    unsigned, is still inspected (and the command succeeds). The manifest is checked against \
    the demo tools, as `skillhost skills` would load the file.\n\nExits non-zero when the \
    file is not a WebAssembly component, does not fit the skill world, or its manifest is \
    invalid; what could be read is printed all the same."
)]
pub struct InspectArgs {
    /// The skill component (.wasm) to inspect.
    file: PathBuf,
    #[command(flatten)]
    trust: TrustArgs,
    /// A config file whose [sandbox] limits apply and whose HTTP tools the
    /// skill may name (they are not called), as `skillhost skills --config`
    /// would resolve them.
    #[arg(long, value_name = "FILE", env = "SKILLHOST_CONFIG")]
    config: Option<PathBuf>,
    /// Print the report as one JSON object: file, size, digest, signature
    /// {signed, key_ids, status, signers, reason}, imports and exports
    /// [{name, kind}], manifest, error {kind, reason}; a part that could not
    /// be read is null.
    #[arg(long)]
    json: bool,
}

/// Everything read from the file.
#[derive(Serialize)]
struct Report {
    file: PathBuf,
    size: usize,
    digest: String,
    signature: SignatureReport,
    imports: Option<Vec<Item>>,
    exports: Option<Vec<Item>>,
    manifest: Option<ManifestReport>,
    error: Option<Problem>,
}

/// The manifest, as `skillhost skills --json` shows it (with the limits
/// the config file gives the skill), the number of test cases and the
/// length of the instructions.
#[derive(Serialize)]
struct ManifestReport {
    name: String,
    version: String,
    description: String,
    parameters: Value,
    tools: Vec<String>,
    unlocks: Vec<String>,
    steps: bool,
    limits: Limits,
    test_cases: usize,
    instructions_chars: usize,
}

/// The signature section and what the trust store makes of it.
#[derive(Serialize)]
struct SignatureReport {
    /// The file carries a readable signature section.
    signed: bool,
    /// The keys the signatures name (wasmsign2 key ids, which are
    /// fingerprints for keys `skillhost keygen` makes).
    key_ids: Vec<String>,
    /// `trusted`, one of [`SignatureError::kind`], `no_trust_store`, or
    /// `out_of_scope` (signed by a trusted key whose `[[trust.scopes]]`
    /// leaves this skill out).
    status: &'static str,
    /// The trusted keys that signed the file, in trust-store order.
    signers: Vec<Fingerprint>,
    /// Why the file is not trusted.
    reason: Option<String>,
}

/// One import or export of the component.
#[derive(Serialize)]
struct Item {
    name: String,
    kind: &'static str,
}

impl Item {
    fn new(name: &str, item: &ComponentItem) -> Self {
        let kind = match item {
            ComponentItem::ComponentFunc(_) => "function",
            ComponentItem::CoreFunc(_) => "core_function",
            ComponentItem::Module(_) => "module",
            ComponentItem::Component(_) => "component",
            ComponentItem::ComponentInstance(_) => "instance",
            ComponentItem::Type(_) => "type",
            ComponentItem::Resource(_) => "resource",
        };
        Self {
            name: name.to_owned(),
            kind,
        }
    }
}

/// Why the file is not a usable skill.
#[derive(Serialize)]
struct Problem {
    /// `not_a_component`, `compile`, `link` or `manifest`.
    kind: &'static str,
    reason: String,
}

pub async fn inspect(args: &InspectArgs) -> anyhow::Result<ExitCode> {
    let bytes = super::sign::read(&args.file)?;
    // Not the file's problems: these fail the command before it reports.
    let file = ConfigFile::load_or_default(args.config.as_deref())?;
    let (signature, policy) = signature_report(args, &file.key_scopes()?, &bytes);
    let mut report = Report {
        file: args.file.clone(),
        size: bytes.len(),
        digest: digest_of(&bytes),
        signature,
        imports: None,
        exports: None,
        manifest: None,
        error: None,
    };
    let runtime = Runtime::new(file.runtime_config(RuntimeConfig::default())?)
        .context("starting the sandbox")
        .map_err(config::name_sandbox_keys)?;
    let tools = StandIns::of(&file, "inspect").await?.with_fresh_shop()?;
    match read_skill(&runtime, &tools, &bytes, &mut report).await {
        Ok(skill) => {
            if let Some(policy) = &policy {
                check_scope(policy, &skill, &mut report.signature);
            }
        }
        Err(problem) => report.error = Some(problem),
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(match &report.error {
        None => ExitCode::SUCCESS,
        Some(problem) => {
            eprintln!("error: {}: {}", args.file.display(), shown(&problem.reason));
            ExitCode::FAILURE
        }
    })
}

/// What the trust store (with `scopes`) makes of the file's signature, and
/// the policy of that store when it was read.
fn signature_report(
    args: &InspectArgs,
    scopes: &KeyScopes,
    bytes: &[u8],
) -> (SignatureReport, Option<SignaturePolicy>) {
    let key_ids = signature::embedded_key_ids(bytes);
    let mut policy = None;
    let verified: Result<Verified, (&'static str, String)> = match &key_ids {
        // Unsigned or unreadable: no trust store is needed to say so.
        Err(error) => Err(refused(error)),
        Ok(_) => match args.trust.scoped_store(scopes) {
            Ok(store) => {
                let verified = store.verify(bytes).map_err(|error| refused(&error));
                policy = Some(SignaturePolicy::Require(store));
                verified
            }
            Err(error) => Err(("no_trust_store", format!("{error:#}"))),
        },
    };
    let (status, signers, reason) = match verified {
        Ok(verified) => ("trusted", verified.signers, None),
        Err((status, reason)) => (status, Vec::new(), Some(reason)),
    };
    let report = SignatureReport {
        signed: key_ids.is_ok(),
        key_ids: key_ids.unwrap_or_default(),
        status,
        signers,
        reason,
    };
    (report, policy)
}

/// Marks a file signed by a trusted key `out_of_scope` when `policy` (the
/// store with the config file's `[[trust.scopes]]`) leaves `skill` out of
/// that key's scope, as loading it would.
fn check_scope(policy: &SignaturePolicy, skill: &SkillComponent, signature: &mut SignatureReport) {
    let Some(signer) = signature.signers.first() else {
        return;
    };
    if let Err(refusal) = policy.check_skill(Some(signer), skill.manifest()) {
        signature.status = "out_of_scope";
        signature.reason = Some(refusal.to_string());
    }
}

fn refused(error: &SignatureError) -> (&'static str, String) {
    (error.kind(), error.to_string())
}

/// Compiles the file, reads its imports and exports, then links it and
/// reads its manifest (checked against `tools`), filling `report` as far
/// as it gets.
async fn read_skill(
    runtime: &Runtime,
    tools: &ToolRegistry,
    bytes: &[u8],
    report: &mut Report,
) -> Result<SkillComponent, Problem> {
    check_preamble(bytes)?;
    let component = compile(runtime, bytes.to_vec())
        .await
        .map_err(|error| load_problem(&error))?;
    let engine = runtime.engine();
    let component_type = component.component_type();
    report.imports = Some(
        component_type
            .imports(engine)
            .map(|(name, import)| Item::new(name, &import.ty))
            .collect(),
    );
    report.exports = Some(
        component_type
            .exports(engine)
            .map(|(name, export)| Item::new(name, &export.ty))
            .collect(),
    );
    let skill = SkillComponent::from_component(runtime, &component, report.digest.clone(), tools)
        .await
        .map_err(|error| load_problem(&error))?;
    let manifest = skill.manifest();
    report.manifest = Some(ManifestReport {
        name: manifest.name.to_string(),
        version: manifest.version.to_string(),
        description: manifest.description.clone(),
        parameters: manifest.parameters.clone(),
        tools: manifest.tools.clone(),
        unlocks: manifest.unlocks.clone(),
        steps: manifest.has_steps,
        limits: skill.limits(),
        test_cases: manifest.test_cases.len(),
        instructions_chars: skill.instructions().chars().count(),
    });
    Ok(skill)
}

/// Refuses, before compiling, what is plainly not a component: other
/// files, and core modules (which `skillhost pack` makes components).
fn check_preamble(bytes: &[u8]) -> Result<(), Problem> {
    let not_a_component = |reason: &str| Problem {
        kind: "not_a_component",
        reason: reason.to_owned(),
    };
    if !bytes.starts_with(b"\0asm") {
        return Err(not_a_component(
            "not a WebAssembly file: it does not start with `\\0asm`",
        ));
    }
    match bytes.get(4..8) {
        None => Err(not_a_component(
            "truncated: shorter than the 8-byte WebAssembly preamble",
        )),
        // Version 1, layer 0: a core module.
        Some([1, 0, 0, 0]) => Err(not_a_component(
            "a core WebAssembly module, not a component: skills are components of the \
             `skill` world (`skillhost pack` makes one of a module built against the guest \
             SDK)",
        )),
        Some(_) => Ok(()),
    }
}

fn load_problem(error: &LoadError) -> Problem {
    Problem {
        kind: FailureKind::from(error).name(),
        reason: error.to_string(),
    }
}

/// Text from the file as the terminal gets it: its control characters
/// escaped, so that it cannot draw lines of its own (a forged `trust:`).
fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    skillhost::text::escaped(text, skillhost::text::OUTSIDE_TEXT_BYTES)
}

fn print_report(report: &Report) {
    println!("file:        {}", report.file.display());
    println!("size:        {} bytes", report.size);
    println!("digest:      {}", report.digest);
    let signature = &report.signature;
    if signature.signed {
        let ids = if signature.key_ids.is_empty() {
            "no key named".to_owned()
        } else {
            format!("by key {}", signature.key_ids.join(", "))
        };
        println!("signature:   signed ({ids})");
    } else if signature.status == SignatureError::Unsigned.kind() {
        println!("signature:   none");
    } else {
        println!("signature:   unreadable");
    }
    match &signature.reason {
        None => {
            let signers: Vec<String> = signature.signers.iter().map(ToString::to_string).collect();
            println!("trust:       trusted: key {}", signers.join(", "));
        }
        Some(reason) => println!("trust:       NOT trusted: {}", shown(reason)),
    }
    for (title, items) in [("imports", &report.imports), ("exports", &report.exports)] {
        let Some(items) = items else { continue };
        println!("{title}:");
        let width = items.iter().map(|item| item.name.len()).max().unwrap_or(0);
        for item in items {
            println!("  {:<width$}  {}", shown(&item.name), item.kind);
        }
    }
    let Some(manifest) = &report.manifest else {
        return;
    };
    let list = |names: &[String]| {
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    };
    println!("manifest:");
    println!("  name:         {}", shown(&manifest.name));
    println!("  version:      {}", shown(&manifest.version));
    println!("  description:  {}", shown(&manifest.description));
    println!("  parameters:   {}", manifest.parameters);
    println!("  tools:        {}", list(&manifest.tools));
    println!("  unlocks:      {}", list(&manifest.unlocks));
    println!(
        "  steps:        {}",
        if manifest.steps { "yes" } else { "no" }
    );
    println!("  limits:       {}", manifest.limits);
    println!("  test cases:   {}", manifest.test_cases);
    println!("  instructions: {} characters", manifest.instructions_chars);
}
