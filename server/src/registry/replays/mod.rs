//! Terminal results kept in this process, so a Claim replaying one needs no
//! statement. Only SUCCEEDED and FAILED operations are kept: the row changes
//! only when a compensation marks `compensated_by`, when a Claim with the
//! reuse policy AFTER_FAILURE starts a FAILED one again (no operator action
//! applies to them), or when retention, an operator or a hand edit deletes it.
//!
//! Every such change notifies every replica when it commits (a trigger;
//! [`follow`] reads the notices), and the entry goes. The cache answers only
//! while it is *following*: while this process has heard, within
//! `max_staleness`, a heartbeat it sent through its own pool after the
//! listening session began. Notices are delivered in commit order, so hearing
//! a heartbeat sent at `t` means every change committed before `t` has been
//! applied; an answer is therefore never further behind the database than
//! `max_staleness`, and normally behind only by a notice's delivery.
//!
//! A read that raced a change must not be kept after the change's notice
//! went by: each read takes a [`Ticket`] (the cache's generation) before it
//! starts, and its result is kept only if no notice, loss or restart of the
//! listening session came in between. An entry also lives no longer than
//! `lifetime`, nor past the time retention could delete its row.

mod follow;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::domain::ids::{Namespace, OperationKey};
use crate::domain::operation::{Operation, Status};
use crate::domain::policy::PerNamespace;
use crate::store::operations::Observed;
use crate::telemetry::metrics;

/// How long entries live, how far behind they may be, how much memory they
/// may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplaySettings {
    /// Zero turns the cache off.
    pub lifetime: Duration,
    /// Longest time since the last heartbeat heard for which the cache still
    /// answers.
    pub max_staleness: Duration,
    pub max_bytes: usize,
}

/// What an entry is charged beyond its variable-length fields: the record's
/// fixed part, the map's and the eviction queue's slots.
const ENTRY_OVERHEAD_BYTES: usize = 512;

/// An entry goes this long before retention could delete its row.
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
    /// Counts every notice applied and every start or loss of the listening
    /// session; a read is kept only if it has not moved since the read began.
    generation: u64,
    /// When the newest heartbeat heard on the current listening session was
    /// sent; `None` while there is no such session or none was heard yet.
    heard_as_of: Option<Instant>,
}

#[derive(Debug)]
struct Entry {
    observed: Observed,
    expires_at: Instant,
    bytes: usize,
    insertion: u64,
}

/// The cache's generation when a lookup began: what the database read after
/// a miss says is kept only with it.
#[derive(Clone, Copy, Debug)]
pub struct Ticket(u64);

impl Replays {
    pub fn new(settings: ReplaySettings, retention: PerNamespace<Option<Duration>>) -> Self {
        Self {
            settings,
            retention: Arc::new(retention),
            cache: Arc::default(),
        }
    }

    /// Whether the cache is on; when it is, [`crate::registry::Registry::follow_changes`]
    /// must run, or the cache never answers.
    pub fn enabled(&self) -> bool {
        !self.settings.lifetime.is_zero()
    }

    /// The kept terminal operation of this key, while it is fresh and the
    /// cache follows the database's changes, and the ticket for a read.
    pub fn get(&self, namespace: &Namespace, key: &OperationKey) -> (Option<Observed>, Ticket) {
        let mut cache = self.lock();
        let ticket = Ticket(cache.generation);
        if !self.enabled() || !self.following(&cache) {
            return (None, ticket);
        }
        let name = cache_key(namespace, key);
        let Some(entry) = cache.entries.get(&name) else {
            return (None, ticket);
        };
        if entry.expires_at <= Instant::now() {
            cache.remove(&name);
            return (None, ticket);
        }
        let observed = entry.observed.clone();
        drop(cache);
        metrics::replay_cache_hit(namespace);
        (Some(observed), ticket)
    }

    /// Keeps `observed`, read with `ticket`, if it is terminal, no change was
    /// noticed since the read began, and retention leaves its row in place
    /// for a while.
    pub fn keep(&self, observed: &Observed, ticket: Ticket) {
        let operation = &observed.operation;
        if !self.enabled() || !matches!(operation.status, Status::Succeeded | Status::Failed) {
            return;
        }
        let Some(lives) = self.entry_lifetime(observed) else {
            return;
        };
        let bytes = ENTRY_OVERHEAD_BYTES + variable_bytes(operation);
        if bytes > self.settings.max_bytes {
            return;
        }
        let name = cache_key(&operation.namespace, &operation.operation_key);
        let expires_at = Instant::now() + lives;
        let mut cache = self.lock();
        if cache.generation != ticket.0 {
            return;
        }
        cache.insert(name, observed.clone(), expires_at, bytes);
        cache.evict_to(self.settings.max_bytes);
    }

    /// Drops the entry of this key: a change to it committed, here or on
    /// another replica.
    pub fn forget(&self, namespace: &Namespace, key: &OperationKey) {
        let name = cache_key(namespace, key);
        let mut cache = self.lock();
        cache.generation += 1;
        cache.remove(&name);
    }

    /// Drops every entry: the table was truncated.
    fn forget_all(&self) {
        self.lock().clear();
    }

    /// The listening session began or was lost, so notices may have been
    /// missed: nothing read before is trusted, and the cache answers again
    /// once a heartbeat comes through a session.
    fn start_over(&self) {
        let mut cache = self.lock();
        cache.clear();
        cache.heard_as_of = None;
    }

    /// A heartbeat sent at `sent` came through on the current session.
    fn heard(&self, sent: Instant) {
        let mut cache = self.lock();
        cache.heard_as_of = Some(cache.heard_as_of.map_or(sent, |heard| heard.max(sent)));
    }

    fn following(&self, cache: &Cache) -> bool {
        cache
            .heard_as_of
            .is_some_and(|heard| heard.elapsed() <= self.settings.max_staleness)
    }

    /// How long an entry read now may live: its lifetime, cut to end well
    /// before retention could delete the row; `None` if that is no time.
    fn entry_lifetime(&self, observed: &Observed) -> Option<Duration> {
        let operation = &observed.operation;
        let Some(retention) = *self.retention.get(operation.namespace.as_str()) else {
            return Some(self.settings.lifetime);
        };
        let completed_at = operation.completed_at?;
        let kept_for = (observed.db_now - completed_at)
            .to_std()
            .unwrap_or(Duration::ZERO);
        let left = retention
            .checked_sub(kept_for)?
            .checked_sub(RETENTION_MARGIN)?;
        Some(left.min(self.settings.lifetime)).filter(|lives| !lives.is_zero())
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

    /// Drops every entry and moves the generation.
    fn clear(&mut self) {
        self.generation += 1;
        self.entries.clear();
        self.order.clear();
        self.bytes = 0;
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
            max_staleness: Duration::from_secs(60),
            max_bytes,
        }
    }

    /// A cache that has heard a heartbeat just now.
    fn following(settings: ReplaySettings, retention: PerNamespace<Option<Duration>>) -> Replays {
        let replays = Replays::new(settings, retention);
        replays.heard(Instant::now());
        replays
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

    fn lookup(replays: &Replays, observed: &Observed) -> (Option<Observed>, Ticket) {
        let operation = &observed.operation;
        replays.get(&operation.namespace, &operation.operation_key)
    }

    fn get(replays: &Replays, observed: &Observed) -> Option<Observed> {
        lookup(replays, observed).0
    }

    /// Reads `observed` as a Claim would: a ticket first, then keeps it.
    fn read_and_keep(replays: &Replays, observed: &Observed) {
        let (_, ticket) = lookup(replays, observed);
        replays.keep(observed, ticket);
    }

    #[test]
    fn only_terminal_operations_are_kept_and_only_until_they_expire() {
        let replays = following(settings(50, 1 << 20), PerNamespace::uniform(None));
        let done = observed("done", Status::Succeeded, chrono::TimeDelta::zero());
        let failed = observed("failed", Status::Failed, chrono::TimeDelta::zero());
        for status in [
            Status::InProgress,
            Status::RetryScheduled,
            Status::Unknown,
            Status::Dead,
        ] {
            let open = observed("open", status, chrono::TimeDelta::zero());
            read_and_keep(&replays, &open);
            assert!(get(&replays, &open).is_none(), "{status:?} was kept");
        }
        read_and_keep(&replays, &done);
        read_and_keep(&replays, &failed);
        assert!(get(&replays, &done).is_some());
        assert!(get(&replays, &failed).is_some());
        replays.forget(&failed.operation.namespace, &failed.operation.operation_key);
        assert!(get(&replays, &failed).is_none());
        std::thread::sleep(Duration::from_millis(60));
        assert!(get(&replays, &done).is_none(), "an expired entry answered");
    }

    #[test]
    fn a_read_that_raced_a_notice_is_not_kept() {
        let replays = following(settings(60_000, 1 << 20), PerNamespace::uniform(None));
        let done = observed("done", Status::Succeeded, chrono::TimeDelta::zero());
        let other = observed("other", Status::Succeeded, chrono::TimeDelta::zero());
        for interruption in [
            |replays: &Replays, other: &Observed| {
                replays.forget(&other.operation.namespace, &other.operation.operation_key);
            },
            |replays: &Replays, _: &Observed| replays.forget_all(),
            |replays: &Replays, _: &Observed| {
                replays.start_over();
                replays.heard(Instant::now());
            },
        ] {
            let (None, ticket) = lookup(&replays, &done) else {
                panic!("nothing was kept yet");
            };
            interruption(&replays, &other);
            replays.keep(&done, ticket);
            assert!(get(&replays, &done).is_none(), "kept across a notice");
        }
        read_and_keep(&replays, &done);
        assert!(get(&replays, &done).is_some());
    }

    #[test]
    fn answers_come_only_while_heartbeats_are_heard() {
        let mut settings = settings(60_000, 1 << 20);
        settings.max_staleness = Duration::from_millis(50);
        let replays = Replays::new(settings, PerNamespace::uniform(None));
        let done = observed("done", Status::Succeeded, chrono::TimeDelta::zero());
        read_and_keep(&replays, &done);
        assert!(
            get(&replays, &done).is_none(),
            "answered before any heartbeat"
        );
        replays.heard(Instant::now());
        assert!(get(&replays, &done).is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert!(
            get(&replays, &done).is_none(),
            "answered past the staleness"
        );
        replays.heard(Instant::now());
        assert!(get(&replays, &done).is_some());
        replays.start_over();
        replays.heard(Instant::now());
        assert!(
            get(&replays, &done).is_none(),
            "an entry outlived its session"
        );
    }

    #[test]
    fn nothing_outlives_the_time_retention_could_delete_its_row() {
        let retention = PerNamespace::uniform(Some(Duration::from_secs(10)));
        let replays = following(settings(60_000, 1 << 20), retention);
        let young = observed("young", Status::Succeeded, chrono::TimeDelta::seconds(2));
        let old = observed(
            "old",
            Status::Succeeded,
            chrono::TimeDelta::milliseconds(8_500),
        );
        let doomed = observed("doomed", Status::Succeeded, chrono::TimeDelta::seconds(9));
        for observed in [&young, &old, &doomed] {
            read_and_keep(&replays, observed);
        }
        assert!(get(&replays, &young).is_some());
        assert!(
            get(&replays, &doomed).is_none(),
            "kept within a second of its purge"
        );
        let cache = replays.lock();
        let lives = |observed: &Observed| {
            let name = cache_key(
                &observed.operation.namespace,
                &observed.operation.operation_key,
            );
            cache.entries[&name].expires_at - Instant::now()
        };
        assert!(lives(&old) <= Duration::from_millis(500));
        assert!(lives(&young) > Duration::from_secs(6));
        assert!(lives(&young) <= Duration::from_secs(7));
    }

    #[test]
    fn memory_is_bounded_and_the_oldest_entries_go_first() {
        let replays = following(
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
            read_and_keep(&replays, observed);
        }
        let cache = replays.lock();
        assert!(cache.bytes <= 4 * ENTRY_OVERHEAD_BYTES);
        assert!(cache.entries.len() < 4);
        drop(cache);
        assert!(get(&replays, &kept[7]).is_some());
        assert!(get(&replays, &kept[0]).is_none());
        for _ in 0..1_000 {
            read_and_keep(&replays, &kept[7]);
        }
        let cache = replays.lock();
        assert!(cache.order.len() <= 2 * cache.entries.len() + 64);
    }
}
