//! Progress lines on stderr for long work: loading skills, test cases,
//! packing. They are drawn only when stderr is a terminal (indicatif hides
//! its stderr target otherwise), so scripts, pipes and tests see nothing of
//! them; a line is cleared when its work ends.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressStyle};

use skillhost::skills::LoadProgress;

/// How often the spinner moves, so that a slow step (a compile, an LLM
/// call) still shows the command is alive.
const TICK: Duration = Duration::from_millis(120);

/// One progress line, cleared when dropped.
pub struct Progress(ProgressBar);

impl Progress {
    /// `<what>: <done>/<total> <message>`, e.g. "loading skills: 37/100".
    pub fn counter(what: &str, total: usize) -> Self {
        Self::start(
            ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr()),
            "{spinner} {prefix}: {pos}/{len} {wide_msg}",
            what,
        )
    }

    /// `<what>` alone, for one step of unknown length (e.g. "packing x.yaml").
    pub fn spinner(what: &str) -> Self {
        Self::start(
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
            "{spinner} {prefix}",
            what,
        )
    }

    fn start(bar: ProgressBar, template: &str, prefix: &str) -> Self {
        let style = ProgressStyle::with_template(template).expect("a valid progress template");
        let bar = bar
            .with_style(style)
            .with_prefix(prefix.to_owned())
            .with_finish(ProgressFinish::AndClear);
        if !bar.is_hidden() {
            bar.enable_steady_tick(TICK);
        }
        Self(bar)
    }

    /// Shows what is being worked on now, after the count.
    pub fn set_message(&self, message: String) {
        self.0.set_message(message);
    }

    /// One more item done.
    pub fn advance(&self) {
        self.0.inc(1);
    }

    /// Runs `print` with the line taken off the terminal, so that output
    /// (on stdout or stderr) is not drawn over it.
    pub fn suspend<R>(&self, print: impl FnOnce() -> R) -> R {
        self.0.suspend(print)
    }
}

/// A callback for [`SkillRegistry::load_dir_with_progress`] that shows
/// "loading skills: <done>/<total>" and clears it when the last file is
/// done.
///
/// [`SkillRegistry::load_dir_with_progress`]: skillhost::skills::SkillRegistry::load_dir_with_progress
pub fn loading_skills() -> impl FnMut(LoadProgress) + Send + 'static {
    let mut line: Option<Progress> = None;
    move |progress| {
        let shown = line.get_or_insert_with(|| Progress::counter("loading skills", progress.total));
        shown.0.set_position(progress.done as u64);
        if progress.done == progress.total {
            line = None;
        }
    }
}
