//! Name patterns, and the skills and tools a caller may use: an API key
//! limited to some skills, say, sees and runs only those.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// Whether `name` matches `pattern`, whose `*`s stand for any run of
/// characters (none included).
pub fn matches_pattern(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let Some(last) = parts.next_back() else {
        // No `*`: the whole name.
        return rest.is_empty();
    };
    for part in parts {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The names of one kind — skills, tools — a run may use: every one (the
/// default), or only those matching one of some patterns (`order_*`).
/// [`SkillScope`] and [`ToolScope`].
pub struct Scope<K> {
    /// `None`: every name.
    patterns: Option<Arc<[String]>>,
    kind: PhantomData<fn() -> K>,
}

/// What a [`Scope`] limits.
pub trait ScopeKind {
    /// One of them, for the scope's description (`skill`).
    const NOUN: &'static str;
}

/// The skills a run may use: outside it, a skill is neither offered to the
/// run's model nor run when named.
pub type SkillScope = Scope<Skills>;

/// The tools a run's main agent may be offered and call itself: outside
/// it, a tool is never offered (not even once a skill unlocks it) and
/// refused when called. A skill's steps and sub-agent call the tools
/// their manifest declares whatever it says: the skill scope decides
/// which skills run.
pub type ToolScope = Scope<Tools>;

/// The kind of a [`SkillScope`].
#[derive(Debug)]
pub enum Skills {}

/// The kind of a [`ToolScope`].
#[derive(Debug)]
pub enum Tools {}

impl ScopeKind for Skills {
    const NOUN: &'static str = "skill";
}

impl ScopeKind for Tools {
    const NOUN: &'static str = "tool";
}

impl<K> Scope<K> {
    /// Every name.
    pub fn all() -> Self {
        Self {
            patterns: None,
            kind: PhantomData,
        }
    }

    /// The names that match one of `patterns` (`*` stands for any run of
    /// characters). No pattern: none.
    pub fn only<I, S>(patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            patterns: Some(patterns.into_iter().map(Into::into).collect()),
            kind: PhantomData,
        }
    }

    /// Every name without `patterns`, else those that match one.
    pub fn of(patterns: Option<Vec<String>>) -> Self {
        patterns.map_or_else(Self::all, Self::only)
    }

    /// Whether `name` is in scope.
    pub fn allows(&self, name: &str) -> bool {
        self.patterns.as_deref().is_none_or(|patterns| {
            patterns
                .iter()
                .any(|pattern| matches_pattern(pattern, name))
        })
    }

    /// Whether every name is in scope.
    pub fn is_all(&self) -> bool {
        self.patterns.is_none()
    }

    /// The patterns, or `None` for every name.
    pub fn patterns(&self) -> Option<&[String]> {
        self.patterns.as_deref()
    }
}

impl<K> Default for Scope<K> {
    fn default() -> Self {
        Self::all()
    }
}

impl<K> Clone for Scope<K> {
    fn clone(&self) -> Self {
        Self {
            patterns: self.patterns.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> PartialEq for Scope<K> {
    fn eq(&self, other: &Self) -> bool {
        self.patterns == other.patterns
    }
}

impl<K> Eq for Scope<K> {}

impl<K: ScopeKind> fmt::Debug for Scope<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}Scope({self})", K::NOUN)
    }
}

/// The patterns, comma-separated (`every skill` for all).
impl<K: ScopeKind> fmt::Display for Scope<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.patterns.as_deref() {
            None => write!(f, "every {}", K::NOUN),
            Some([]) => write!(f, "no {}", K::NOUN),
            Some(patterns) => f.write_str(&patterns.join(", ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_star_stands_for_any_run_of_characters() {
        for (pattern, name) in [
            ("vendor_*", "vendor_refund"),
            ("vendor_*", "vendor_"),
            ("*", "anything"),
            ("*Order*", "inquireOrderStatus"),
            ("a*b*c", "abc"),
            ("a*b*c", "axxbyyc"),
            ("processRefund", "processRefund"),
        ] {
            assert!(matches_pattern(pattern, name), "{pattern} ~ {name}");
        }
        for (pattern, name) in [
            ("vendor_*", "other_refund"),
            ("processRefund", "processRefundV2"),
            ("*Order", "inquireOrderStatus"),
            ("a*b*c", "acb"),
            ("a*a", "a"),
        ] {
            assert!(!matches_pattern(pattern, name), "{pattern} !~ {name}");
        }
    }

    #[test]
    fn a_scope_allows_the_names_its_patterns_match() {
        assert!(SkillScope::all().allows("anything"));
        let scope = SkillScope::only(["inquireOrderStatus", "order_*"]);
        assert!(scope.allows("inquireOrderStatus"));
        assert!(scope.allows("order_change"));
        assert!(!scope.allows("processRefund"));
        assert!(!SkillScope::only(Vec::<String>::new()).allows("processRefund"));
        assert_eq!(scope.to_string(), "inquireOrderStatus, order_*");
        assert_eq!(ToolScope::all().to_string(), "every tool");
        assert_eq!(ToolScope::only(Vec::<String>::new()).to_string(), "no tool");
    }
}
