//! Terminal results kept in this process, so a Claim replaying one needs no
//! statement. Only SUCCEEDED and FAILED operations are kept: no transition
//! leaves those states (an operator may not hold, resolve or requeue them), so
//! the row changes only when retention deletes it or a compensation marks
//! `compensated_by`. An entry lives for the configured lifetime and is never
//! kept when retention could delete the row within that lifetime; a
//! compensation registered here forgets its original at once. A compensation
//! registered on another replica shows in this one's replays only once the
//! entry expires: the replayed result is the same, `compensated_by` is late by
//! at most the lifetime.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::domain::ids::{Namespace, OperationKey};
use crate::domain::operation::{Operation, Status};
use crate::domain::policy::PerNamespace;
use crate::store::operations::Observed;
use crate::telemetry::metrics;

/// How long entries live and how much memory they may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplaySettings {
    /// Zero turns the cache off.
    pub lifetime: Duration,
    pub max_bytes: usize,
}

/// What an entry is charged beyond its variable-length fields: the record's
/// fixed part, the map's and the eviction queue's slots.
const ENTRY_OVERHEAD_BYTES: usize = 512;

/// Retention must leave the row in place this much longer than an entry's
/// lifetime, covering the time between the read and the entry's insertion.
const RETENTION_MARGIN: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct Replays {
    settings: ReplaySettings,
    retention: Arc<PerNamespace<Option<Duration>>>,
    cache: Arc<Mutex<Cache>>,
}

#[derive(Debug, Default)]
struct Cache {
    entries: HashMap<String, Entry>,
    /// Keys in insertion order, each with the insertion it names; an entry
    /// replaced or removed since leaves a stale slot, skipped on eviction.
    order: VecDeque<(String, u64)>,
    bytes: usize,
    insertions: u64,
}

#[derive(Debug)]
struct Entry {
    observed: Observed,
    expires_at: Instant,
    bytes: usize,
    insertion: u64,
}

impl Replays {
    pub fn new(settings: ReplaySettings, retention: PerNamespace<Option<Duration>>) -> Self {
        Self {
            settings,
            retention: Arc::new(retention),
            cache: Arc::default(),
        }
    }

    /// The kept terminal operation of this key, while it is fresh.
    pub fn get(&self, namespace: &Namespace, key: &OperationKey) -> Option<Observed> {
        if self.settings.lifetime.is_zero() {
            return None;
        }
        let name = cache_key(namespace, key);
        let mut cache = self.lock();
        let entry = cache.entries.get(&name)?;
        if entry.expires_at <= Instant::now() {
            cache.remove(&name);
            return None;
        }
        let observed = entry.observed.clone();
        drop(cache);
        metrics::replay_cache_hit(namespace);
        Some(observed)
    }

    /// Keeps `observed` if it is terminal and retention leaves its row in place
    /// for longer than an entry lives.
    pub fn keep(&self, observed: &Observed) {
        let operation = &observed.operation;
        if self.settings.lifetime.is_zero()
            || !matches!(operation.status, Status::Succeeded | Status::Failed)
            || !self.outlives_entry(observed)
        {
            return;
        }
        let bytes = ENTRY_OVERHEAD_BYTES + variable_bytes(operation);
        if bytes > self.settings.max_bytes {
            return;
        }
        let name = cache_key(&operation.namespace, &operation.operation_key);
        let expires_at = Instant::now() + self.settings.lifetime;
        let mut cache = self.lock();
        cache.insert(name, observed.clone(), expires_at, bytes);
        cache.evict_to(self.settings.max_bytes);
    }

    /// Drops the entry of this key, after a change this process made to it.
    pub fn forget(&self, namespace: &Namespace, key: &OperationKey) {
        let name = cache_key(namespace, key);
        self.lock().remove(&name);
    }

    fn outlives_entry(&self, observed: &Observed) -> bool {
        let operation = &observed.operation;
        let Some(retention) = *self.retention.get(operation.namespace.as_str()) else {
            return true;
        };
        let Some(completed_at) = operation.completed_at else {
            return false;
        };
        let kept_for = (observed.db_now - completed_at)
            .to_std()
            .unwrap_or(Duration::ZERO);
        retention.saturating_sub(kept_for) > self.settings.lifetime + RETENTION_MARGIN
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        // A panic while holding the lock leaves a consistent map: every
        // mutation below completes before it can panic.
        self.cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Cache {
    fn insert(&mut self, name: String, observed: Observed, expires_at: Instant, bytes: usize) {
        self.insertions += 1;
        let insertion = self.insertions;
        self.order.push_back((name.clone(), insertion));
        self.bytes += bytes;
        let replaced = self.entries.insert(
            name,
            Entry {
                observed,
                expires_at,
                bytes,
                insertion,
            },
        );
        if let Some(replaced) = replaced {
            self.bytes -= replaced.bytes;
        }
    }

    fn remove(&mut self, name: &str) {
        if let Some(removed) = self.entries.remove(name) {
            self.bytes -= removed.bytes;
        }
    }

    /// Evicts the oldest insertions until the entries fit in `max_bytes` and
    /// the queue holds few stale slots.
    fn evict_to(&mut self, max_bytes: usize) {
        while self.bytes > max_bytes || self.order.len() > 2 * self.entries.len() + 64 {
            let Some((name, insertion)) = self.order.pop_front() else {
                return;
            };
            if self
                .entries
                .get(&name)
                .is_some_and(|entry| entry.insertion == insertion)
            {
                self.remove(&name);
            }
        }
    }
}

/// Namespaces and keys never hold a NUL, so the pair is unambiguous.
fn cache_key(namespace: &Namespace, key: &OperationKey) -> String {
    let mut name = String::with_capacity(namespace.as_str().len() + 1 + key.as_str().len());
    name.push_str(namespace.as_str());
    name.push('\0');
    name.push_str(key.as_str());
    name
}

fn variable_bytes(operation: &Operation) -> usize {
    let text = |value: &Option<String>| value.as_ref().map_or(0, String::len);
    operation.namespace.as_str().len() * 2
        + operation.operation_key.as_str().len() * 2
        + operation.parameters_digest.len()
        + text(&operation.parameters_canonical)
        + operation.result.as_ref().map_or(0, Vec::len)
        + text(&operation.result_ref)
        + text(&operation.failure_code)
        + text(&operation.failure_message)
        + text(&operation.remote_ref)
        + text(&operation.last_error_class)
        + text(&operation.last_error_message)
        + text(&operation.lease_owner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::claim::tests::operation;
    use chrono::Utc;

    fn settings(lifetime_ms: u64, max_bytes: usize) -> ReplaySettings {
        ReplaySettings {
            lifetime: Duration::from_millis(lifetime_ms),
            max_bytes,
        }
    }

    fn observed(key: &str, status: Status, completed_ago: chrono::TimeDelta) -> Observed {
        let now = Utc::now();
        let mut operation = operation(status, now);
        operation.operation_key = OperationKey::from_stored(key.to_owned());
        operation.completed_at = Some(now - completed_ago);
        Observed {
            operation,
            db_now: now,
        }
    }

    fn get(replays: &Replays, observed: &Observed) -> Option<Observed> {
        let operation = &observed.operation;
        replays.get(&operation.namespace, &operation.operation_key)
    }

    #[test]
    fn only_terminal_operations_are_kept_and_only_until_they_expire() {
        let replays = Replays::new(settings(50, 1 << 20), PerNamespace::uniform(None));
        let done = observed("done", Status::Succeeded, chrono::TimeDelta::zero());
        let failed = observed("failed", Status::Failed, chrono::TimeDelta::zero());
        for status in [
            Status::InProgress,
            Status::RetryScheduled,
            Status::Unknown,
            Status::Dead,
        ] {
            let open = observed("open", status, chrono::TimeDelta::zero());
            replays.keep(&open);
            assert!(get(&replays, &open).is_none(), "{status:?} was kept");
        }
        replays.keep(&done);
        replays.keep(&failed);
        assert!(get(&replays, &done).is_some());
        assert!(get(&replays, &failed).is_some());
        replays.forget(&failed.operation.namespace, &failed.operation.operation_key);
        assert!(get(&replays, &failed).is_none());
        std::thread::sleep(Duration::from_millis(60));
        assert!(get(&replays, &done).is_none(), "an expired entry answered");
    }

    #[test]
    fn nothing_is_kept_that_retention_could_delete_while_it_lives() {
        let retention = PerNamespace::uniform(Some(Duration::from_secs(10)));
        let replays = Replays::new(settings(1_000, 1 << 20), retention);
        let young = observed("young", Status::Succeeded, chrono::TimeDelta::seconds(2));
        let old = observed("old", Status::Succeeded, chrono::TimeDelta::seconds(8));
        replays.keep(&young);
        replays.keep(&old);
        assert!(get(&replays, &young).is_some());
        assert!(
            get(&replays, &old).is_none(),
            "kept within a second of its purge"
        );
    }

    #[test]
    fn memory_is_bounded_and_the_oldest_entries_go_first() {
        let replays = Replays::new(
            settings(60_000, 4 * ENTRY_OVERHEAD_BYTES),
            PerNamespace::uniform(None),
        );
        let kept: Vec<_> = (0..8)
            .map(|i| {
                observed(
                    &format!("k{i}"),
                    Status::Succeeded,
                    chrono::TimeDelta::zero(),
                )
            })
            .collect();
        for observed in &kept {
            replays.keep(observed);
        }
        let cache = replays.lock();
        assert!(cache.bytes <= 4 * ENTRY_OVERHEAD_BYTES);
        assert!(cache.entries.len() < 4);
        drop(cache);
        assert!(get(&replays, &kept[7]).is_some());
        assert!(get(&replays, &kept[0]).is_none());
        for _ in 0..1_000 {
            replays.keep(&kept[7]);
        }
        let cache = replays.lock();
        assert!(cache.order.len() <= 2 * cache.entries.len() + 64);
    }
}
