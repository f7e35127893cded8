//! The two loops. Closed: `concurrency` lanes, each sending its next call as
//! soon as the last one answered. Open: calls due at a fixed rate, each sent at
//! its due time (or as soon as one of `concurrency` slots frees up), its
//! latency counted from the due time, so a server that falls behind shows it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::scenario::{Answer, Scenario, Target, stub};

#[derive(Debug)]
pub struct Limits {
    pub calls: Option<u64>,
    pub duration: Option<Duration>,
}

#[derive(Clone, Copy, Debug)]
pub enum Mode {
    Closed,
    Open { rate: f64 },
}

/// What a run measured.
#[derive(Debug)]
pub struct Tally {
    /// Latency of each call, in microseconds.
    pub latency: Histogram<u64>,
    /// Answers by outcome or error reason; a `claim-due` call has one per operation.
    pub answers: BTreeMap<Answer, u64>,
    pub calls: u64,
    pub elapsed: Duration,
}

impl Tally {
    fn new() -> Self {
        Self {
            // 1 µs to 10 minutes at three significant figures.
            latency: Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds"),
            answers: BTreeMap::new(),
            calls: 0,
            elapsed: Duration::ZERO,
        }
    }

    fn record(&mut self, latency: Duration, answers: Vec<Answer>) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency.saturating_record(micros.max(1));
        self.calls += 1;
        for answer in answers {
            *self.answers.entry(answer).or_default() += 1;
        }
    }

    fn merge(&mut self, other: Tally) {
        self.latency
            .add(&other.latency)
            .expect("histograms share bounds");
        self.calls += other.calls;
        for (answer, count) in other.answers {
            *self.answers.entry(answer).or_default() += count;
        }
    }

    /// Operations handled: answers, which a `claim-due` call has several of.
    pub fn operations(&self) -> u64 {
        self.answers.values().sum()
    }
}

pub async fn run(
    target: &Arc<Target>,
    clients: &[opreg_client::Client],
    mode: Mode,
    concurrency: usize,
    limits: &Limits,
) -> Result<Tally, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let until = limits.duration.map(|length| started + length);
    let mut tally = match mode {
        Mode::Closed => closed(target, clients, concurrency, limits.calls, until).await,
        Mode::Open { rate } => {
            if target.scenario == Scenario::ClaimDue {
                return Err("claim-due drains a fixed backlog: it runs closed-loop only".into());
            }
            open(
                Arc::clone(target),
                clients,
                rate,
                concurrency,
                limits.calls,
                until,
            )
            .await
        }
    };
    tally.elapsed = started.elapsed();
    Ok(tally)
}

async fn closed(
    target: &Target,
    clients: &[opreg_client::Client],
    concurrency: usize,
    calls: Option<u64>,
    until: Option<Instant>,
) -> Tally {
    let next = AtomicU64::new(0);
    let drained = AtomicU64::new(0);
    let lanes = (0..concurrency).map(|lane| {
        let mut stub = stub(&clients[lane % clients.len()]);
        let (next, drained) = (&next, &drained);
        async move {
            let mut tally = Tally::new();
            loop {
                if until.is_some_and(|until| Instant::now() >= until) {
                    break;
                }
                let call = next.fetch_add(1, Ordering::Relaxed);
                // claim-due counts operations drained, not calls.
                let done = if target.scenario == Scenario::ClaimDue {
                    drained.load(Ordering::Relaxed)
                } else {
                    call
                };
                if calls.is_some_and(|calls| done >= calls) {
                    break;
                }
                let sent = Instant::now();
                let answers = target.call(&mut stub, call).await;
                if target.scenario == Scenario::ClaimDue {
                    if answers.is_empty() {
                        break;
                    }
                    drained.fetch_add(answers.len() as u64, Ordering::Relaxed);
                }
                tally.record(sent.elapsed(), answers);
            }
            tally
        }
    });
    let mut total = Tally::new();
    for lane in futures::future::join_all(lanes).await {
        total.merge(lane);
    }
    total
}

async fn open(
    target: Arc<Target>,
    clients: &[opreg_client::Client],
    rate: f64,
    concurrency: usize,
    calls: Option<u64>,
    until: Option<Instant>,
) -> Tally {
    let tally = Arc::new(Mutex::new(Tally::new()));
    let slots = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let interval = Duration::from_secs_f64(1.0 / rate);
    let started = Instant::now();
    let mut sending = tokio::task::JoinSet::new();
    for call in 0.. {
        if calls.is_some_and(|calls| call >= calls) {
            break;
        }
        let due = started + interval.mul_f64(call as f64);
        if until.is_some_and(|until| due >= until) {
            break;
        }
        tokio::time::sleep_until(due).await;
        let slot = Arc::clone(&slots)
            .acquire_owned()
            .await
            .expect("never closed");
        let mut stub = stub(&clients[round_robin(call, clients.len())]);
        let (tally, target) = (Arc::clone(&tally), Arc::clone(&target));
        sending.spawn(async move {
            let answers = target.call(&mut stub, call).await;
            tally.lock().unwrap().record(due.elapsed(), answers);
            drop(slot);
        });
        // Reap finished calls as they go, so the set stays small.
        while sending.try_join_next().is_some() {}
    }
    while sending.join_next().await.is_some() {}
    Arc::try_unwrap(tally)
        .expect("every call has finished")
        .into_inner()
        .unwrap()
}

/// The client of the `call`-th call, taking `clients` in turn.
pub(crate) fn round_robin(call: u64, clients: usize) -> usize {
    let turn = call % u64::try_from(clients).expect("a client count fits in u64");
    usize::try_from(turn).expect("below the client count")
}
