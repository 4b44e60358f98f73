//! A skills directory laid out and updated the way the kubelet does a
//! ConfigMap or Secret volume (`AtomicWriter` in Kubernetes'
//! pkg/volume/util/atomic_writer.go):
//!
//! ```text
//! dir/refund.wasm -> ..data/refund.wasm
//! dir/..data      -> ..2026_11_30_04_41_02.000000001
//! dir/..2026_11_30_04_41_02.000000001/refund.wasm
//! ```
//!
//! An update writes the new content into a new timestamped directory,
//! points a new link `..data_tmp` at it and renames that over `..data`
//! (the atomic step), adds the top-level links of files added, removes
//! those of files removed, then deletes the old timestamped directory.

use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

const DATA: &str = "..data";

/// A ConfigMap-style volume in `dir` (which must exist).
pub struct ConfigMapVolume {
    dir: PathBuf,
    /// The timestamped directory `..data` points at.
    current: String,
    /// The files it holds (the top-level links).
    files: BTreeSet<String>,
    generation: u32,
}

impl ConfigMapVolume {
    /// Projects `files` into `dir` as the kubelet does when it mounts the
    /// volume.
    pub fn create(dir: &Path, files: &[(&str, &[u8])]) -> Self {
        let mut volume = Self {
            dir: dir.to_owned(),
            current: String::new(),
            files: BTreeSet::new(),
            generation: 0,
        };
        volume.update(files);
        volume
    }

    /// Replaces the volume's content with `files`, in the kubelet's order.
    pub fn update(&mut self, files: &[(&str, &[u8])]) {
        // A new timestamped directory with the whole payload.
        self.generation += 1;
        let timestamped = format!("..2026_11_30_04_41_02.{:09}", self.generation);
        let new_dir = self.dir.join(&timestamped);
        std::fs::create_dir(&new_dir).unwrap();
        for (name, bytes) in files {
            std::fs::write(new_dir.join(name), bytes).unwrap();
        }
        // Swap `..data` to it atomically.
        let data_tmp = self.dir.join("..data_tmp");
        symlink(&timestamped, &data_tmp).unwrap();
        std::fs::rename(&data_tmp, self.dir.join(DATA)).unwrap();
        // Links of the files added, then those of the files removed.
        let names: BTreeSet<String> = files.iter().map(|(name, _)| (*name).to_owned()).collect();
        for added in names.difference(&self.files) {
            symlink(Path::new(DATA).join(added), self.dir.join(added)).unwrap();
        }
        for removed in self.files.difference(&names) {
            std::fs::remove_file(self.dir.join(removed)).unwrap();
        }
        // The old timestamped directory goes.
        if !self.current.is_empty() {
            std::fs::remove_dir_all(self.dir.join(&self.current)).unwrap();
        }
        self.current = timestamped;
        self.files = names;
    }
}
