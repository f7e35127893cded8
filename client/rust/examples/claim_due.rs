//! Measures the durable queue: how fast ClaimDue hands out due retries to
//! several pullers, alone and with each handed operation completed.
//!
//!     cargo run --release -p opreg-client --example claim_due -- [ENDPOINT] [OPERATIONS] [PULLERS] [LIMIT]
//!
//! Seeds OPERATIONS due retries (Claim, then Complete retryable with
//! retry_after 0) in a fresh namespace per phase, then:
//! - `handout`: PULLERS loop ClaimDue(LIMIT) until the queue is empty;
//! - `drain`: the same, and every handed operation is completed (success)
//!   before that puller asks again, as a worker would.
//!
//! Checks that no operation was handed out twice. Bounded in operations; it
//! targets only the endpoint it is given.

use std::collections::HashSet;
use std::time::{Instant, SystemTime};

use opreg_client::proto::{self as pb, complete_request::Outcome};
use opreg_client::{Client, parameters};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:50051".into());
    let operations: usize = args.next().map_or(Ok(10_000), |n| n.parse())?;
    let pullers: usize = args.next().map_or(Ok(4), |n| n.parse())?;
    let limit: u32 = args.next().map_or(Ok(100), |n| n.parse())?;
    let client = Client::connect(endpoint.clone()).await?;
    let run = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)?
        .as_micros();
    println!("endpoint {endpoint}, {operations} due retries, {pullers} pullers, limit {limit}");
    for phase in ["handout", "drain"] {
        let namespace = format!("queue-{run}-{phase}");
        let seeding = Instant::now();
        seed(&client, &namespace, operations).await?;
        println!(
            "{phase:>8}: seeded {operations} due retries in {:.2}s",
            seeding.elapsed().as_secs_f64()
        );
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for puller in 0..pullers {
            let client = Client::connect(endpoint.clone()).await?;
            let namespace = namespace.clone();
            let complete = phase == "drain";
            tasks.spawn(async move { pull(&client, &namespace, puller, limit, complete).await });
        }
        let mut keys = HashSet::new();
        let mut handed = 0usize;
        let mut calls = 0usize;
        while let Some(done) = tasks.join_next().await {
            let (pulled, puller_calls) = done??;
            handed += pulled.len();
            calls += puller_calls;
            keys.extend(pulled);
        }
        let elapsed = started.elapsed().as_secs_f64();
        assert_eq!(keys.len(), handed, "an operation was handed out twice");
        println!(
            "{phase:>8}: {handed} operations in {elapsed:.2}s = {:.0} operations/s ({calls} ClaimDue calls)",
            handed as f64 / elapsed
        );
    }
    Ok(())
}

/// Registers `operations` keys and leaves each a retry due now.
async fn seed(
    client: &Client,
    namespace: &str,
    operations: usize,
) -> Result<(), opreg_client::Error> {
    let mut tasks = tokio::task::JoinSet::new();
    for lane in 0..32 {
        let (client, namespace) = (client.clone(), namespace.to_owned());
        tasks.spawn(async move {
            for i in (lane..operations).step_by(32) {
                let key = format!("retry-{i}");
                let claimed = client
                    .claim(pb::ClaimRequest {
                        namespace: namespace.clone(),
                        operation_key: key.clone(),
                        fingerprint: Some(pb::claim_request::Fingerprint::Parameters(parameters(
                            json!({"n": i}),
                        ))),
                        owner: "seed".into(),
                        ..Default::default()
                    })
                    .await?;
                let token = claimed.lease.map_or(0, |lease| lease.fencing_token);
                let retry = Outcome::Retryable(pb::RetryableError {
                    error_class: "seed".into(),
                    message: String::new(),
                    retry_after: Some(prost_types::Duration::default()),
                });
                client
                    .complete(complete(&namespace, key, token, retry))
                    .await?;
            }
            Ok::<_, opreg_client::Error>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a seeding task")?;
    }
    Ok(())
}

/// Pulls until the queue is empty; with `complete`, completes each page first.
async fn pull(
    client: &Client,
    namespace: &str,
    puller: usize,
    limit: u32,
    complete_each: bool,
) -> Result<(Vec<String>, usize), opreg_client::Error> {
    let mut keys = Vec::new();
    let mut calls = 0;
    loop {
        calls += 1;
        let page = client
            .claim_due(pb::ClaimDueRequest {
                namespace: namespace.into(),
                owner: format!("puller-{puller}"),
                limit,
                ..Default::default()
            })
            .await?
            .operations;
        if page.is_empty() {
            return Ok((keys, calls));
        }
        let mut completions = tokio::task::JoinSet::new();
        for due in page {
            let operation = due.operation.unwrap_or_default();
            keys.push(operation.operation_key.clone());
            if complete_each {
                let client = client.clone();
                let token = due.lease.map_or(0, |lease| lease.fencing_token);
                let request = complete(
                    namespace,
                    operation.operation_key,
                    token,
                    Outcome::Success(pb::Success::default()),
                );
                completions.spawn(async move { client.complete(request).await.map(|_| ()) });
            }
        }
        while let Some(done) = completions.join_next().await {
            done.expect("a completion task")?;
        }
    }
}

fn complete(namespace: &str, key: String, token: u64, outcome: Outcome) -> pb::CompleteRequest {
    pb::CompleteRequest {
        namespace: namespace.into(),
        operation_key: key,
        fencing_token: token,
        outcome: Some(outcome),
    }
}
