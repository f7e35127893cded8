//! A load generator for opreg: three scenarios, each for a fixed number of
//! calls over several connections, printing throughput and latency.
//!
//!     cargo run --release -p opreg-client --example load -- [ENDPOINT] [CALLS] [CONCURRENCY]
//!
//! Scenarios: `new-keys` (every Claim registers), `duplicate-key` (every Claim
//! hits one existing key), `lifecycle` (Claim then Complete, new keys).
//! Bounded in calls and time; it targets only the endpoint it is given.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use opreg_client::proto::{self as pb, complete_request::Outcome};
use opreg_client::{Client, parameters};
use serde_json::json;
use tokio::sync::Mutex;

const CONNECTIONS: usize = 8;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:50051".into());
    let calls: usize = args.next().map_or(Ok(20_000), |n| n.parse())?;
    let concurrency: usize = args.next().map_or(Ok(64), |n| n.parse())?;
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        clients.push(Client::connect(endpoint.clone()).await?);
    }
    let run = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)?
        .as_micros();
    println!(
        "endpoint {endpoint}, {calls} calls per scenario, {concurrency} in flight, {CONNECTIONS} connections"
    );
    for scenario in ["new-keys", "duplicate-key", "lifecycle"] {
        let namespace = format!("load-{run}-{scenario}");
        if scenario == "duplicate-key" {
            clients[0].claim(request(&namespace, "hot", "seed")).await?;
        }
        let report = drive(&clients, scenario, &namespace, calls, concurrency).await;
        report.print(scenario);
    }
    Ok(())
}

fn request(namespace: &str, key: &str, owner: &str) -> pb::ClaimRequest {
    pb::ClaimRequest {
        namespace: namespace.into(),
        operation_key: key.into(),
        fingerprint: Some(pb::claim_request::Fingerprint::Parameters(parameters(
            json!({"amount": 100, "account": "A"}),
        ))),
        owner: owner.into(),
        ..Default::default()
    }
}

struct Report {
    elapsed: Duration,
    latencies: Vec<Duration>,
    errors: usize,
    rpcs_per_call: usize,
}

impl Report {
    fn print(mut self, scenario: &str) {
        self.latencies.sort();
        let at = |q: f64| {
            let index = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
            self.latencies.get(index).copied().unwrap_or_default()
        };
        let calls = self.latencies.len() + self.errors;
        println!(
            "{scenario:>14}: {calls} calls in {:.2}s = {:.0} calls/s ({} RPCs each), p50 {:.2}ms p90 {:.2}ms p99 {:.2}ms max {:.2}ms, {} errors",
            self.elapsed.as_secs_f64(),
            calls as f64 / self.elapsed.as_secs_f64(),
            self.rpcs_per_call,
            at(0.5).as_secs_f64() * 1e3,
            at(0.9).as_secs_f64() * 1e3,
            at(0.99).as_secs_f64() * 1e3,
            at(1.0).as_secs_f64() * 1e3,
            self.errors,
        );
    }
}

async fn drive(
    clients: &[Client],
    scenario: &'static str,
    namespace: &str,
    calls: usize,
    concurrency: usize,
) -> Report {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let results = Arc::new(Mutex::new((Vec::with_capacity(calls), 0usize)));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..concurrency {
        let client = clients[worker % clients.len()].clone();
        let (next, results, namespace) = (next.clone(), results.clone(), namespace.to_owned());
        workers.spawn(async move {
            loop {
                let call = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if call >= calls {
                    return;
                }
                let began = Instant::now();
                let ok = one_call(&client, scenario, &namespace, call).await;
                let mut results = results.lock().await;
                if ok {
                    results.0.push(began.elapsed());
                } else {
                    results.1 += 1;
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
    let elapsed = started.elapsed();
    let (latencies, errors) = std::mem::take(&mut *results.lock().await);
    Report {
        elapsed,
        latencies,
        errors,
        rpcs_per_call: if scenario == "lifecycle" { 2 } else { 1 },
    }
}

async fn one_call(client: &Client, scenario: &str, namespace: &str, call: usize) -> bool {
    let key = match scenario {
        "duplicate-key" => "hot".to_owned(),
        _ => format!("key-{call}"),
    };
    let Ok(claimed) = client
        .claim(request(namespace, &key, &format!("worker-{call}")))
        .await
    else {
        return false;
    };
    if scenario != "lifecycle" {
        return true;
    }
    let Some(lease) = claimed.lease else {
        return false;
    };
    let complete = pb::CompleteRequest {
        namespace: namespace.into(),
        operation_key: key,
        fencing_token: lease.fencing_token,
        outcome: Some(Outcome::Success(pb::Success {
            result: b"done".to_vec(),
            result_ref: String::new(),
        })),
    };
    client.complete(complete).await.is_ok()
}
