//! The sessions of `/mcp` (MCP Streamable HTTP's `Mcp-Session-Id`): what
//! the gateway remembers of a client between its requests — whether it
//! can ask its user (`elicitation`), and what the server asked it and
//! waits on — so that a write is approved by the client's user in the
//! client, as `skillhost mcp` does on standard streams.
//!
//! A session is opened by `initialize` and belongs to the API key that
//! opened it: another key's request naming it is answered as for an
//! unknown session. Bounded: idle sessions go after an hour, and past
//! 10,000 the least lately used goes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::agent::random_id;
use crate::embed::mcp::Asked;

/// Sessions open at once; past it the least lately used goes.
const MAX_SESSIONS: usize = 10_000;

/// How long a session lasts without a request.
const IDLE_FOR: Duration = Duration::from_secs(3600);

/// The header that carries a session's id.
pub(super) const SESSION_HEADER: &str = "mcp-session-id";

/// Every open session, by id.
#[derive(Default)]
pub(super) struct McpSessions {
    open: Mutex<HashMap<String, Arc<McpSession>>>,
}

/// One client's session.
pub(super) struct McpSession {
    /// The key's name that opened it (`None` on a gateway without keys).
    principal: Option<String>,
    /// Whether the client can ask its user (`elicitation`).
    pub(super) elicits: bool,
    /// The server's requests it has not answered yet.
    pub(super) asked: Asked,
    last_used: Mutex<Instant>,
}

impl McpSessions {
    /// Opens a session for `principal`'s client; returns its id.
    pub(super) fn open(&self, principal: Option<String>, elicits: bool) -> String {
        // As unguessable as a confirmation's: whoever knows it answers
        // the session's questions.
        let id = random_id("");
        let session = Arc::new(McpSession {
            principal,
            elicits,
            asked: Asked::default(),
            last_used: Mutex::new(Instant::now()),
        });
        let mut open = self.lock();
        open.retain(|_, session| session.last_used().elapsed() < IDLE_FOR);
        if open.len() >= MAX_SESSIONS
            && let Some(stalest) = open
                .iter()
                .min_by_key(|(_, session)| session.last_used())
                .map(|(id, _)| id.clone())
        {
            open.remove(&stalest);
        }
        open.insert(id.clone(), session);
        id
    }

    /// The session `id`, when it is open and `principal`'s.
    pub(super) fn get(&self, id: &str, principal: Option<&str>) -> Option<Arc<McpSession>> {
        let open = self.lock();
        let session = open
            .get(id)
            .filter(|session| session.principal.as_deref() == principal)
            .filter(|session| session.last_used().elapsed() < IDLE_FOR)?;
        *session
            .last_used
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        Some(session.clone())
    }

    /// Ends the session `id`, when it is open and `principal`'s; whether
    /// it was.
    pub(super) fn end(&self, id: &str, principal: Option<&str>) -> bool {
        let mut open = self.lock();
        let owned = open
            .get(id)
            .is_some_and(|session| session.principal.as_deref() == principal);
        owned && open.remove(id).is_some()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<McpSession>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl McpSession {
    fn last_used(&self) -> Instant {
        *self
            .last_used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_session_is_its_keys_alone_and_ends_once() {
        let sessions = McpSessions::default();
        let id = sessions.open(Some("support-desk".into()), true);
        assert!(sessions.get(&id, Some("support-desk")).is_some());
        assert!(sessions.get(&id, Some("finance-desk")).is_none());
        assert!(sessions.get(&id, None).is_none());
        assert!(!sessions.end(&id, Some("finance-desk")));
        assert!(sessions.end(&id, Some("support-desk")));
        assert!(sessions.get(&id, Some("support-desk")).is_none());
        assert!(!sessions.end(&id, Some("support-desk")));
    }

    #[tokio::test]
    async fn an_answer_reaches_the_request_it_answers_once() {
        let sessions = McpSessions::default();
        let id = sessions.open(None, true);
        let asked = &sessions.get(&id, None).unwrap().asked;
        let (question, answer) = asked.ask();
        assert!(!asked.answered(question + 1, json!("not asked")));
        assert!(asked.answered(question, json!("yes")));
        assert!(!asked.answered(question, json!("again")));
        assert_eq!(answer.await.unwrap(), json!("yes"));
    }
}
