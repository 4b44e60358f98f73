//! Name patterns, and the skills a caller may use: an API key limited to
//! some skills, say, sees and runs only those.

use std::fmt;
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

/// The skills a run may use: every loaded one (the default), or only those
/// whose names match one of some patterns (`order_*`). Outside it, a skill
/// is neither offered to the run's model nor run when named.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillScope {
    /// `None`: every skill.
    patterns: Option<Arc<[String]>>,
}

impl SkillScope {
    /// Every skill.
    pub fn all() -> Self {
        Self::default()
    }

    /// The skills whose names match one of `patterns` (`*` stands for any
    /// run of characters). No pattern: no skill.
    pub fn only<I, S>(patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            patterns: Some(patterns.into_iter().map(Into::into).collect()),
        }
    }

    /// Whether the skill `name` is in scope.
    pub fn allows(&self, name: &str) -> bool {
        self.patterns.as_deref().is_none_or(|patterns| {
            patterns
                .iter()
                .any(|pattern| matches_pattern(pattern, name))
        })
    }

    /// Whether every skill is in scope.
    pub fn is_all(&self) -> bool {
        self.patterns.is_none()
    }

    /// The patterns, or `None` for every skill.
    pub fn patterns(&self) -> Option<&[String]> {
        self.patterns.as_deref()
    }
}

/// The patterns, comma-separated (`every skill` for all).
impl fmt::Display for SkillScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.patterns.as_deref() {
            None => f.write_str("every skill"),
            Some([]) => f.write_str("no skill"),
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
    }
}
