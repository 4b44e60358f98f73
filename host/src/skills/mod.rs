//! Skills: manifests, the registry of loaded skills and hot reload.

pub mod manifest;
pub mod pack;
pub mod registry;
pub mod signature;
pub mod watcher;

pub use manifest::{Manifest, ManifestError, SkillName};
pub use registry::{
    FailureKind, LoadFailure, LoadProgress, LoadedSkill, MAX_SKILL_FILE_BYTES, ReloadEvent,
    ReloadOutcome, SkillRegistry, SkillSnapshot, SkillVersion,
};
pub use watcher::{WatchHandle, watch};
