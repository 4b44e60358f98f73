//! The host's events numbered, and the latest of them kept, so that a
//! subscriber that went away — an SSE client whose connection dropped —
//! takes up where it left off (`Last-Event-ID`).
//!
//! Every event gets the next number under one lock, which also sends it:
//! the broadcast order is the numbering, so a follower numbers what it
//! receives by counting. Events are kept only once somebody follows
//! ([`EventLog::follow`]): before that nobody can ask for them again, and
//! a host nobody watches builds none.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use rand::Rng;
use tokio::sync::broadcast::{self, error::RecvError};

use super::events::HostEvent;
use crate::recent::{KeptFor, Recent};

/// Events a live subscriber may fall behind by before it misses the
/// oldest. Default: 1024 — a few seconds of a busy gateway's invocations.
const BUFFERED_EVENTS: usize = 1024;

/// Events kept for a follower that comes back: the latest 1024, and 8 MiB
/// of their JSON (an invocation's event carries its result, up to the
/// sandbox's output limit), however old.
const KEPT: KeptFor = KeptFor {
    count: 1024,
    age: Duration::MAX,
    bytes: 8 << 20,
};

/// One event's place among its host's, `<host>-<number>`: the host's
/// random tag (16 hex digits) and the event's number, from 1. What a
/// gateway's SSE event carries as its `id`, and a client sends back as
/// `Last-Event-ID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventId {
    host: u64,
    number: u64,
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}-{}", self.host, self.number)
    }
}

/// Text that is not an [`EventId`].
#[derive(Debug, Clone, thiserror::Error)]
#[error("not an event id (`<16 hex digits>-<number>`, as the events' `id` carries it)")]
pub struct NotAnEventId;

impl FromStr for EventId {
    type Err = NotAnEventId;

    fn from_str(text: &str) -> Result<Self, NotAnEventId> {
        let (host, number) = text.split_once('-').ok_or(NotAnEventId)?;
        if host.len() != 16 || !host.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return Err(NotAnEventId);
        }
        if number.is_empty() || !number.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(NotAnEventId);
        }
        Ok(Self {
            host: u64::from_str_radix(host, 16).map_err(|_| NotAnEventId)?,
            number: number.parse().map_err(|_| NotAnEventId)?,
        })
    }
}

/// Numbers a host's events, sends them to its subscribers, and keeps the
/// latest once somebody follows them.
pub(super) struct EventLog {
    host: u64,
    state: Mutex<LogState>,
    sender: broadcast::Sender<HostEvent>,
}

struct LogState {
    /// The number the next event gets.
    next: u64,
    /// Whether events are kept: since the first follower.
    keeping: bool,
    /// The latest events with their numbers, oldest first, without a gap.
    kept: Recent<(u64, HostEvent)>,
}

impl LogState {
    /// The number of the oldest event kept (the next one's when none is).
    fn oldest(&self) -> u64 {
        self.kept
            .iter()
            .next()
            .map_or(self.next, |(number, _)| *number)
    }
}

impl EventLog {
    pub(super) fn new() -> Self {
        Self {
            host: {
                let mut bytes = [0u8; 8];
                rand::rng().fill_bytes(&mut bytes);
                u64::from_le_bytes(bytes)
            },
            state: Mutex::new(LogState {
                next: 1,
                keeping: false,
                kept: Recent::new(KEPT),
            }),
            sender: broadcast::channel(BUFFERED_EVENTS).0,
        }
    }

    /// Numbers the event `make` builds and sends it; with nobody to send it
    /// to or keep it for (the common case), the event, and the copies it
    /// would take, is not built.
    pub(super) fn publish(&self, make: impl FnOnce() -> HostEvent) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let number = state.next;
        state.next += 1;
        if !state.keeping && self.sender.receiver_count() == 0 {
            return;
        }
        let event = make();
        if state.keeping {
            let bytes = json_len(&event);
            state
                .kept
                .push((number, event.clone()), SystemTime::now(), bytes);
        }
        // A subscriber that left since is fine.
        let _ = self.sender.send(event);
    }

    /// The events from now on.
    pub(super) fn subscribe(&self) -> broadcast::Receiver<HostEvent> {
        self.sender.subscribe()
    }

    /// The events after `after` (from now on without it): those still
    /// kept, then the live ones, each with its id.
    pub(super) fn follow(&self, after: Option<EventId>) -> EventFeed {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.keeping = true;
        let live = self.sender.subscribe();
        let (from, unknown_id) = match after {
            None => (state.next, false),
            Some(id) if id.host == self.host && id.number < state.next => (id.number + 1, false),
            // Another host's (this one's predecessor's, a replica's): all
            // of this one's events are news.
            Some(_) => (1, true),
        };
        let missed = state.oldest().saturating_sub(from);
        let backlog = state
            .kept
            .iter()
            .filter(|(number, _)| *number >= from)
            .map(|(number, event)| (self.id(*number), event.clone()))
            .collect();
        EventFeed {
            host: self.host,
            next: state.next,
            gap: (missed > 0 || unknown_id).then_some(FeedError::Missed {
                count: missed,
                unknown_id,
            }),
            backlog,
            live,
        }
    }

    fn id(&self, number: u64) -> EventId {
        EventId {
            host: self.host,
            number,
        }
    }
}

/// The length of `event`'s JSON, without building it.
fn json_len(event: &HostEvent) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Serializing a host event fails only on a writer's error: none here.
    let _ = serde_json::to_writer(&mut counter, event);
    counter.0
}

/// A host's events for one follower
/// ([`SkillHost::follow_events`](super::SkillHost::follow_events)), each
/// with its [`EventId`].
pub struct EventFeed {
    host: u64,
    /// The number of the next live event.
    next: u64,
    /// Told first: events the follower asked for that are no longer kept.
    gap: Option<FeedError>,
    backlog: VecDeque<(EventId, HostEvent)>,
    live: broadcast::Receiver<HostEvent>,
}

/// Why an [`EventFeed`] gives no event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedError {
    /// Events lost to the follower: asked for but no longer kept, or
    /// passed by while it fell behind. The next event follows.
    Missed {
        /// How many of this host's.
        count: u64,
        /// The id it followed on from is another host's (this one's
        /// predecessor, before a restart, or a replica's): what that host
        /// had after it is lost too, and not counted.
        unknown_id: bool,
    },
    /// The host is gone.
    Ended,
}

impl EventFeed {
    /// The next event: those kept first, then each as it happens.
    pub async fn recv(&mut self) -> Result<(EventId, HostEvent), FeedError> {
        if let Some(missed) = self.gap.take() {
            return Err(missed);
        }
        if let Some(kept) = self.backlog.pop_front() {
            return Ok(kept);
        }
        match self.live.recv().await {
            Ok(event) => {
                let id = EventId {
                    host: self.host,
                    number: self.next,
                };
                self.next += 1;
                Ok((id, event))
            }
            Err(RecvError::Lagged(count)) => {
                self.next += count;
                Err(FeedError::Missed {
                    count,
                    unknown_id: false,
                })
            }
            Err(RecvError::Closed) => Err(FeedError::Ended),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::ToolsChange;

    fn event(name: &str) -> HostEvent {
        HostEvent::Tools(ToolsChange {
            server: Some(name.into()),
            added: vec![],
            removed: vec![],
            changed: vec![],
        })
    }

    fn server(received: Result<(EventId, HostEvent), FeedError>) -> (EventId, String) {
        match received {
            Ok((id, HostEvent::Tools(change))) => (id, change.server.unwrap()),
            other => panic!("not a tools event: {other:?}"),
        }
    }

    #[test]
    fn an_event_id_reads_back_and_refuses_other_text() {
        let id = EventId {
            host: 0xfeed,
            number: 42,
        };
        assert_eq!(id.to_string(), "000000000000feed-42");
        assert_eq!("000000000000feed-42".parse::<EventId>().unwrap(), id);
        for bad in [
            "",
            "42",
            "feed-42",
            "000000000000feed-",
            "000000000000feed-x",
            "000000000000feed-+1",
        ] {
            assert!(bad.parse::<EventId>().is_err(), "{bad:?} read as an id");
        }
    }

    #[tokio::test]
    async fn a_follower_coming_back_gets_what_it_missed_then_what_happens() {
        let log = EventLog::new();
        log.publish(|| event("before anyone follows"));
        let mut first = log.follow(None);
        log.publish(|| event("a"));
        let (a, _) = server(first.recv().await);
        assert_eq!(a.number, 2, "the unwatched event was numbered too");
        drop(first);
        log.publish(|| event("b"));
        log.publish(|| event("c"));

        let mut back = log.follow(Some(a));
        assert_eq!(server(back.recv().await).1, "b");
        assert_eq!(server(back.recv().await).1, "c");
        log.publish(|| event("d"));
        let (d, name) = server(back.recv().await);
        assert_eq!((d.number, name.as_str()), (5, "d"));
    }

    #[tokio::test]
    async fn a_follower_is_told_how_many_events_are_no_longer_kept() {
        let log = EventLog::new();
        let mut watching = log.follow(None);
        let (first, _) = {
            log.publish(|| event("first"));
            server(watching.recv().await)
        };
        for _ in 0..KEPT.count + 3 {
            log.publish(|| event("later"));
        }
        let mut back = log.follow(Some(first));
        assert_eq!(
            back.recv().await.unwrap_err(),
            FeedError::Missed {
                count: 3,
                unknown_id: false
            }
        );
        assert_eq!(server(back.recv().await).0.number, 5);
    }

    #[tokio::test]
    async fn an_id_of_another_host_gets_everything_kept_and_says_so() {
        let log = EventLog::new();
        log.publish(|| event("unkept"));
        let _watching = log.follow(None);
        log.publish(|| event("kept"));
        let elsewhere = EventId {
            host: log.host.wrapping_add(1),
            number: 7,
        };
        let mut back = log.follow(Some(elsewhere));
        assert_eq!(
            back.recv().await.unwrap_err(),
            FeedError::Missed {
                count: 1,
                unknown_id: true
            }
        );
        assert_eq!(server(back.recv().await).1, "kept");
    }

    #[test]
    fn the_kept_events_stay_within_their_bytes() {
        let log = EventLog::new();
        let _watching = log.follow(None);
        let big = "x".repeat(KEPT.bytes / 4);
        for _ in 0..6 {
            log.publish(|| event(&big));
        }
        let state = log.state.lock().unwrap();
        assert_eq!(state.kept.iter().count(), 3);
        assert_eq!(state.oldest(), 4);
    }
}
