//! Identifiers handed out to callers: unguessable, since whoever knows a
//! confirmation's id can approve it.

use std::fmt;

use rand::Rng;
use serde::{Deserialize, Serialize};

/// `prefix` + 32 hex digits (128 bits) from the thread's CSPRNG (ChaCha12,
/// seeded from the operating system): as unguessable as the OS source,
/// without a syscall per id on the request path.
pub(crate) fn random_id(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", hex::encode(bytes))
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// A fresh random id.
            pub(crate) fn random() -> Self {
                Self(random_id($prefix))
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
    };
}

id_type!(
    /// One run of the agent: `run_` + 32 hex digits.
    RunId,
    "run_"
);

id_type!(
    /// One pending confirmation: `cf_` + 32 hex digits.
    ConfirmationId,
    "cf_"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_and_distinct() {
        let a = ConfirmationId::random();
        let b = ConfirmationId::random();
        assert!(a.as_str().starts_with("cf_"));
        assert_eq!(a.as_str().len(), 3 + 32);
        assert_ne!(a, b);
        assert!(RunId::random().to_string().starts_with("run_"));
    }
}
