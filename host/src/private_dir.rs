//! Directories that hold the host's own state: this user's alone.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

/// Creates `dir` for this user alone (mode 0700) when missing, and refuses
/// it when it belongs to another user or its mode has any bit of `refused`
/// (e.g. `0o022`: others may write). `why` says what is at stake, for the
/// error.
pub(crate) fn ensure(dir: &Path, refused: u32, why: &str) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    check(dir, refused, why)
}

/// What [`ensure`] refuses of `dir`, which exists, creating nothing.
pub(crate) fn check(dir: &Path, refused: u32, why: &str) -> anyhow::Result<()> {
    let metadata = std::fs::metadata(dir)?;
    // The process's own directory belongs to the user it runs as (Linux).
    if let Ok(process) = std::fs::metadata("/proc/self") {
        anyhow::ensure!(
            metadata.uid() == process.uid(),
            "it belongs to user {}, not to the user running skillhost ({}); {why}, so it must \
             be this user's own",
            metadata.uid(),
            process.uid()
        );
    }
    let mode = metadata.mode() & 0o7777;
    anyhow::ensure!(
        mode & refused == 0,
        "its mode is {mode:o}; {why}, so only its owner may {} it (chmod {})",
        if refused & 0o044 == 0 {
            "write to"
        } else {
            "use"
        },
        if refused & 0o044 == 0 {
            "go-w"
        } else {
            "go-rwx"
        },
    );
    Ok(())
}
