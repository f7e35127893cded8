//! The calls waiting on this replica for an operation to move, by key. A
//! change notice for a key (registry/replays/follow.rs) wakes exactly that
//! key's waiters; a lost or restarted listening session wakes all of them,
//! since notices may have been missed; shutdown wakes all of them for good.
//! A waiter holds no database connection, only its place here.
//!
//! Each key also remembers whether one of its waiters here marked the row
//! watched since the key's last notice. A notice forgets it: the row may
//! have gone (and come back unmarked) or finished, so the next waiter to
//! sleep on it marks it again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OnceCell, watch};
use tokio::time::Instant;

use crate::domain::error::RegistryError;
use crate::domain::ids::{Namespace, OperationKey};
use crate::telemetry::metrics;

/// How long calls may wait, and how many at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitSettings {
    /// The longest wait granted; zero turns waiting off (calls are answered
    /// at once, as by a server that does not wait).
    pub max_wait: Duration,
    /// Waiting calls on this replica at once; more are refused.
    pub max_waiters: usize,
}

/// What a caller refused for the limit is told to wait before asking again:
/// long enough for some waits to end.
const REFUSED_RETRY_AFTER: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct Waiters {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    settings: WaitSettings,
    by_key: Mutex<ByKey>,
    /// Bumped when any waiter may have missed a notice.
    everyone: watch::Sender<u64>,
    /// Set once the replica shuts down.
    closing: watch::Sender<bool>,
}

#[derive(Debug, Default)]
struct ByKey {
    keys: HashMap<(String, String), Watched>,
    waiting: usize,
}

/// One key's waiters: the last time a notice for it arrived, whether one of
/// them marked its row watched since, and how many wait on it (the entry
/// goes with the last).
#[derive(Debug)]
struct Watched {
    noticed: watch::Sender<Option<Instant>>,
    marked: Arc<OnceCell<()>>,
    waiters: usize,
}

/// Why a waiter stopped sleeping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// A notice for its key.
    Heard,
    /// Every waiter was woken: notices may have been missed.
    Everyone,
    /// The time it asked for came.
    Timer,
    /// The replica shuts down.
    Closing,
}

impl Waiters {
    pub fn new(settings: WaitSettings) -> Self {
        Self {
            shared: Arc::new(Shared {
                settings,
                by_key: Mutex::default(),
                everyone: watch::Sender::new(0),
                closing: watch::Sender::new(false),
            }),
        }
    }

    /// Whether this replica waits at all (waiting not turned off).
    pub fn enabled(&self) -> bool {
        !self.shared.settings.max_wait.is_zero()
    }

    /// The wait granted for `asked`: at most the configured maximum. `None`
    /// while this replica does not wait (off, or shutting down): the call is
    /// answered at once and says so by leaving `waited` unset.
    pub fn granted(&self, asked: Duration) -> Option<Duration> {
        (self.enabled() && !*self.shared.closing.borrow())
            .then(|| asked.min(self.shared.settings.max_wait))
    }

    /// A place among the waiters of `namespace`/`key`, or TOO_MANY_WAITERS.
    pub fn enter(
        &self,
        namespace: &Namespace,
        key: &OperationKey,
    ) -> Result<Waiter, RegistryError> {
        let limit = self.shared.settings.max_waiters;
        let identity = (namespace.as_str().to_owned(), key.as_str().to_owned());
        let mut by_key = lock(&self.shared.by_key);
        if by_key.waiting >= limit {
            return Err(RegistryError::TooManyWaiters {
                limit,
                retry_after: REFUSED_RETRY_AFTER,
            });
        }
        by_key.waiting += 1;
        let watched = by_key
            .keys
            .entry(identity.clone())
            .or_insert_with(|| Watched {
                noticed: watch::Sender::new(None),
                marked: Arc::default(),
                waiters: 0,
            });
        watched.waiters += 1;
        Ok(Waiter {
            asleep: false,
            noticed: watched.noticed.subscribe(),
            everyone: self.shared.everyone.subscribe(),
            closing: self.shared.closing.subscribe(),
            identity,
            shared: Arc::clone(&self.shared),
        })
    }

    /// A change of this key committed: its waiters read it again, and the
    /// row is marked again before any of them sleeps.
    pub fn wake(&self, namespace: &str, key: &str) {
        let mut by_key = lock(&self.shared.by_key);
        if let Some(watched) = by_key.keys.get_mut(&(namespace.to_owned(), key.to_owned())) {
            watched.marked = Arc::default();
            watched.noticed.send_replace(Some(Instant::now()));
        }
    }

    /// Notices may have been missed: every waiter reads its operation again,
    /// and every row is marked again.
    pub fn wake_all(&self) {
        let mut by_key = lock(&self.shared.by_key);
        for watched in by_key.keys.values_mut() {
            watched.marked = Arc::default();
        }
        self.shared
            .everyone
            .send_modify(|generation| *generation += 1);
    }

    /// The replica shuts down: every waiter answers now, and later calls do
    /// not wait.
    pub fn close(&self) {
        self.shared.closing.send_replace(true);
    }

    /// Calls waiting now.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        lock(&self.shared.by_key).waiting
    }
}

/// One waiting call's place; it leaves when dropped.
#[derive(Debug)]
pub struct Waiter {
    /// Counted in the waiters gauge: it has slept at least once.
    asleep: bool,
    noticed: watch::Receiver<Option<Instant>>,
    everyone: watch::Receiver<u64>,
    closing: watch::Receiver<bool>,
    identity: (String, String),
    shared: Arc<Shared>,
}

impl Waiter {
    /// Marks everything heard so far as seen: only what arrives after this
    /// wakes the next sleep. Called before each read of the operation, so a
    /// change that commits after the read's snapshot is never slept through.
    pub fn settle(&mut self) {
        self.noticed.borrow_and_update();
        self.everyone.borrow_and_update();
    }

    /// Sleeps until a notice is heard, `until` comes, or the replica closes.
    pub async fn sleep_until(&mut self, until: Instant) -> Wake {
        if !self.asleep {
            self.asleep = true;
            metrics::waiters(1.0);
        }
        if *self.closing.borrow() {
            return Wake::Closing;
        }
        tokio::select! {
            _ = self.noticed.changed() => Wake::Heard,
            _ = self.everyone.changed() => Wake::Everyone,
            _ = self.closing.wait_for(|closing| *closing) => Wake::Closing,
            () = tokio::time::sleep_until(until) => Wake::Timer,
        }
    }

    /// Whether a waiter of this replica marked the row watched (and that
    /// mark committed) since the key's last notice. Asked before a read: then
    /// every change after the read's snapshot sends a notice.
    pub fn watched(&self) -> bool {
        self.marked().initialized()
    }

    /// Marks the row watched with `mark`, once per key until its next
    /// notice: the key's other waiters that need the mark meanwhile wait for
    /// that one (their `mark` is never polled).
    pub async fn mark_watched<E>(
        &self,
        mark: impl Future<Output = Result<(), E>>,
    ) -> Result<(), E> {
        self.marked().get_or_try_init(|| mark).await.map(|_| ())
    }

    /// The key's current mark.
    fn marked(&self) -> Arc<OnceCell<()>> {
        lock(&self.shared.by_key)
            .keys
            .get(&self.identity)
            .map(|watched| Arc::clone(&watched.marked))
            .unwrap_or_default()
    }

    /// When the last notice for this key arrived, if one did.
    pub fn noticed_at(&self) -> Option<Instant> {
        *self.noticed.borrow()
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut by_key = lock(&self.shared.by_key);
        by_key.waiting = by_key.waiting.saturating_sub(1);
        if self.asleep {
            metrics::waiters(-1.0);
        }
        if let Some(watched) = by_key.keys.get_mut(&self.identity) {
            watched.waiters = watched.waiters.saturating_sub(1);
            if watched.waiters == 0 {
                by_key.keys.remove(&self.identity);
            }
        }
    }
}

fn lock(by_key: &Mutex<ByKey>) -> std::sync::MutexGuard<'_, ByKey> {
    by_key
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiters(max_waiters: usize) -> Waiters {
        Waiters::new(WaitSettings {
            max_wait: Duration::from_secs(60),
            max_waiters,
        })
    }

    fn key(name: &str) -> (Namespace, OperationKey) {
        (
            Namespace::from_stored("ns".into()),
            OperationKey::from_stored(name.into()),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_notice_wakes_the_waiters_of_its_key_only() {
        let waiters = waiters(10);
        let (namespace, a) = key("a");
        let (_, b) = key("b");
        let mut on_a = waiters.enter(&namespace, &a).unwrap();
        let mut on_b = waiters.enter(&namespace, &b).unwrap();
        on_a.settle();
        on_b.settle();
        waiters.wake("ns", "a");
        let later = Instant::now() + Duration::from_secs(1);
        assert_eq!(on_a.sleep_until(later).await, Wake::Heard);
        assert!(on_a.noticed_at().is_some());
        assert_eq!(on_b.sleep_until(later).await, Wake::Timer);
    }

    #[tokio::test(start_paused = true)]
    async fn a_notice_between_the_read_and_the_sleep_is_not_slept_through() {
        let waiters = waiters(10);
        let (namespace, a) = key("a");
        let mut waiter = waiters.enter(&namespace, &a).unwrap();
        waiter.settle();
        // The read happens here; the change commits before the sleep starts.
        waiters.wake("ns", "a");
        let later = Instant::now() + Duration::from_secs(1);
        assert_eq!(waiter.sleep_until(later).await, Wake::Heard);
        waiter.settle();
        assert_eq!(waiter.sleep_until(later).await, Wake::Timer);
    }

    #[tokio::test(start_paused = true)]
    async fn losing_the_session_wakes_everyone_and_closing_answers_everyone() {
        let waiters = waiters(10);
        let (namespace, a) = key("a");
        let mut waiter = waiters.enter(&namespace, &a).unwrap();
        waiter.settle();
        waiters.wake_all();
        let later = Instant::now() + Duration::from_secs(1);
        assert_eq!(waiter.sleep_until(later).await, Wake::Everyone);
        waiters.close();
        assert_eq!(waiter.sleep_until(later).await, Wake::Closing);
        assert_eq!(waiters.granted(Duration::from_secs(5)), None);
    }

    #[tokio::test]
    async fn the_mark_is_shared_by_a_keys_waiters_and_goes_with_the_last() {
        let waiters = waiters(10);
        let (namespace, a) = key("a");
        let first = waiters.enter(&namespace, &a).unwrap();
        assert!(!first.watched());
        let marks = std::sync::atomic::AtomicUsize::new(0);
        let mark = || async {
            marks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, ()>(())
        };
        first.mark_watched(mark()).await.unwrap();
        let second = waiters.enter(&namespace, &a).unwrap();
        assert!(second.watched());
        second.mark_watched(mark()).await.unwrap();
        assert_eq!(
            marks.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "marked once"
        );
        waiters.wake("ns", "a");
        assert!(!second.watched(), "a notice forgets the mark");
        second.mark_watched(mark()).await.unwrap();
        assert_eq!(marks.into_inner(), 2, "marked again after the notice");
        drop((first, second));
        assert!(!waiters.enter(&namespace, &a).unwrap().watched());
    }

    #[test]
    fn the_limit_refuses_and_leaving_frees_a_place() {
        let waiters = waiters(2);
        let (namespace, a) = key("a");
        let first = waiters.enter(&namespace, &a).unwrap();
        let _second = waiters.enter(&namespace, &a).unwrap();
        assert!(matches!(
            waiters.enter(&namespace, &a),
            Err(RegistryError::TooManyWaiters { limit: 2, .. })
        ));
        drop(first);
        assert_eq!(waiters.waiting(), 1);
        assert!(waiters.enter(&namespace, &a).is_ok());
    }

    #[test]
    fn waits_are_capped_and_off_when_the_maximum_is_zero() {
        assert_eq!(
            waiters(1).granted(Duration::from_secs(600)),
            Some(Duration::from_secs(60))
        );
        let off = Waiters::new(WaitSettings {
            max_wait: Duration::ZERO,
            max_waiters: 1,
        });
        assert_eq!(off.granted(Duration::from_secs(5)), None);
    }
}
