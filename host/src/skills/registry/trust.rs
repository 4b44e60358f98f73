//! A signature policy replaced on a running registry: every file held to
//! the new one at once ([`SkillRegistry::replace_policy`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::MutexGuard;

use super::{
    Contender, FailureKind, FileError, LoadFailure, ReloadEvent, ReloadOutcome, SkillFile,
    SkillRegistry, SkillSnapshot, verify,
};
use crate::skills::signature::{Fingerprint, SignaturePolicy};

impl SkillRegistry {
    /// Replaces the signature policy — a trust store with a key added,
    /// rotated or revoked — and holds every file the registry knows to it at
    /// once, without waiting for the files to change:
    ///
    /// - a skill whose file still holds the content serving has that
    ///   content's signature checked again; when the check fails, the skill
    ///   is unloaded ([`ReloadOutcome::Untrusted`]) and the file stays
    ///   refused until its content or the policy changes;
    /// - a skill whose file holds other content (an update that was
    ///   refused, or the file cannot be read) keeps serving only while the
    ///   policy trusts the key that signed it;
    /// - content refused for its signature, or for a name another file
    ///   held, is tried again, and loads when the policy accepts it now.
    ///
    /// The directory is not listed again: files the registry has not seen
    /// are for a sync or a rescan. A load under way as the policy changes
    /// checks its content again under the new one before it installs.
    /// Returns what changed in the files checked, each also broadcast;
    /// what those changes set off elsewhere (a freed name taken over) is
    /// broadcast only.
    pub async fn replace_policy(&self, policy: SignaturePolicy) -> Vec<ReloadEvent> {
        let _replacing = self.replacing.lock().await;
        {
            let _writer = self.writer.lock().await;
            self.loader.policy.store(Arc::new(policy));
        }
        let mut events = Vec::new();
        for path in self.and_known_files(Vec::new()) {
            let (changes, waiting) = self.recheck_file(&path).await;
            events.extend(changes);
            self.sync_waiting(waiting).await;
        }
        events
    }

    /// Holds the file `path` to the policy [`Self::replace_policy`] just put
    /// in place; returns the changes, and the files waiting for a name they
    /// freed.
    async fn recheck_file(&self, path: &Path) -> (Vec<ReloadEvent>, Vec<PathBuf>) {
        let lock = self.syncing.of(path);
        let _syncing = lock.acquire().await;
        let (file, _share) = self.loader.read(path).await;
        let mut file = file.ok();
        let policy = self.loader.policy();
        let current = self.snapshot();
        let (mut events, mut waiting) = (Vec::new(), Vec::new());
        if let Some(serving) = current.skill_at(path) {
            let serving_digest = serving.component.digest();
            let signer = match file.take_if(|file| file.digest == serving_digest) {
                Some(same) => verify(policy.clone(), path, same.bytes)
                    .await
                    .map(|(_, signer)| signer),
                // Its bytes are no longer at hand: its signer decides.
                None => Ok(serving.signer),
            };
            let manifest = serving.component.manifest();
            let verdict = signer.and_then(|signer| {
                let admitted = policy.check_skill(signer.as_ref(), manifest);
                admitted.map(|()| signer).map_err(FileError::NotAdmitted)
            });
            let writer = self.writer.lock().await;
            match verdict {
                Ok(signer) if signer == serving.signer => {}
                Ok(signer) => waiting.extend(self.resign(writer, path, signer)),
                Err(error) => {
                    let digest = serving_digest.to_owned();
                    let (event, freed) = self.withdraw(writer, path, error, digest);
                    events.push(event);
                    waiting.extend(freed);
                }
            }
        }
        let refused = file.and_then(|file| {
            let failure = current.failure_for(path)?;
            (failure.digest.as_deref() == Some(file.digest.as_str())).then_some((file, failure))
        });
        if let Some((file, failure)) = refused
            && let Some((event, freed)) = self.retry_refused(path, file, failure, policy).await
        {
            if event.outcome != ReloadOutcome::Unchanged {
                events.push(event);
            }
            waiting.extend(freed);
        }
        (events, waiting)
    }

    /// Tries the content `file` of `path`, refused as `failure`, under the
    /// new `policy`: content refused for its signature or its key's scope
    /// loads if it passes now; content refused only for its name, kept to
    /// take the name over, is refused for its signature if it no longer
    /// passes (one its key's scope no longer admits stays, and never takes
    /// the name over). `None` when nothing changed.
    async fn retry_refused(
        &self,
        path: &Path,
        file: SkillFile,
        failure: &LoadFailure,
        policy: Arc<SignaturePolicy>,
    ) -> Option<(ReloadEvent, Vec<PathBuf>)> {
        let kept_signer = match (&failure.kind, &failure.contender) {
            (FailureKind::Signature | FailureKind::Scope, _) => None,
            (FailureKind::NameTaken, Some(Contender(skill))) => Some(skill.signer),
            _ => return None,
        };
        let SkillFile { bytes, digest } = file;
        match (verify(policy, path, bytes).await, kept_signer) {
            // Still refused for its signature: as it was.
            (Err(_), None) => None,
            (Err(error), Some(_)) => {
                let writer = self.writer.lock().await;
                Some(self.reject(writer, path, error, Some(digest)))
            }
            // Passes as the contender it is, signed by the same key.
            (Ok((_, signer)), Some(kept)) if signer == kept => None,
            (Ok((bytes, _)), _) => self.load_content(path, SkillFile { bytes, digest }).await,
        }
    }

    /// Records `signer` as the key that signed the skill serving from
    /// `path` (the same content, signed by several keys, passes a new trust
    /// store by another of them).
    fn resign(
        &self,
        writer: MutexGuard<'_, ()>,
        path: &Path,
        signer: Option<Fingerprint>,
    ) -> Vec<PathBuf> {
        let mut next = SkillSnapshot::clone(&self.current.load());
        if let Some(name) = next.by_path.get(path)
            && let Some(skill) = next.skills.get_mut(name)
        {
            skill.signer = signer;
        }
        self.commit(writer, next, &[])
    }

    /// Unloads the skill serving from `path`, whose content (`digest`) the
    /// signature policy no longer accepts (`error`). That refusal becomes
    /// the file's failure, unless the file holds other content that already
    /// has one.
    fn withdraw(
        &self,
        writer: MutexGuard<'_, ()>,
        path: &Path,
        error: FileError,
        digest: String,
    ) -> (ReloadEvent, Vec<PathBuf>) {
        let mut next = SkillSnapshot::clone(&self.current.load());
        let failure = error.into_failure(path, Some(digest));
        let outcome = ReloadOutcome::Untrusted {
            reason: failure.reason.clone(),
        };
        let event = ReloadEvent {
            path: path.to_owned(),
            old: next.withdraw(path, failure),
            new: None,
            outcome,
        };
        let waiting = self.commit(writer, next, std::slice::from_ref(&event));
        (event, waiting)
    }
}
