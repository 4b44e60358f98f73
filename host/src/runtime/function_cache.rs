//! Cranelift's incremental compilation cache, kept in memory.
//!
//! Wasmtime compiles a component function by function; with this store,
//! Cranelift first looks each function up by the SHA-256 of its code together
//! with the compiler's version, target and settings, and reuses the machine
//! code when it has compiled the same function before. Skills share most of
//! their code (std, serde, the SDK), and a new version of a skill differs from
//! the old one in a few functions, so a reload compiles only what changed.
//!
//! Bounded by bytes, with two generations as a cheap approximation of LRU:
//! new entries go to the young generation; when it is full it becomes the
//! old one (dropping the previous old one), and a hit in the old generation
//! moves the entry back to the young one.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use wasmtime::CacheStore;

#[derive(Debug)]
pub(super) struct FunctionCache {
    /// Bytes of compiled code each generation may hold: half the budget.
    generation_bytes: usize,
    generations: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    young: HashMap<Vec<u8>, Vec<u8>>,
    young_bytes: usize,
    old: HashMap<Vec<u8>, Vec<u8>>,
}

impl FunctionCache {
    /// A cache holding at most about `max_bytes` of compiled functions.
    pub(super) fn new(max_bytes: usize) -> Self {
        Self {
            generation_bytes: max_bytes / 2,
            generations: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        // The maps stay consistent even if a holder panicked.
        self.generations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Generations {
    fn insert_young(&mut self, key: Vec<u8>, value: Vec<u8>, generation_bytes: usize) {
        if self.young_bytes + value.len() > generation_bytes {
            self.old = std::mem::take(&mut self.young);
            self.young_bytes = 0;
        }
        self.young_bytes += value.len();
        if let Some(replaced) = self.young.insert(key, value) {
            self.young_bytes -= replaced.len();
        }
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let mut generations = self.lock();
        if let Some(value) = generations.young.get(key) {
            return Some(Cow::Owned(value.clone()));
        }
        let value = generations.old.remove(key)?;
        let copy = value.clone();
        generations.insert_young(key.to_vec(), value, self.generation_bytes);
        Some(Cow::Owned(copy))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        if value.len() > self.generation_bytes {
            return false;
        }
        self.lock()
            .insert_young(key.to_vec(), value, self.generation_bytes);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_return_what_was_inserted() {
        let cache = FunctionCache::new(1024);
        assert!(cache.insert(b"f", vec![1, 2, 3]));
        assert_eq!(cache.get(b"f").as_deref(), Some(&[1, 2, 3][..]));
        assert_eq!(cache.get(b"g"), None);
    }

    #[test]
    fn memory_stays_within_the_budget_and_recent_entries_survive() {
        let cache = FunctionCache::new(100);
        for key in 0u8..20 {
            cache.insert(&[key], vec![key; 10]);
        }
        let generations = cache.lock();
        let held: usize = generations
            .young
            .values()
            .chain(generations.old.values())
            .map(Vec::len)
            .sum();
        assert!(held <= 100, "holds {held} bytes");
        drop(generations);
        assert!(cache.get(&[19]).is_some(), "the newest entry was evicted");
        assert_eq!(cache.get(&[0]), None, "the oldest entry is still held");
    }

    #[test]
    fn a_hit_in_the_old_generation_is_kept_through_the_next_turnover() {
        let cache = FunctionCache::new(40);
        cache.insert(b"a", vec![0; 10]);
        cache.insert(b"b", vec![0; 10]);
        // Turnover: a and b move to the old generation.
        cache.insert(b"c", vec![0; 10]);
        assert!(cache.get(b"a").is_some());
        // Turnover: the young generation (c, a) becomes old; b is dropped.
        cache.insert(b"d", vec![0; 10]);
        assert!(cache.get(b"a").is_some());
        assert_eq!(cache.get(b"b"), None);
    }

    #[test]
    fn entries_larger_than_a_generation_are_refused() {
        let cache = FunctionCache::new(10);
        assert!(!cache.insert(b"big", vec![0; 6]));
        assert_eq!(cache.get(b"big"), None);
    }
}
