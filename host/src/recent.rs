//! The latest records of something that happened, kept for a while so that
//! a client can look up how it ended, bounded whatever the traffic.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

/// How much a [`Recent`] keeps: a record goes when it is older than `age`,
/// or to make room for a newer one beyond `count` records or `bytes` of
/// their payloads. The latest always stays, however large.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeptFor {
    pub count: usize,
    pub age: Duration,
    pub bytes: usize,
}

/// Records, oldest first, each with when it was made and its payload's size.
pub(crate) struct Recent<T> {
    entries: VecDeque<Kept<T>>,
    bytes: usize,
    limits: KeptFor,
}

struct Kept<T> {
    at: SystemTime,
    bytes: usize,
    record: T,
}

impl<T> Recent<T> {
    pub(crate) fn new(limits: KeptFor) -> Self {
        Self {
            entries: VecDeque::new(),
            bytes: 0,
            limits,
        }
    }

    /// Adds `record`, made at `at`, whose payload is `bytes` long, letting
    /// the oldest go as the limits require.
    pub(crate) fn push(&mut self, record: T, at: SystemTime, bytes: usize) {
        while self.entries.len() >= self.limits.count
            || (!self.entries.is_empty() && self.bytes + bytes > self.limits.bytes)
        {
            let Some(gone) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= gone.bytes;
        }
        self.bytes += bytes;
        self.entries.push_back(Kept { at, bytes, record });
    }

    /// Every record kept, oldest first, whatever its age.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().map(|kept| &kept.record)
    }

    /// The newest record that `matches`, younger than the age limit, and
    /// when it was made.
    pub(crate) fn latest(&self, matches: impl Fn(&T) -> bool) -> Option<(&T, SystemTime)> {
        let cutoff = SystemTime::now().checked_sub(self.limits.age);
        self.entries
            .iter()
            .rev()
            .take_while(|kept| cutoff.is_none_or(|cutoff| kept.at >= cutoff))
            .find(|kept| matches(&kept.record))
            .map(|kept| (&kept.record, kept.at))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::{KeptFor, Recent};

    const LIMITS: KeptFor = KeptFor {
        count: 3,
        age: Duration::from_secs(60),
        bytes: 100,
    };

    #[test]
    fn the_newest_match_is_found_and_the_oldest_go_first() {
        let mut recent = Recent::new(LIMITS);
        let now = SystemTime::now();
        for (key, value) in [("a", 1), ("b", 2), ("a", 3), ("c", 4)] {
            recent.push((key, value), now, 10);
        }
        assert_eq!(recent.latest(|(key, _)| *key == "a").unwrap().0, &("a", 3));
        assert!(
            recent.latest(|(_, value)| *value == 1).is_none(),
            "a fourth record lets the first go"
        );
    }

    #[test]
    fn records_past_their_age_or_beyond_the_bytes_are_not_found() {
        let mut recent = Recent::new(LIMITS);
        let long_ago = SystemTime::now() - Duration::from_secs(61);
        recent.push("old", long_ago, 1);
        assert!(recent.latest(|_| true).is_none());

        recent.push("first", SystemTime::now(), 60);
        recent.push("second", SystemTime::now(), 60);
        assert!(recent.latest(|record| *record == "first").is_none());
        recent.push("huge", SystemTime::now(), 1000);
        assert_eq!(
            recent.latest(|_| true).map(|(record, _)| *record),
            Some("huge"),
            "the latest stays, however large"
        );
        assert!(recent.latest(|record| *record == "second").is_none());
    }
}
