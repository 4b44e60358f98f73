//! Guest SDK for skillhost skills.
//!
//! A skill is a WebAssembly component implementing the `skillhost:skill@0.1.0`
//! world (`wit/skill@0.1.0/skill.wit`). With this crate a skill is one function
//! that describes it, plus an optional function with deterministic steps:
//!
//! ```ignore
//! use serde::Deserialize;
//! use skillhost_skill_sdk::{Outcome, Skill, call_tool_json, json};
//!
//! fn skill() -> Skill {
//!     Skill::new("inquireOrderStatus")
//!         .description("Looks up an order and its shipment.")
//!         .parameters(json!({
//!             "type": "object",
//!             "properties": { "orderId": { "type": "string" } },
//!             "required": ["orderId"],
//!         }))
//!         .tools(["queryOrder"])
//!         .instructions(include_str!("../instructions.md"))
//! }
//!
//! #[derive(Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct Input {
//!     order_id: String,
//! }
//!
//! fn run(input: Input) -> Result<Outcome, String> {
//!     let order = call_tool_json("queryOrder", &json!({ "orderId": input.order_id }))
//!         .map_err(|e| e.to_string())?;
//!     Ok(Outcome::done(json!({ "order": order })))
//! }
//!
//! skillhost_skill_sdk::export_skill!(skill, steps: run);
//! ```
//!
//! The crate is a `cdylib` built for `wasm32-unknown-unknown` (or
//! `wasm32-wasip2`); `skill-plugins/build.sh` turns it into a component.

#![warn(missing_docs)]

// The generated bindings name their runtime by this crate's absolute path, so
// that the code `export_skill!` expands in a skill crate resolves too.
extern crate self as skillhost_skill_sdk;

mod heap;
mod skill;
mod tool;

pub mod log;

pub use serde_json::{Value, json};
pub use skill::{Outcome, Skill, TestCase};
pub use tool::{ToolError, ToolErrorKind, call_tool, call_tool_json};

/// Bindings generated from the WIT contract. Not part of the SDK's API: the
/// types a skill author sees are the ones above.
#[doc(hidden)]
#[allow(missing_docs, unused_qualifications)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "skill",
        path: "../../wit/skill@0.1.0",
        pub_export_macro: true,
        export_macro_name: "__export_skill_world",
        default_bindings_module: "skillhost_skill_sdk::bindings",
        runtime_path: "skillhost_skill_sdk::__private::wit_bindgen::rt",
    });
}

/// Exports a skill: `export_skill!(skill)` for an instructions-only skill,
/// `export_skill!(skill, steps: run)` for one with deterministic steps.
///
/// `skill` is a function returning the [`Skill`] that describes it; `run` is
/// `fn(Input) -> Result<Outcome, String>` for any `Input: Deserialize`. It
/// receives the input the caller sent (already validated against the
/// parameters by the host). An `Err` is a failure reported to the caller; to
/// let the LLM-driven path finish the job return [`Outcome::handover`].
///
/// It implements the world's `manifest`, `instructions` and `run` exports;
/// `run` calls only the steps, so describing the skill costs nothing per
/// invocation. The manifest's version defaults to the skill crate's
/// `CARGO_PKG_VERSION`. Use it once per crate, at the top level.
#[macro_export]
macro_rules! export_skill {
    ($skill:path) => {
        $crate::export_skill!(@exports $skill, false, |_input: &str| {
            $crate::__private::no_steps()
        });
    };
    ($skill:path, steps: $run:path) => {
        $crate::export_skill!(@exports $skill, true, |input: &str| {
            $crate::__private::run_steps($run, input)
        });
    };
    (@exports $skill:path, $has_steps:literal, $steps:expr) => {
        struct __SkillhostExports;

        impl $crate::bindings::Guest for __SkillhostExports {
            fn manifest() -> $crate::bindings::skillhost::skill::types::Manifest {
                $crate::__private::manifest($skill(), env!("CARGO_PKG_VERSION"), $has_steps)
            }

            fn instructions() -> ::std::string::String {
                $crate::__private::instructions($skill())
            }

            fn run(
                input: ::std::string::String,
            ) -> ::std::result::Result<
                $crate::bindings::skillhost::skill::types::RunOutcome,
                ::std::string::String,
            > {
                $crate::__private::run($steps, &input)
            }
        }

        $crate::bindings::__export_skill_world!(__SkillhostExports);
    };
}

/// Support code for [`export_skill!`]; not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;

    use serde::de::DeserializeOwned;

    use crate::bindings::skillhost::skill::types;
    use crate::log::{self, Level};
    use crate::{Outcome, Skill};

    /// The `manifest` export.
    pub fn manifest(
        skill: Skill,
        crate_version: &'static str,
        has_steps: bool,
    ) -> types::Manifest {
        install_panic_hook();
        skill.into_manifest(crate_version, has_steps)
    }

    /// The `instructions` export.
    pub fn instructions(skill: Skill) -> String {
        install_panic_hook();
        skill.instructions_text().to_owned()
    }

    /// The `run` export.
    pub fn run(
        steps: impl FnOnce(&str) -> Result<Outcome, String>,
        input: &str,
    ) -> Result<types::RunOutcome, String> {
        install_panic_hook();
        Ok(match steps(input)? {
            Outcome::Done(result) => types::RunOutcome::Done(result),
            Outcome::Handover(note) => types::RunOutcome::Handover(note),
        })
    }

    /// Deserializes `input` and runs the skill's steps on it.
    pub fn run_steps<I: DeserializeOwned>(
        run: fn(I) -> Result<Outcome, String>,
        input: &str,
    ) -> Result<Outcome, String> {
        let input = serde_json::from_str(input).map_err(|e| format!("invalid input: {e}"))?;
        run(input)
    }

    /// `run` of a skill without steps: its manifest says has-steps = false,
    /// so the host never calls it; answer anyway rather than trap.
    pub fn no_steps() -> Result<Outcome, String> {
        Ok(Outcome::handover("this skill has no deterministic steps"))
    }

    /// A panic aborts the instance (the host sees a trap); the hook sends the
    /// message to the host's log first, since wasm32 has no stderr to print it.
    fn install_panic_hook() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            std::panic::set_hook(Box::new(|info| {
                log::write(Level::Error, &format!("skill {info}"));
            }));
        });
    }
}
