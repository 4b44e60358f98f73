//! When to retry and how long to wait.

use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};

/// Whether a failed status is worth another attempt: 429 (rate limited) and
/// every 5xx (the server's fault, often transient).
pub(super) fn is_retryable_status(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// The wait before retry `retry` (0-based) when the server gave no
/// `Retry-After`: `base * 2^retry`, capped at `max`. Deterministic.
pub(super) fn backoff(retry: u32, base: Duration, max: Duration) -> Duration {
    let factor = 2u32.saturating_pow(retry);
    base.saturating_mul(factor).min(max)
}

/// The wait a response asks for, if any: OpenAI's `retry-after-ms`
/// (milliseconds, what its SDKs read first), else the standard
/// `Retry-After` (see [`parse_retry_after`]). Unparseable values are
/// ignored, so the caller falls back to its own backoff.
pub(super) fn requested_wait(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name| headers.get(name).and_then(|value| value.to_str().ok());
    let ms = text("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok());
    if let Some(wait) = ms.and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok()) {
        return Some(wait);
    }
    text(RETRY_AFTER.as_str()).and_then(|value| parse_retry_after(value, now))
}

/// Parses a `Retry-After` value: delay-seconds (`"2"`) or an HTTP-date
/// (`"Wed, 21 Oct 2015 07:28:00 GMT"`, measured from `now`; a date in the past
/// means "now"). Anything else is `None`.
pub(super) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    #[test]
    fn backoff_doubles_from_the_base_and_is_capped() {
        let base = Duration::from_millis(500);
        let max = Duration::from_secs(8);
        let waits: Vec<u64> = (0..7)
            .map(|n| backoff(n, base, max).as_millis() as u64)
            .collect();
        assert_eq!(waits, [500, 1000, 2000, 4000, 8000, 8000, 8000]);
        assert_eq!(backoff(u32::MAX, base, max), max);
    }

    #[test]
    fn retry_after_accepts_seconds() {
        let now = SystemTime::now();
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after(" 2 ", now), Some(Duration::from_secs(2)));
    }

    #[test]
    fn retry_after_accepts_an_http_date() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:05 GMT", now),
            Some(Duration::from_secs(5))
        );
        // A date in the past means "retry now".
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn retry_after_ignores_garbage() {
        let now = SystemTime::now();
        for value in ["", "-1", "1.5", "soon", "Wed, 99 Oct 2015 07:28:00 GMT"] {
            assert_eq!(parse_retry_after(value, now), None, "{value:?}");
        }
    }

    #[test]
    fn retry_after_ms_wins_over_retry_after() {
        let now = SystemTime::now();
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(requested_wait(&headers, now), Some(Duration::from_secs(7)));
        headers.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(
            requested_wait(&headers, now),
            Some(Duration::from_millis(250))
        );
        for garbage in ["nope", "-5", "1e400", "NaN"] {
            headers.insert("retry-after-ms", HeaderValue::from_static(garbage));
            assert_eq!(
                requested_wait(&headers, now),
                Some(Duration::from_secs(7)),
                "{garbage}"
            );
        }
        assert_eq!(requested_wait(&HeaderMap::new(), now), None);
    }

    #[test]
    fn only_429_and_5xx_are_retried() {
        assert!(is_retryable_status(StatusCode::TOO_MANY_REQUESTS));
        assert!(is_retryable_status(StatusCode::INTERNAL_SERVER_ERROR));
        assert!(is_retryable_status(StatusCode::SERVICE_UNAVAILABLE));
        assert!(!is_retryable_status(StatusCode::BAD_REQUEST));
        assert!(!is_retryable_status(StatusCode::UNAUTHORIZED));
        assert!(!is_retryable_status(StatusCode::NOT_FOUND));
    }
}
