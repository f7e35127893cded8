//! Concurrent calls gathered into one statement and one commit.
//!
//! Each gathered call is queued to a few writer tasks. A writer takes whatever
//! is queued, up to a batch limit, and writes all of it in one statement on one
//! pooled connection. Nothing waits for a batch to fill: an idle writer takes a
//! lone call at once, and batches form only while every writer is busy, so low
//! load pays no window and high load shares the statement, the round trip and
//! the WAL flush.
//!
//! Two kinds of calls are gathered, each by its own writers: ordinary Claims
//! ([`claims`]) and the reports of current lease holders ([`reports`]).

mod claims;
mod reports;

use std::future::Future;
use std::sync::Arc;

use sqlx::PgConnection;
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::domain::error::{RegistryError, Result};
use crate::store::{Sessions, StoreHealth};

pub(super) use claims::{Claims, Gathered, register_in_order};
pub(super) use reports::Reports;

/// How many writers a kind of call has, and how much one statement takes.
#[derive(Clone, Copy, Debug)]
pub struct GatherSettings {
    /// Writer tasks, each holding one pooled connection while it writes.
    pub writers: usize,
    /// Most calls in one statement.
    pub max_batch: usize,
}

/// A kind of call that is written in batches.
pub(super) trait Batch: Send + Sync + 'static {
    type Item: Send + Sync + 'static;
    type Answer: Send + 'static;

    /// Counts one statement of `items` calls.
    fn counted(items: usize);

    /// Writes `items` on one connection; the answers are in their order.
    fn write<'a>(
        db: &'a mut PgConnection,
        items: &'a [&'a Self::Item],
    ) -> impl Future<Output = Result<Vec<Result<Self::Answer>>>> + Send + 'a;
}

/// Calls submitted together (one call, or a chunk of a batch call), answered
/// together in their order.
struct Pending<B: Batch> {
    items: Vec<B::Item>,
    reply: oneshot::Sender<Vec<Result<B::Answer>>>,
}

/// The queue in front of one kind's writers. Dropping the last clone stops them.
pub(super) struct Gatherer<B: Batch> {
    queue: mpsc::UnboundedSender<Pending<B>>,
    /// Most calls in one statement, and so in one queued chunk.
    max_batch: usize,
}

impl<B: Batch> Clone for Gatherer<B> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            max_batch: self.max_batch,
        }
    }
}

impl<B: Batch> std::fmt::Debug for Gatherer<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gatherer")
            .field("kind", &std::any::type_name::<B>())
            .finish_non_exhaustive()
    }
}

impl<B: Batch> Gatherer<B> {
    /// Starts the writers on the current runtime.
    pub fn start(sessions: Sessions, store: Arc<StoreHealth>, settings: GatherSettings) -> Self {
        let (queue, receiver) = mpsc::unbounded_channel();
        let receiver = Arc::new(Mutex::new(receiver));
        let max_batch = settings.max_batch.max(1);
        for _ in 0..settings.writers.max(1) {
            tokio::spawn(write_batches::<B>(
                Arc::clone(&receiver),
                sessions.clone(),
                Arc::clone(&store),
                max_batch,
            ));
        }
        Self { queue, max_batch }
    }

    /// Writes `item` in the next statement a writer makes.
    pub async fn submit(&self, item: B::Item) -> Result<B::Answer> {
        self.submit_all(vec![item])
            .await
            .pop()
            .unwrap_or(Err(RegistryError::Internal))
    }

    /// Writes `items` in as few statements as the batch limit allows, queued
    /// as whole chunks so that no writer splits them further; the answers are
    /// in `items`' order, as if each had been submitted alone in that order.
    pub async fn submit_all(&self, items: Vec<B::Item>) -> Vec<Result<B::Answer>> {
        let total = items.len();
        let mut replies = Vec::with_capacity(total.div_ceil(self.max_batch).max(1));
        let mut items = items.into_iter();
        loop {
            let chunk: Vec<B::Item> = items.by_ref().take(self.max_batch).collect();
            if chunk.is_empty() {
                break;
            }
            let size = chunk.len();
            let (reply, answer) = oneshot::channel();
            if self
                .queue
                .send(Pending {
                    items: chunk,
                    reply,
                })
                .is_err()
            {
                tracing::error!(
                    kind = std::any::type_name::<B>(),
                    "the writers have stopped"
                );
            }
            replies.push((size, answer));
        }
        let mut answers = Vec::with_capacity(total);
        for (size, answer) in replies {
            match answer.await {
                Ok(chunk) => answers.extend(chunk),
                Err(_) => {
                    tracing::error!(
                        kind = std::any::type_name::<B>(),
                        "a writer dropped calls unanswered"
                    );
                    answers.extend((0..size).map(|_| Err(RegistryError::Internal)));
                }
            }
        }
        answers
    }
}

/// One writer: takes what is queued (waiting only when nothing is), up to
/// the batch limit in calls, and writes it, until every [`Gatherer`] is gone.
async fn write_batches<B: Batch>(
    receiver: Arc<Mutex<mpsc::UnboundedReceiver<Pending<B>>>>,
    sessions: Sessions,
    store: Arc<StoreHealth>,
    max_batch: usize,
) {
    let mut batch: Vec<Pending<B>> = Vec::new();
    loop {
        if !take_queued(&receiver, &mut batch, max_batch).await {
            return;
        }
        // A caller that went away needs no answer, and its calls no write.
        batch.retain(|pending| !pending.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        // Chunks are at most `max_batch` calls, so past the first chunk the
        // batch may overrun the limit by one chunk: split it again.
        let items: Vec<&B::Item> = batch.iter().flat_map(|pending| &pending.items).collect();
        let mut answers = Vec::with_capacity(items.len());
        for statement in items.chunks(max_batch) {
            B::counted(statement.len());
            answers.extend(write::<B>(&sessions, &store, statement).await);
        }
        let mut answers = answers.into_iter();
        for pending in batch.drain(..) {
            let mine = answers.by_ref().take(pending.items.len()).collect();
            let _ = pending.reply.send(mine);
        }
    }
}

/// Waits for one queued chunk, then takes more while they are queued and the
/// batch holds fewer than `max_batch` calls; `false` once the queue is closed.
async fn take_queued<B: Batch>(
    receiver: &Mutex<mpsc::UnboundedReceiver<Pending<B>>>,
    batch: &mut Vec<Pending<B>>,
    max_batch: usize,
) -> bool {
    let mut receiver = receiver.lock().await;
    let Some(first) = receiver.recv().await else {
        return false;
    };
    let mut calls = first.items.len();
    batch.push(first);
    while calls < max_batch {
        let Ok(next) = receiver.try_recv() else {
            break;
        };
        calls += next.items.len();
        batch.push(next);
    }
    true
}

/// Writes one batch; the answers are in `items`' order.
async fn write<B: Batch>(
    sessions: &Sessions,
    store: &StoreHealth,
    items: &[&B::Item],
) -> Vec<Result<B::Answer>> {
    let written = super::run_on(sessions, store, async |db| B::write(db, items).await).await;
    match written {
        Ok(answers) => answers,
        // A statement refused for one call's sake (a row another transaction
        // holds past the lock timeout, a row the database rejects) must not
        // fail the others: each is written alone.
        Err(RegistryError::OperationBusy | RegistryError::Internal) if items.len() > 1 => {
            let mut answers = Vec::with_capacity(items.len());
            for item in items {
                let alone =
                    super::run_on(sessions, store, async |db| B::write(db, &[*item]).await).await;
                answers.push(alone.and_then(|mut answer| answer.remove(0)));
            }
            answers
        }
        Err(error) => items.iter().map(|_| Err(error.clone())).collect(),
    }
}
