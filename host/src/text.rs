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

/// The end of `text` in whole lines, as many as fit in `max_bytes` but
/// at least the last, without blank lines before or after; `None` when
/// every line is blank. What a program writes last before it fails is
/// usually why (a panic's message, an exception after its traceback).
pub(crate) fn last_lines(text: &str, max_bytes: usize) -> Option<&str> {
    let text = text.trim_end();
    // Where each line starts, the last line's first.
    let mut starts = text.rmatch_indices('\n').map(|(at, _)| at + 1);
    let last = starts.next().unwrap_or(0);
    let start = if text.len() <= max_bytes {
        0
    } else {
        starts
            .take_while(|start| text.len() - start <= max_bytes)
            .last()
            .unwrap_or(last)
    };
    let mut tail = &text[start..];
    while let Some((blank, rest)) = tail.split_once('\n')
        && blank.trim().is_empty()
    {
        tail = rest;
    }
    (!tail.is_empty()).then_some(tail)
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
    fn the_last_lines_are_whole_lines_within_the_budget_but_at_least_one() {
        let written = "starting\nTraceback:\n  File \"app.py\", line 9\nIndexError: 0\n\n";
        assert_eq!(
            last_lines(written, 1024),
            Some("starting\nTraceback:\n  File \"app.py\", line 9\nIndexError: 0")
        );
        assert_eq!(
            last_lines(written, 40),
            Some("  File \"app.py\", line 9\nIndexError: 0")
        );
        assert_eq!(last_lines(written, 5), Some("IndexError: 0"));
        let long = format!("first\n{}", "é".repeat(100));
        assert_eq!(last_lines(&long, 10), Some(&long[6..]));
        assert_eq!(last_lines(" \n\n \t\n", 1024), None);
        assert_eq!(last_lines("", 1024), None);
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
