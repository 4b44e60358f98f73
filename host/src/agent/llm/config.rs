//! Where the LLM is and how patiently to talk to it.

use std::fmt;
use std::time::Duration;

/// `OPENAI_BASE_URL`: the server's API root, the name OpenAI's own clients read.
pub const ENV_BASE_URL: &str = "OPENAI_BASE_URL";
/// `OPENAI_API_KEY`: sent as `Authorization: Bearer <key>` when set.
pub const ENV_API_KEY: &str = "OPENAI_API_KEY";
/// `SKILLHOST_MODEL`: the model name; without it no LLM is configured.
pub const ENV_MODEL: &str = "SKILLHOST_MODEL";

/// The base URL used when `OPENAI_BASE_URL` is not set.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// How to configure an LLM, for messages that say none is.
pub const HOW_TO_CONFIGURE: &str = "set SKILLHOST_MODEL to the model name (e.g. gpt-4o-mini, \
    qwen-plus, llama3.1), OPENAI_BASE_URL to the server's API root when it is not \
    https://api.openai.com/v1 (e.g. http://localhost:11434/v1 for Ollama, \
    https://dashscope.aliyuncs.com/compatible-mode/v1 for DashScope), and OPENAI_API_KEY \
    when the server needs a key";

/// Why no usable LLM configuration could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No LLM is configured: a required setting is absent. This is a normal
    /// state for a host that runs only deterministic skills; the message says
    /// how to configure one.
    #[error("no LLM configured: {missing} is not set; {HOW_TO_CONFIGURE}")]
    NotConfigured {
        /// The environment variable (or setting) that is missing.
        missing: &'static str,
    },
    /// A setting is present but unusable.
    #[error("invalid LLM configuration: {field}: {reason}")]
    Invalid {
        /// The setting at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// How to reach an OpenAI-compatible chat-completions server.
///
/// Build one with [`LlmConfig::new`] (every default documented on its field)
/// or [`LlmConfig::from_env`], then adjust the public fields.
#[derive(Clone, PartialEq, Eq)]
pub struct LlmConfig {
    /// The API root; requests go to `{base_url}/chat/completions`. A trailing
    /// `/` is ignored. Must be `http` or `https`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>`. `None` sends no header (local
    /// servers such as Ollama or llama.cpp need none). Redacted in `Debug`.
    pub api_key: Option<String>,
    /// The `model` field of every request.
    pub model: String,
    /// Time allowed to establish a connection (TCP and TLS). Default: 10 s.
    pub connect_timeout: Duration,
    /// Time allowed for a whole attempt, from connecting until the last byte
    /// of the response (the full stream, when streaming). Default: 120 s.
    pub request_timeout: Duration,
    /// Retries after the first attempt fails with 429, a 5xx status or a
    /// connection error; other failures are never retried. Default: 3 (so
    /// at most 4 attempts).
    pub max_retries: u32,
    /// Wait before retry `n` (0-based) when the server sends no
    /// `Retry-After`: `backoff_base * 2^n`, capped at `backoff_max`.
    /// Deterministic, no jitter. Default: 500 ms (0.5 s, 1 s, 2 s, ...).
    pub backoff_base: Duration,
    /// Upper bound of the exponential backoff. Default: 8 s.
    pub backoff_max: Duration,
    /// Upper bound of a server-requested wait (`Retry-After`,
    /// `retry-after-ms`): a longer request is shortened to this, so one call
    /// can never hang on a server's say-so. Default: 30 s.
    pub max_retry_after: Duration,
    /// Whether calls stream (SSE) unless a request says otherwise. Default:
    /// `false`, the path every compatible server implements fully.
    pub stream: bool,
}

impl LlmConfig {
    /// A configuration for `model` at `base_url` with every other setting at
    /// its documented default.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            model: model.into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(120),
            max_retries: 3,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(30),
            stream: false,
        }
    }

    /// Reads `OPENAI_BASE_URL` (default [`DEFAULT_BASE_URL`]),
    /// `OPENAI_API_KEY` and `SKILLHOST_MODEL` from the process environment.
    /// See [`LlmConfig::from_lookup`].
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Builds a configuration from variables looked up by `lookup` (the
    /// environment, a config file, a test's map). Empty values count as
    /// unset.
    ///
    /// Fails with [`ConfigError::NotConfigured`] when `SKILLHOST_MODEL` is
    /// unset, or when the base URL is OpenAI's and `OPENAI_API_KEY` is unset
    /// (OpenAI refuses every keyless call, so failing here is clearer than a
    /// 401 later). Fails with [`ConfigError::Invalid`] on an unusable URL.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
        let model = get(ENV_MODEL).ok_or(ConfigError::NotConfigured { missing: ENV_MODEL })?;
        let base_url = get(ENV_BASE_URL).unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        let api_key = get(ENV_API_KEY);
        if api_key.is_none() && base_url.trim_end_matches('/') == DEFAULT_BASE_URL {
            return Err(ConfigError::NotConfigured {
                missing: ENV_API_KEY,
            });
        }
        let config = Self {
            api_key,
            ..Self::new(base_url.trim(), model.trim())
        };
        config.endpoint()?;
        Ok(config)
    }

    /// The chat-completions URL, `{base_url}/chat/completions`, checked.
    pub fn endpoint(&self) -> Result<reqwest::Url, ConfigError> {
        let invalid = |reason: String| ConfigError::Invalid {
            field: "base_url",
            reason,
        };
        let base = self.base_url.trim_end_matches('/');
        let url = reqwest::Url::parse(base).map_err(|e| invalid(format!("`{base}`: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
            return Err(invalid(format!("`{base}` is not an http(s) URL")));
        }
        reqwest::Url::parse(&format!("{base}/chat/completions"))
            .map_err(|e| invalid(format!("`{base}`: {e}")))
    }
}

impl fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_retries", &self.max_retries)
            .field("backoff_base", &self.backoff_base)
            .field("backoff_max", &self.backoff_max)
            .field("max_retry_after", &self.max_retry_after)
            .field("stream", &self.stream)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn no_model_means_not_configured_and_the_message_says_how() {
        let err = LlmConfig::from_lookup(lookup(&[(ENV_API_KEY, "sk-x")])).unwrap_err();
        assert_eq!(err, ConfigError::NotConfigured { missing: ENV_MODEL });
        let text = err.to_string();
        assert!(
            text.contains("SKILLHOST_MODEL") && text.contains("OPENAI_BASE_URL"),
            "{text}"
        );
        // Empty counts as unset.
        let err = LlmConfig::from_lookup(lookup(&[(ENV_MODEL, " ")])).unwrap_err();
        assert_eq!(err, ConfigError::NotConfigured { missing: ENV_MODEL });
    }

    #[test]
    fn openai_without_a_key_is_not_configured() {
        let err = LlmConfig::from_lookup(lookup(&[(ENV_MODEL, "gpt-4o-mini")])).unwrap_err();
        assert_eq!(
            err,
            ConfigError::NotConfigured {
                missing: ENV_API_KEY
            }
        );
    }

    #[test]
    fn a_local_server_needs_no_key() {
        let config = LlmConfig::from_lookup(lookup(&[
            (ENV_MODEL, "llama3.1"),
            (ENV_BASE_URL, "http://localhost:11434/v1/"),
        ]))
        .unwrap();
        assert_eq!(config.api_key, None);
        assert_eq!(config.model, "llama3.1");
        assert_eq!(
            config.endpoint().unwrap().as_str(),
            "http://localhost:11434/v1/chat/completions"
        );
        assert_eq!(config.max_retries, 3);
        assert_eq!(config.request_timeout, Duration::from_secs(120));
    }

    #[test]
    fn a_bad_base_url_is_invalid() {
        for url in ["localhost:11434", "ftp://example.com/v1", "http://"] {
            let err = LlmConfig::from_lookup(lookup(&[(ENV_MODEL, "m"), (ENV_BASE_URL, url)]))
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    ConfigError::Invalid {
                        field: "base_url",
                        ..
                    }
                ),
                "{url}: {err}"
            );
        }
    }

    #[test]
    fn debug_redacts_the_key() {
        let config = LlmConfig {
            api_key: Some("sk-secret".into()),
            ..LlmConfig::new("http://x/v1", "m")
        };
        let text = format!("{config:?}");
        assert!(
            !text.contains("sk-secret") && text.contains("<redacted>"),
            "{text}"
        );
    }
}
