//! Concurrent Claims gathered into one registration statement.
//!
//! Each Claim of an ordinary (not compensating) operation is queued to a few
//! writer tasks. A writer takes whatever is queued, up to a batch limit, and
//! registers or reads all of it in one statement and one commit
//! ([`operations::register`]). Nothing waits for a batch to fill: an idle
//! writer takes a lone Claim at once, and batches form only while every
//! writer is busy, so low load pays no window and high load shares the
//! statement, the round trip and the WAL flush.
//!
//! A batch answers each Claim as if the Claims had run one after another in
//! the batch's order: the first Claim of a key registers it and any later Claim
//! of that key in the same batch observes the row the first one left.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sqlx::PgConnection;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::claim::{Registration, first_answer, fresh_first_lease};
use crate::domain::commands::ClaimCommand;
use crate::domain::error::{RegistryError, Result};
use crate::store::operations::{self, Observed};
use crate::store::{Sessions, StoreHealth};
use crate::telemetry::metrics;

/// How Claims are gathered.
#[derive(Clone, Copy, Debug)]
pub struct GatherSettings {
    /// Writer tasks, each holding one pooled connection while it writes.
    pub writers: usize,
    /// Most Claims in one statement.
    pub max_batch: usize,
}

/// What a gathered Claim learned: registered, or what exists to decide on;
/// `None` for a key a racing registration had inserted but not committed when
/// the statement began (a later statement sees it).
pub type Gathered = Option<Registration>;

struct Pending {
    claim: ClaimCommand,
    reply: oneshot::Sender<Result<Gathered>>,
}

/// The queue in front of the writers. Dropping the last clone stops them.
#[derive(Clone, Debug)]
pub struct Gatherer {
    queue: mpsc::UnboundedSender<Pending>,
}

impl Gatherer {
    /// Starts the writers on the current runtime.
    pub fn start(sessions: Sessions, store: Arc<StoreHealth>, settings: GatherSettings) -> Self {
        let (queue, receiver) = mpsc::unbounded_channel();
        let receiver = Arc::new(Mutex::new(receiver));
        for _ in 0..settings.writers.max(1) {
            tokio::spawn(write_batches(
                Arc::clone(&receiver),
                sessions.clone(),
                Arc::clone(&store),
                settings.max_batch.max(1),
            ));
        }
        Self { queue }
    }

    /// Registers `claim`'s operation, or reads what exists under its key.
    pub async fn register(&self, claim: &ClaimCommand) -> Result<Gathered> {
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            claim: claim.clone(),
            reply,
        };
        if self.queue.send(pending).is_err() {
            tracing::error!("the claim writers have stopped");
            return Err(RegistryError::Internal);
        }
        answer.await.unwrap_or_else(|_| {
            tracing::error!("a claim writer dropped a claim unanswered");
            Err(RegistryError::Internal)
        })
    }
}

/// One writer: takes what is queued (waiting only when nothing is) and
/// writes it, until every [`Gatherer`] is gone.
async fn write_batches(
    receiver: Arc<Mutex<mpsc::UnboundedReceiver<Pending>>>,
    sessions: Sessions,
    store: Arc<StoreHealth>,
    max_batch: usize,
) {
    let mut batch = Vec::with_capacity(max_batch);
    loop {
        if receiver.lock().await.recv_many(&mut batch, max_batch).await == 0 {
            return;
        }
        // A caller that went away needs no answer, and its claim no write.
        batch.retain(|pending| !pending.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        metrics::claim_batch(batch.len());
        let claims: Vec<&ClaimCommand> = batch.iter().map(|pending| &pending.claim).collect();
        let answers = write(&sessions, &store, &claims).await;
        for (pending, answer) in batch.drain(..).zip(answers) {
            let _ = pending.reply.send(answer);
        }
    }
}

/// Writes one batch; the answers are in `claims`' order.
async fn write(
    sessions: &Sessions,
    store: &StoreHealth,
    claims: &[&ClaimCommand],
) -> Vec<Result<Gathered>> {
    let written = super::run_on(sessions, store, async |db| {
        register_in_order(db, claims).await
    })
    .await;
    match written {
        Ok(answers) => answers,
        // A statement refused for one claim's sake (a row another transaction
        // holds past the lock timeout, a row the database rejects) must not
        // fail the others: each is written alone.
        Err(RegistryError::OperationBusy | RegistryError::Internal) if claims.len() > 1 => {
            let mut answers = Vec::with_capacity(claims.len());
            for claim in claims {
                let alone = super::run_on(sessions, store, async |db| {
                    register_in_order(db, &[claim]).await
                })
                .await;
                answers.push(alone.and_then(|mut answer| answer.remove(0)));
            }
            answers
        }
        Err(error) => claims.iter().map(|_| Err(error.clone())).collect(),
    }
}

/// The statement for the distinct keys, then the answers in sequence: a
/// later claim of a key observes what the first one left.
async fn register_in_order(
    db: &mut PgConnection,
    claims: &[&ClaimCommand],
) -> Result<Vec<Result<Gathered>>> {
    let mut seen = HashSet::new();
    let distinct: Vec<&ClaimCommand> = claims
        .iter()
        .filter(|claim| seen.insert(claim.identity()))
        .copied()
        .collect();
    let mut found: HashMap<(&str, &str), Option<operations::Registration>> = distinct
        .iter()
        .map(|claim| claim.identity())
        .zip(operations::register(&mut *db, &distinct).await?)
        .collect();
    let mut left: HashMap<(&str, &str), Observed> = HashMap::new();
    let mut answers = Vec::with_capacity(claims.len());
    for claim in claims {
        let key = claim.identity();
        if let Some(observed) = left.get(&key) {
            answers.push(Ok(Some(Registration::Exists(observed.clone()))));
            continue;
        }
        let answer = match found.remove(&key).flatten() {
            None => Ok(None),
            Some(operations::Registration::Existing(observed)) => {
                left.insert(key, observed.clone());
                Ok(Some(Registration::Exists(observed)))
            }
            Some(operations::Registration::Inserted(registered)) => {
                let returned_at = registered.returned_at;
                fresh_first_lease(db, registered, claim)
                    .await
                    .map(|operation| {
                        left.insert(
                            key,
                            Observed {
                                operation: operation.clone(),
                                db_now: returned_at,
                            },
                        );
                        Some(Registration::Registered(first_answer(claim, operation)))
                    })
            }
        };
        answers.push(answer);
    }
    Ok(answers)
}
