//! Packing round trips through the real runtime, and the error messages.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, Store};

use super::*;
use crate::runtime::bindings::Skill;
use crate::runtime::{InvokeError, Runtime, RuntimeConfig, SkillComponent};
use crate::tools::demo::{DemoDb, register_all};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/declarative")
        .join(name)
}

/// Packs `skill` and loads the component in the real runtime over the demo
/// tools.
async fn pack_and_load(skill: &DeclarativeSkill) -> (SkillComponent, Arc<ToolRegistry>) {
    let config = RuntimeConfig {
        max_concurrent_instances: 4,
        ..RuntimeConfig::default()
    };
    let runtime = Runtime::new(config).unwrap();
    let mut tools = ToolRegistry::new();
    register_all(&mut tools, Arc::new(DemoDb::in_memory().unwrap())).unwrap();
    let component = skill.to_component().unwrap();
    let loaded = SkillComponent::load(&runtime, component, &tools)
        .await
        .unwrap_or_else(|e| panic!("loading the packed component: {e}"));
    (loaded, Arc::new(tools))
}

/// The loaded component exports exactly what was packed, and running it is
/// refused: it has no steps.
async fn assert_round_trip(skill: &DeclarativeSkill, input: Value) -> SkillComponent {
    let (loaded, tools) = pack_and_load(skill).await;
    assert_eq!(
        serde_json::to_value(loaded.manifest()).unwrap(),
        serde_json::to_value(skill.manifest()).unwrap()
    );
    assert_eq!(loaded.instructions(), skill.instructions());
    assert!(!loaded.manifest().has_steps);
    let refused = loaded.run(&input, tools).await.unwrap_err();
    assert!(matches!(refused, InvokeError::NoSteps { .. }), "{refused}");
    loaded
}

#[tokio::test]
async fn yaml_skill_round_trips_through_the_runtime() {
    let skill = DeclarativeSkill::read(&fixture("process-refund.yaml")).unwrap();
    let input = json!({ "orderId": "88231", "reason": "quality problem" });
    let loaded = assert_round_trip(&skill, input).await;

    let manifest = loaded.manifest();
    assert_eq!(manifest.name.as_str(), "processRefund");
    assert_eq!(manifest.version.to_string(), "1.0.0");
    assert!(manifest.description.starts_with("Refund handling: checks"));
    assert_eq!(manifest.tools, ["queryOrder", "applyRefund"]);
    assert!(manifest.unlocks.is_empty());
    assert_eq!(
        manifest.parameters["required"],
        json!(["orderId", "reason"])
    );
    assert_eq!(
        manifest.parameters["properties"]["orderId"]["type"],
        json!("string")
    );
    let cases = &manifest.test_cases;
    assert_eq!(cases.len(), 2);
    assert_eq!(cases[0].name, "refund a delivered order");
    assert_eq!(
        cases[0].input,
        json!({ "orderId": "88231", "reason": "quality problem" })
    );
    assert_eq!(cases[0].expect_tools, ["queryOrder", "applyRefund"]);
    assert_eq!(cases[0].expect_contains, ["RF"]);
    let instructions = loaded.instructions();
    assert!(instructions.starts_with("You are the refund specialist of Bit Select."));
    assert!(instructions.ends_with("the expected arrival time of the refund.\n"));
}

#[tokio::test]
async fn skill_md_round_trips_through_the_runtime() {
    let skill = DeclarativeSkill::read(&fixture("order-lookup/SKILL.md")).unwrap();
    let input = json!({ "request": "where is order 88231?" });
    let loaded = assert_round_trip(&skill, input).await;

    let manifest = loaded.manifest();
    assert_eq!(manifest.name.as_str(), "order-lookup");
    assert_eq!(manifest.version.to_string(), "1.1.0");
    assert!(manifest.description.starts_with("Looks up an order"));
    assert_eq!(manifest.tools, ["queryOrder", "queryLogistics"]);
    assert_eq!(
        manifest.parameters,
        json!({
            "type": "object",
            "properties": {
                "request": { "type": "string", "description": "What the user asked for" }
            },
            "required": ["request"]
        })
    );
    assert!(manifest.test_cases.is_empty());
    let instructions = loaded.instructions();
    assert!(instructions.starts_with("# Order lookup\n\nYou answer questions"));
    assert!(instructions.ends_with("with the carrier's name."));
}

#[tokio::test]
async fn the_run_export_answers_with_an_error_even_for_a_large_input() {
    let skill = DeclarativeSkill::read(&fixture("process-refund.yaml")).unwrap();
    let component = skill.to_component().unwrap();
    // A plain engine: the host refuses `run` before calling the guest, so
    // this is the only way to reach the export.
    let engine = Engine::new(Config::new().wasm_component_model(true)).unwrap();
    let component = Component::new(&engine, component).unwrap();
    let mut store = Store::new(&engine, ());
    let instance = Skill::instantiate_async(&mut store, &component, &Linker::new(&engine))
        .await
        .unwrap();
    // 300 KB needs `cabi_realloc` to grow the memory by several pages.
    for input in ["{}".to_owned(), "x".repeat(300_000)] {
        let result = instance.call_run(&mut store, &input).await.unwrap();
        assert_eq!(result.err().as_deref(), Some(NO_STEPS));
    }
    let first = instance.call_manifest(&mut store).await.unwrap();
    let second = instance.call_manifest(&mut store).await.unwrap();
    assert_eq!(first.name, second.name);
    assert_eq!(first.test_cases.len(), second.test_cases.len());
}

#[test]
fn packing_is_deterministic() {
    for file in ["process-refund.yaml", "order-lookup/SKILL.md"] {
        let first = DeclarativeSkill::read(&fixture(file)).unwrap();
        let second = DeclarativeSkill::read(&fixture(file)).unwrap();
        assert_eq!(
            first.to_component().unwrap(),
            second.to_component().unwrap(),
            "{file}"
        );
    }
}

/// A core module naming the skill world is wrapped into the component a
/// host loads; its manifest reads back with stand-ins for tools no registry
/// here has.
#[tokio::test]
async fn a_core_module_naming_the_skill_world_becomes_a_loadable_component() {
    let yaml = MINIMAL_YAML.replace("[queryOrder]", "[crm_lookup]");
    let skill = DeclarativeSkill::parse(&yaml, Format::Yaml, Path::new("s.yaml")).unwrap();
    let module = skill.to_module().unwrap();
    assert!(!wasmparser::Parser::is_component(&module));
    let component = componentize(&module).unwrap();
    assert_eq!(component, skill.to_component().unwrap());

    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let loaded = SkillComponent::load_with(&runtime, component, stand_in_tools)
        .await
        .unwrap();
    assert_eq!(loaded.manifest().tools, ["crm_lookup"]);
    let no_tools = ToolRegistry::new();
    let unknown = SkillComponent::load(&runtime, skill.to_component().unwrap(), &no_tools).await;
    assert!(unknown.is_err(), "without stand-ins its tool is unknown");
}

/// What cannot be made a skill component says why.
#[test]
fn componentize_refuses_what_is_no_core_module_of_a_world() {
    let skill = DeclarativeSkill::parse(MINIMAL_YAML, Format::Yaml, Path::new("s.yaml")).unwrap();
    let bare_module = wat::parse_str("(module (memory 1))").unwrap();
    let exports_nothing = {
        let mut module = bare_module.clone();
        let mut resolve = wit_parser::Resolve::default();
        let package = resolve.push_str("skill.wit", crate::SKILL_WIT).unwrap();
        let world = resolve.select_world(&[package], Some("skill")).unwrap();
        wit_component::embed_component_metadata(
            &mut module,
            &resolve,
            world,
            wit_component::StringEncoding::UTF8,
        )
        .unwrap();
        module
    };
    for (bytes, expected) in [
        (b"PK\x03\x04".to_vec(), "not a WebAssembly module"),
        (
            skill.to_component().unwrap(),
            "already a component: sign it as it is",
        ),
        (bare_module, "the module names no world"),
        (exports_nothing, "manifest"),
    ] {
        let error = componentize(&bytes).unwrap_err().to_string();
        assert!(error.contains(expected), "{expected}: {error}");
    }
}

const MINIMAL_YAML: &str = "\
name: lookup
description: Looks up an order.
tools: [queryOrder]
parameters:
  type: object
  properties:
    orderId: {type: string}
instructions: Look the order up.
";

/// What a refused input reports.
#[derive(Debug)]
struct Refusal {
    at: Position,
    problem: Problem,
    /// The whole message, with the file name.
    message: String,
}

/// Parses `text`, which must be refused, and checks that the message
/// starts with `file:line:column: `.
fn refuse(text: &str, format: Format) -> Refusal {
    let file = match format {
        Format::Yaml => "skill.yaml",
        Format::SkillMd => "SKILL.md",
    };
    let error = DeclarativeSkill::parse(text, format, Path::new(file)).unwrap_err();
    let message = error.to_string();
    let PackError::Invalid { at, problem, .. } = error else {
        panic!("not an input error: {message}")
    };
    assert!(
        message.starts_with(&format!("{file}:{}:{}: ", at.line, at.column)),
        "{message}"
    );
    Refusal {
        at,
        problem,
        message,
    }
}

fn yaml_refusal(text: &str) -> Refusal {
    refuse(text, Format::Yaml)
}

/// The manifest error and field of a refusal.
fn manifest_problem(refusal: &Refusal) -> (&str, &ManifestError) {
    match &refusal.problem {
        Problem::Manifest { field, error } => (field, error),
        other => panic!("not a manifest problem: {other}"),
    }
}

#[test]
fn the_minimal_yaml_is_valid() {
    let skill =
        DeclarativeSkill::parse(MINIMAL_YAML, Format::Yaml, Path::new("skill.yaml")).unwrap();
    assert_eq!(skill.manifest().version.to_string(), DEFAULT_VERSION);
}

#[test]
fn a_missing_name_is_named_at_the_mapping() {
    let refusal = yaml_refusal(&MINIMAL_YAML.replace("name: lookup\n", "# no name\n"));
    assert!(matches!(refusal.problem, Problem::MissingField("name")));
    assert_eq!(refusal.at, Position { line: 2, column: 1 });
    assert_eq!(
        refusal.message,
        "skill.yaml:2:1: missing required field `name`"
    );
}

#[test]
fn an_unknown_field_is_named_with_its_line() {
    let text = format!("{MINIMAL_YAML}tool_ids: [cancel_order]\n");
    let refusal = yaml_refusal(&text);
    assert!(matches!(refusal.problem, Problem::Yaml(_)));
    assert_eq!(refusal.at.line, 9);
    assert!(
        refusal.message.contains("unknown field `tool_ids`"),
        "{}",
        refusal.message
    );
    assert!(refusal.message.contains("unlocks"), "{}", refusal.message);
}

#[test]
fn an_invalid_schema_is_reported_at_the_parameters() {
    let text = MINIMAL_YAML.replace("orderId: {type: string}", "orderId: {type: 12}");
    let refusal = yaml_refusal(&text);
    let (field, error) = manifest_problem(&refusal);
    assert_eq!(field, "parameters");
    assert!(
        matches!(error, ManifestError::ParametersNotSchema(_)),
        "{error}"
    );
    assert_eq!(refusal.at.line, 5);
    assert!(
        refusal
            .message
            .contains("parameters is not a valid JSON Schema"),
        "{}",
        refusal.message
    );

    let text = MINIMAL_YAML.replace("  type: object", "  type: string");
    let refusal = yaml_refusal(&text);
    let (field, error) = manifest_problem(&refusal);
    assert_eq!(field, "parameters");
    assert!(
        matches!(error, ManifestError::ParametersNotObject),
        "{error}"
    );
}

#[test]
fn malformed_yaml_is_reported_with_its_line() {
    // A plain scalar cannot hold ": ".
    let text = MINIMAL_YAML.replace("Looks up an order.", "Looks up: an order.");
    let refusal = yaml_refusal(&text);
    assert!(matches!(refusal.problem, Problem::Yaml(_)));
    assert_eq!(refusal.at.line, 2, "{}", refusal.message);

    // The unclosed list runs on until `parameters:` cannot be in it.
    let refusal = yaml_refusal(&MINIMAL_YAML.replace("[queryOrder]", "[queryOrder"));
    assert_eq!(
        refusal.message,
        "skill.yaml:4:11: illegal placement of ':' indicator"
    );

    let refusal = yaml_refusal(&MINIMAL_YAML.replace("tools: [queryOrder]", "tools: queryOrder"));
    assert!(matches!(refusal.problem, Problem::Yaml(_)));
    assert_eq!(refusal.at.line, 3);

    let refusal = yaml_refusal("");
    assert!(matches!(refusal.problem, Problem::MissingField("name")));
    assert_eq!(refusal.at.line, 1);
}

#[test]
fn manifest_rules_name_the_field_and_line() {
    let refusal = yaml_refusal(&MINIMAL_YAML.replace("name: lookup", "name: look up"));
    let (field, error) = manifest_problem(&refusal);
    assert_eq!((field, refusal.at.line), ("name", 1));
    assert!(matches!(error, ManifestError::InvalidName(_)));

    let refusal = yaml_refusal(&format!("{MINIMAL_YAML}version: \"1.0\"\n"));
    let (field, error) = manifest_problem(&refusal);
    assert_eq!((field, refusal.at.line), ("version", 9));
    assert!(matches!(error, ManifestError::InvalidVersion { .. }));

    let text = MINIMAL_YAML.replace(
        "tools: [queryOrder]",
        "tools:\n  - queryOrder\n  - applyRefund\n  - queryOrder",
    );
    let refusal = yaml_refusal(&text);
    let (field, error) = manifest_problem(&refusal);
    assert_eq!((field, refusal.at.line), ("tools[2]", 6));
    assert!(matches!(error, ManifestError::DuplicateTool { .. }));

    // Regression (found by fuzzing): a name no tool can have made the
    // packer panic registering its stand-in.
    for bad in ["queryOrder$queryLogistics", "load_skill"] {
        let refusal =
            yaml_refusal(&MINIMAL_YAML.replace("tools: [queryOrder]", &format!("tools: [{bad}]")));
        let (field, error) = manifest_problem(&refusal);
        assert_eq!(field, "tools[0]");
        assert!(
            matches!(error, ManifestError::InvalidToolName { .. }),
            "{error}"
        );
        assert!(
            refusal.message.contains("cannot be a tool's name"),
            "{}",
            refusal.message
        );
    }

    let refusal = yaml_refusal(&MINIMAL_YAML.replace("Look the order up.", "\"  \""));
    assert!(matches!(refusal.problem, Problem::EmptyInstructions(_)));
    assert_eq!(refusal.at.line, 8);
}

#[test]
fn test_cases_are_checked_against_the_parameters() {
    let text = format!(
        "{MINIMAL_YAML}\
test_cases:
  - name: fine
    input: {{orderId: \"88231\"}}
  - input: {{orderId: 88231}}
  - name: no input
    expect_tools: [queryOrder]
"
    );
    let refusal = yaml_refusal(&text);
    assert!(matches!(refusal.problem, Problem::MissingField("input")));
    assert_eq!(refusal.at.line, 13);

    let (with_input, _) = text.split_once("  - name: no input").unwrap();
    let refusal = yaml_refusal(with_input);
    let (field, error) = manifest_problem(&refusal);
    assert_eq!((field, refusal.at.line), ("test_cases[1]", 12));
    let ManifestError::InvalidTestCase { case, .. } = error else {
        panic!("{error}")
    };
    assert_eq!(case, "case 2");
    assert!(
        refusal.message.contains("is not of type"),
        "{}",
        refusal.message
    );
}

#[test]
fn yaml_1_1_booleans_stay_text() {
    let text = format!("{MINIMAL_YAML}test_cases:\n  - input: {{orderId: \"1\", gift: no}}\n")
        .replace(
            "orderId: {type: string}",
            "orderId: {type: string}\n    gift: {type: string}",
        );
    let skill = DeclarativeSkill::parse(&text, Format::Yaml, Path::new("skill.yaml")).unwrap();
    assert_eq!(skill.manifest().test_cases[0].input["gift"], json!("no"));
}

const MINIMAL_SKILL_MD: &str = "\
---
name: order-lookup
description: Looks up an order.
allowed-tools: queryOrder, queryLogistics  searchKnowledge
---

Look the order up.
";

#[test]
fn skill_md_defaults_and_tool_lists() {
    let skill =
        DeclarativeSkill::parse(MINIMAL_SKILL_MD, Format::SkillMd, Path::new("SKILL.md")).unwrap();
    let manifest = skill.manifest();
    assert_eq!(
        manifest.tools,
        ["queryOrder", "queryLogistics", "searchKnowledge"]
    );
    assert_eq!(manifest.version.to_string(), DEFAULT_VERSION);
    assert_eq!(manifest.parameters["required"], json!(["request"]));
    assert_eq!(skill.instructions(), "Look the order up.");

    let listed = MINIMAL_SKILL_MD.replace(
        "queryOrder, queryLogistics  searchKnowledge",
        "[queryOrder, queryLogistics]",
    );
    let skill = DeclarativeSkill::parse(&listed, Format::SkillMd, Path::new("SKILL.md")).unwrap();
    assert_eq!(skill.manifest().tools, ["queryOrder", "queryLogistics"]);
}

#[test]
fn skill_md_errors_give_file_lines() {
    let refusal = refuse("# Order lookup\n\nNo front matter.\n", Format::SkillMd);
    assert!(matches!(refusal.problem, Problem::NoFrontMatter));
    assert_eq!(refusal.at, Position { line: 1, column: 1 });

    let unclosed = MINIMAL_SKILL_MD.replacen("---\n\n", "\n", 1);
    let refusal = refuse(&unclosed, Format::SkillMd);
    assert!(matches!(refusal.problem, Problem::UnclosedFrontMatter));

    // Front matter lines are counted from the top of the file.
    let unknown = MINIMAL_SKILL_MD.replace("---\n\n", "tags: [orders]\n---\n\n");
    let refusal = refuse(&unknown, Format::SkillMd);
    assert!(
        refusal.message.contains("unknown field `tags`"),
        "{}",
        refusal.message
    );
    assert_eq!(refusal.at.line, 5);

    let nameless = MINIMAL_SKILL_MD.replace("name: order-lookup\n", "");
    let refusal = refuse(&nameless, Format::SkillMd);
    assert!(matches!(refusal.problem, Problem::MissingField("name")));
    assert_eq!(refusal.at.line, 2);

    let refusal = refuse(
        &MINIMAL_SKILL_MD.replace(
            "allowed-tools: queryOrder, queryLogistics  searchKnowledge",
            "allowed-tools: 3",
        ),
        Format::SkillMd,
    );
    assert!(
        refusal.message.contains("tool names"),
        "{}",
        refusal.message
    );
    assert_eq!(refusal.at.line, 4);

    let twice = MINIMAL_SKILL_MD.replace(
        "---\n\n",
        "version: 1.0.0\nmetadata:\n  version: 1.0.0\n---\n\n",
    );
    let refusal = refuse(&twice, Format::SkillMd);
    assert!(matches!(refusal.problem, Problem::TwoVersions));
    assert_eq!(refusal.at.line, 7);

    let empty = MINIMAL_SKILL_MD.replace("Look the order up.\n", "\n  \n");
    let refusal = refuse(&empty, Format::SkillMd);
    assert!(matches!(refusal.problem, Problem::EmptyInstructions(_)));
    assert!(
        refusal.message.contains("Markdown body"),
        "{}",
        refusal.message
    );
}

#[test]
fn only_known_extensions_are_packed() {
    assert_eq!(Format::of(Path::new("a/skill.YML")), Some(Format::Yaml));
    assert_eq!(Format::of(Path::new("a/SKILL.md")), Some(Format::SkillMd));
    let error = DeclarativeSkill::read(Path::new("skill.json")).unwrap_err();
    assert!(matches!(error, PackError::UnknownFormat { .. }), "{error}");
}
