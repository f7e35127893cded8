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

pub(super) use claims::Claims;
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

struct Pending<B: Batch> {
    item: B::Item,
    reply: oneshot::Sender<Result<B::Answer>>,
}

/// The queue in front of one kind's writers. Dropping the last clone stops them.
pub(super) struct Gatherer<B: Batch> {
    queue: mpsc::UnboundedSender<Pending<B>>,
}

impl<B: Batch> Clone for Gatherer<B> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
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
        for _ in 0..settings.writers.max(1) {
            tokio::spawn(write_batches::<B>(
                Arc::clone(&receiver),
                sessions.clone(),
                Arc::clone(&store),
                settings.max_batch.max(1),
            ));
        }
        Self { queue }
    }

    /// Writes `item` in the next statement a writer makes.
    pub async fn submit(&self, item: B::Item) -> Result<B::Answer> {
        let (reply, answer) = oneshot::channel();
        if self.queue.send(Pending { item, reply }).is_err() {
            tracing::error!(
                kind = std::any::type_name::<B>(),
                "the writers have stopped"
            );
            return Err(RegistryError::Internal);
        }
        answer.await.unwrap_or_else(|_| {
            tracing::error!(
                kind = std::any::type_name::<B>(),
                "a writer dropped a call unanswered"
            );
            Err(RegistryError::Internal)
        })
    }
}

/// One writer: takes what is queued (waiting only when nothing is) and
/// writes it, until every [`Gatherer`] is gone.
async fn write_batches<B: Batch>(
    receiver: Arc<Mutex<mpsc::UnboundedReceiver<Pending<B>>>>,
    sessions: Sessions,
    store: Arc<StoreHealth>,
    max_batch: usize,
) {
    let mut batch = Vec::with_capacity(max_batch);
    loop {
        if receiver.lock().await.recv_many(&mut batch, max_batch).await == 0 {
            return;
        }
        // A caller that went away needs no answer, and its call no write.
        batch.retain(|pending| !pending.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        B::counted(batch.len());
        let items: Vec<&B::Item> = batch.iter().map(|pending| &pending.item).collect();
        let answers = write::<B>(&sessions, &store, &items).await;
        for (pending, answer) in batch.drain(..).zip(answers) {
            let _ = pending.reply.send(answer);
        }
    }
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
