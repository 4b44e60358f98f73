//! What a trusted key may sign: a limit on the skills it vouches for, so
//! that a key handed to one team or vendor cannot sign a skill that calls
//! another's tools, or takes another's skill names.

use super::{Fingerprint, SignaturePolicy, UntrustedSigner};
use crate::scope::matches_pattern;
use crate::skills::Manifest;

/// The skills a key may sign. A key without a scope signs any skill.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyScope {
    /// Patterns one of which a skill's name must match (`*` stands for any
    /// run of characters: `vendor_*`); `None`: any name.
    pub skills: Option<Vec<String>>,
    /// The only tools its skills may call or unlock; `None`: any tool.
    pub tools: Option<Vec<String>>,
}

impl KeyScope {
    /// Why `manifest` is outside this scope, if it is.
    fn refuse(&self, manifest: &Manifest) -> Option<String> {
        let name = manifest.name.as_str();
        if let Some(patterns) = &self.skills
            && !patterns
                .iter()
                .any(|pattern| matches_pattern(pattern, name))
        {
            return Some(format!(
                "its name `{name}` matches none of the names the key may sign ({})",
                patterns.join(", ")
            ));
        }
        let tools = self.tools.as_ref()?;
        let (field, tool) = [("calls", &manifest.tools), ("unlocks", &manifest.unlocks)]
            .into_iter()
            .find_map(|(field, declared)| {
                let beyond = declared.iter().find(|tool| !tools.contains(tool))?;
                Some((field, beyond))
            })?;
        Some(format!(
            "it {field} `{tool}`, not among the tools the key may sign for ({})",
            if tools.is_empty() {
                "none".to_owned()
            } else {
                tools.join(", ")
            }
        ))
    }
}

/// Why a skill is not admitted: its signer is not trusted, or the key does
/// not vouch for what it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAdmitted {
    #[error(transparent)]
    Signer(#[from] UntrustedSigner),
    /// Outside the scope of its signer's key ([`KeyScope`]).
    #[error("key {key} may not sign this skill: {why}")]
    OutOfScope { key: Fingerprint, why: String },
}

impl SignaturePolicy {
    /// Whether a skill signed by `signer` (as verified, or recorded when it
    /// loaded) is admitted: its signer trusted
    /// ([`SignaturePolicy::check_signer`]) and the skill, as its manifest
    /// says, within the scope of that key.
    pub fn check_skill(
        &self,
        signer: Option<&Fingerprint>,
        manifest: &Manifest,
    ) -> Result<(), NotAdmitted> {
        self.check_signer(signer)?;
        let (Self::Require(store), Some(key)) = (self, signer) else {
            return Ok(());
        };
        match store.scope_of(key).and_then(|scope| scope.refuse(manifest)) {
            Some(why) => Err(NotAdmitted::OutOfScope { key: *key, why }),
            None => Ok(()),
        }
    }
}
