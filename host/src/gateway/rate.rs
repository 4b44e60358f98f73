//! Requests a minute per API key ([`RateLimits`]): each key has a bucket of
//! its rate's size, refilled evenly over the minute (GCRA, with governor), so
//! a key may send its whole minute's worth at once and then one request per
//! refill. Past it, a request is answered 429 `rate_limited` with
//! `Retry-After`, before anything runs. Without keys, every request shares
//! one bucket.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, NotUntil, Quota, RateLimiter};

use super::errors::{ApiError, ErrorType};
use super::{AppState, Principal};

/// How many requests a minute each caller of the API routes may make
/// ([`GatewayConfig::rate_limits`](super::GatewayConfig::rate_limits)).
/// The admin routes and `/healthz` are not limited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimits {
    /// Each key's requests a minute; `None`: unlimited (but for
    /// [`Self::keys`]). Without API keys, the rate of all requests together.
    pub per_key: Option<NonZeroU32>,
    /// Keys, by name ([`ApiKey::principal`](super::ApiKey::principal)), with
    /// a rate of their own.
    pub keys: BTreeMap<String, NonZeroU32>,
}

/// A request past its key's rate.
#[derive(Debug)]
pub(super) struct Limited {
    principal: Option<String>,
    rate: NonZeroU32,
    /// When the key's next request is let through.
    retry_after: Duration,
}

impl fmt::Display for Limited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.principal {
            Some(name) => write!(f, "the key `{name}`")?,
            None => f.write_str("this gateway")?,
        }
        write!(
            f,
            " may make {} requests a minute; try again in {} s",
            self.rate,
            whole_seconds(self.retry_after)
        )
    }
}

/// `wait` in whole seconds, rounded up: what `Retry-After` says.
fn whole_seconds(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

/// How many callers' buckets are kept before full ones are dropped (a
/// full bucket is what a caller not seen before gets anyway): callers an
/// application names ([`Principal`](super::Principal)) are not bounded by
/// the keys configured.
const BUCKETS_BEFORE_CLEANUP: usize = 10_000;

/// The buckets of one [`RateLimits`]: the keys with a rate of their own,
/// and one per other caller as it is first seen.
pub(super) struct Limiter {
    limits: RateLimits,
    named: HashMap<String, (NonZeroU32, Arc<DefaultDirectRateLimiter>)>,
    /// Every other caller's bucket, at [`RateLimits::per_key`].
    others: Option<Arc<Others>>,
}

/// The buckets of the callers without a rate of their own.
struct Others {
    rate: NonZeroU32,
    buckets: DefaultKeyedRateLimiter<Option<String>>,
    /// The count of buckets past which full ones are dropped.
    cleanup_at: AtomicUsize,
}

impl Limiter {
    pub(super) fn new(limits: RateLimits) -> Self {
        Self::succeeding(limits, None)
    }

    /// The buckets of `limits`, those of `before` whose rate stays going on
    /// as they are: a change of one key's rate refills no other's bucket.
    pub(super) fn succeeding(limits: RateLimits, before: Option<&Limiter>) -> Self {
        let named = limits
            .keys
            .iter()
            .map(|(name, &rate)| {
                let bucket = match before.and_then(|before| before.named.get(name)) {
                    Some((was, bucket)) if *was == rate => bucket.clone(),
                    _ => Arc::new(RateLimiter::direct(Quota::per_minute(rate))),
                };
                (name.clone(), (rate, bucket))
            })
            .collect();
        let others =
            limits.per_key.map(
                |rate| match before.and_then(|before| before.others.as_ref()) {
                    Some(others) if others.rate == rate => others.clone(),
                    _ => Arc::new(Others {
                        rate,
                        buckets: RateLimiter::keyed(Quota::per_minute(rate)),
                        cleanup_at: AtomicUsize::new(BUCKETS_BEFORE_CLEANUP),
                    }),
                },
            );
        Self {
            limits,
            named,
            others,
        }
    }

    pub(super) fn limits(&self) -> &RateLimits {
        &self.limits
    }

    /// Counts a request of `principal` (`None`: the gateway has no keys):
    /// refused when past its rate.
    pub(super) fn check(&self, principal: Option<&str>) -> Result<(), Limited> {
        let limited = |not_until: NotUntil<_>, rate| Limited {
            principal: principal.map(str::to_owned),
            rate,
            retry_after: not_until.wait_time_from(DefaultClock::default().now()),
        };
        if let Some((rate, bucket)) = principal.and_then(|name| self.named.get(name)) {
            return bucket
                .check()
                .map_err(|not_until| limited(not_until, *rate));
        }
        let Some(others) = &self.others else {
            return Ok(());
        };
        let buckets = &others.buckets;
        let checked = buckets.check_key(&principal.map(str::to_owned));
        if buckets.len() >= others.cleanup_at.load(Ordering::Relaxed) {
            buckets.retain_recent();
            let next = (buckets.len() * 2).max(BUCKETS_BEFORE_CLEANUP);
            others.cleanup_at.store(next, Ordering::Relaxed);
        }
        checked.map_err(|not_until| limited(not_until, others.rate))
    }
}

/// Counts each API request against its key's rate (the [`Principal`] the
/// key check left), refusing one past it.
pub(super) async fn rate_limit(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let principal = request
        .extensions()
        .get::<Principal>()
        .map(|p| p.0.as_str());
    match state.limiter().check(principal) {
        Ok(()) => next.run(request).await,
        Err(limited) => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorType::RateLimitError,
            "rate_limited",
            limited.to_string(),
        )
        .with_retry_after(whole_seconds(limited.retry_after))
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[test]
    fn each_key_has_its_own_bucket_of_its_own_rate() {
        let limiter = Limiter::new(RateLimits {
            per_key: Some(rate(2)),
            keys: BTreeMap::from([("batch".to_owned(), rate(3))]),
        });
        for _ in 0..2 {
            limiter.check(Some("desk")).unwrap();
        }
        let limited = limiter.check(Some("desk")).unwrap_err();
        // Two a minute: the next one refills in 30 s.
        assert!(
            (29..=30).contains(&limited.retry_after.as_secs()),
            "{limited:?}"
        );
        assert_eq!(
            limited.to_string(),
            "the key `desk` may make 2 requests a minute; try again in 30 s"
        );
        for _ in 0..3 {
            limiter.check(Some("batch")).unwrap();
        }
        assert!(limiter.check(Some("batch")).is_err());
        limiter.check(None).unwrap();
    }

    #[test]
    fn only_keys_named_are_limited_when_there_is_no_rate_for_every_key() {
        let limiter = Limiter::new(RateLimits {
            per_key: None,
            keys: BTreeMap::from([("batch".to_owned(), rate(1))]),
        });
        limiter.check(Some("batch")).unwrap();
        assert!(limiter.check(Some("batch")).is_err());
        for _ in 0..100 {
            limiter.check(Some("desk")).unwrap();
        }
    }

    #[test]
    fn a_change_of_rates_refills_only_the_buckets_whose_rate_changed() {
        let limits = |per_key, batch| RateLimits {
            per_key: Some(rate(per_key)),
            keys: BTreeMap::from([("batch".to_owned(), rate(batch))]),
        };
        let drained = |limiter: &Limiter, principal| {
            while limiter.check(Some(principal)).is_ok() {}
        };
        let before = Limiter::new(limits(2, 3));
        drained(&before, "desk");
        drained(&before, "batch");

        // batch's rate changes: its bucket starts full, desk's stays empty.
        let after = Limiter::succeeding(limits(2, 5), Some(&before));
        assert!(after.check(Some("desk")).is_err());
        for _ in 0..5 {
            after.check(Some("batch")).unwrap();
        }
        assert!(after.check(Some("batch")).is_err());

        // Every other key's rate changes: desk starts full, batch stays empty.
        let last = Limiter::succeeding(limits(4, 5), Some(&after));
        assert!(last.check(Some("batch")).is_err());
        for _ in 0..4 {
            last.check(Some("desk")).unwrap();
        }
        assert!(last.check(Some("desk")).is_err());
    }

    #[test]
    fn a_wait_is_told_in_whole_seconds_rounded_up() {
        assert_eq!(whole_seconds(Duration::from_millis(29_001)), 30);
        assert_eq!(whole_seconds(Duration::from_secs(30)), 30);
        assert_eq!(whole_seconds(Duration::ZERO), 0);
    }
}
