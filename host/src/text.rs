//! Text for messages: long values cut to a readable length, text from
//! outside the host made safe to log, and errors with their causes.

use std::borrow::Cow;
use std::fmt;

/// The most of one piece of text from outside the host (a guest's log line
/// or trap message, a violation quoting a caller's arguments) kept in a
/// message or a log line; the rest is cut with a marker.
pub const OUTSIDE_TEXT_BYTES: usize = 4 << 10;

/// At most `max_chars` characters of `text`, cut on a character boundary,
/// with `…` when something was cut.
pub fn clip(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// `text` as a log line or a kept message may show it: control characters
/// escaped, so that it makes no lines of its own, and at most `max_bytes`
/// of the escaped text, then a marker saying how many bytes of `text` were
/// cut. Borrows `text` when it is short and has nothing to escape.
pub fn escaped(text: &str, max_bytes: usize) -> Cow<'_, str> {
    if text.len() <= max_bytes && !text.chars().any(char::is_control) {
        return text.into();
    }
    let mut shown = Escaped::new(max_bytes);
    shown.push(text);
    shown.finish().into()
}

/// [`escaped`] text built from parts with `write!`: what is past
/// `max_bytes` is counted, not held, however long the parts are.
pub(crate) struct Escaped {
    text: String,
    max_bytes: usize,
    cut_bytes: usize,
}

impl Escaped {
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            text: String::new(),
            max_bytes,
            cut_bytes: 0,
        }
    }

    /// Appends `part`, escaped, as far as it fits.
    pub(crate) fn push(&mut self, part: &str) {
        if self.cut_bytes > 0 {
            self.cut_bytes += part.len();
            return;
        }
        for (at, c) in part.char_indices() {
            let fits = if c.is_control() {
                let escape = c.escape_default();
                let fits = self.text.len() + escape.len() <= self.max_bytes;
                if fits {
                    self.text.extend(escape);
                }
                fits
            } else {
                let fits = self.text.len() + c.len_utf8() <= self.max_bytes;
                if fits {
                    self.text.push(c);
                }
                fits
            };
            if !fits {
                self.cut_bytes = part.len() - at;
                return;
            }
        }
    }

    /// The text, with the marker when something was cut.
    pub(crate) fn finish(mut self) -> String {
        if self.cut_bytes > 0 {
            use fmt::Write as _;
            let _ = write!(self.text, "… [{} bytes cut]", self.cut_bytes);
        }
        self.text
    }
}

impl fmt::Write for Escaped {
    fn write_str(&mut self, part: &str) -> fmt::Result {
        self.push(part);
        Ok(())
    }
}

/// An error and its sources, `": "`-separated: an HTTP client's own message
/// ("error sending request") rarely says what went wrong; the causes name
/// the refused connection, the failed lookup or the timeout.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clips_on_a_character_boundary() {
        let long = "é".repeat(12);
        let cut = clip(&long, 10);
        assert_eq!(cut.chars().count(), 11);
        assert!(cut.ends_with('…'));
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("exactly10!", 10), "exactly10!");
    }

    #[test]
    fn a_guests_text_makes_no_log_lines_of_its_own() {
        assert_eq!(
            escaped("plain text, ünïcode", OUTSIDE_TEXT_BYTES),
            "plain text, ünïcode"
        );
        assert_eq!(
            escaped(
                "ok\noutcome=done skill=other\r\u{1b}[2J",
                OUTSIDE_TEXT_BYTES
            ),
            "ok\\noutcome=done skill=other\\r\\u{1b}[2J"
        );
    }

    #[test]
    fn outside_text_is_cut_after_escaping_on_a_character_boundary() {
        let long = format!("{}\nINFO forged line", "é".repeat(3000));
        let shown = escaped(&long, OUTSIDE_TEXT_BYTES);
        let (kept, marker) = shown.split_once('…').expect("a cut marker");
        assert!(kept.len() <= OUTSIDE_TEXT_BYTES && kept.chars().all(|c| c == 'é'));
        let cut = long.len() - kept.len();
        assert_eq!(marker, format!(" [{cut} bytes cut]"));

        // The escapes count against the length: a line of control
        // characters is no longer than any other.
        let controls = "\n".repeat(OUTSIDE_TEXT_BYTES);
        let shown = escaped(&controls, OUTSIDE_TEXT_BYTES);
        assert!(!shown.contains('\n'));
        assert!(shown.len() < OUTSIDE_TEXT_BYTES + 32, "{}", shown.len());
    }

    #[test]
    fn error_chains_name_every_cause() {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = std::io::Error::other(Wrapped(cause));
        assert_eq!(error_chain(&error), "sending: refused");
    }

    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("sending")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}
