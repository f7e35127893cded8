//! The Rust worker helper against the real server: due work runs once across
//! workers, unknown outcomes go to the reconcile callback, a stop drains.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use opreg_client::proto::{self as pb, OperationStatus};
use opreg_client::{Client, Success, Verdict, WorkError, Worker, WorkerReport};
use serde_json::json;

const NS: &str = "payouts";

/// How often each key's handler ran.
type Runs = Arc<Mutex<HashMap<String, u32>>>;

fn counting_worker(client: &Client, owner: &str, runs: &Runs) -> Worker {
    let runs = Arc::clone(runs);
    Worker::new(client, NS)
        .owner(owner)
        .poll_interval(Duration::from_millis(20))
        .max_in_flight(8)
        .handler("payout", move |operation: pb::Operation, _lease| {
            let runs = Arc::clone(&runs);
            async move {
                *runs
                    .lock()
                    .unwrap()
                    .entry(operation.operation_key.clone())
                    .or_default() += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(Success::new(format!("paid {}", operation.operation_key)))
            }
        })
}

async fn statuses(app: &TestApp) -> HashMap<String, String> {
    sqlx::query_as::<_, (String, String)>("SELECT operation_key, status FROM operations")
        .fetch_all(&app.db)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

async fn until_settled(app: &TestApp, expected: usize) {
    for _ in 0..400 {
        let settled = app
            .count("SELECT count(*) FROM operations WHERE status IN ('succeeded', 'failed')")
            .await;
        if usize::try_from(settled).unwrap() >= expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the workers did not settle {expected} operations");
}

#[tokio::test]
async fn two_workers_run_every_due_retry_and_takeover_exactly_once() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    for i in 0..40 {
        settle(
            &mut client,
            NS,
            &format!("payout:{i}"),
            retryable(Some(Duration::ZERO)),
        )
        .await;
        claim(
            &mut client,
            claim_request(NS, &format!("payout:stalled-{i}"), "crashed", json!({})),
        )
        .await;
    }
    sqlx::query(
        "UPDATE operations SET lease_expires_at = clock_timestamp() WHERE status = 'in_progress'",
    )
    .execute(&app.db)
    .await
    .unwrap();

    let runs: Runs = Arc::default();
    let typed = opreg_client::Client::connect(app.endpoint.clone())
        .await
        .unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    for owner in ["worker-a", "worker-b"] {
        let worker = counting_worker(&typed, owner, &runs);
        let mut stopped = stopped.clone();
        workers.push(tokio::spawn(worker.run(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        })));
    }
    until_settled(&app, 80).await;
    stop.send(true).unwrap();
    let mut handed = 0;
    for worker in workers {
        let report: WorkerReport = worker.await.unwrap().unwrap();
        assert_eq!(report.other, 0, "{report:?}");
        handed += report.handed;
    }
    assert_eq!(handed, 80);
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 80);
    assert!(
        runs.values().all(|&n| n == 1),
        "a handler ran twice: {runs:?}"
    );
    assert!(
        statuses(&app)
            .await
            .values()
            .all(|status| status == "succeeded")
    );
}

#[tokio::test]
async fn unknown_outcomes_go_to_the_reconcile_callback() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    settle(&mut client, NS, "payout:paid", unknown("psp-paid")).await;
    settle(&mut client, NS, "payout:lost", unknown("psp-lost")).await;
    let typed = opreg_client::Client::connect(app.endpoint.clone())
        .await
        .unwrap();
    let runs: Runs = Arc::default();
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let asked_by_worker = Arc::clone(&asked);
    let worker = counting_worker(&typed, "reconciler", &runs).reconcile(
        move |operation: pb::Operation, _lease, remote_ref: String| {
            asked_by_worker.lock().unwrap().push(remote_ref.clone());
            async move {
                if operation.operation_key.ends_with("paid") {
                    Verdict::Succeeded(Success::new("found at the PSP"))
                } else {
                    Verdict::NotApplied
                }
            }
        },
    );
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(worker.run(async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    }));
    until_settled(&app, 2).await;
    stop.send(true).unwrap();
    let report = running.await.unwrap().unwrap();
    assert_eq!(report.succeeded, 2);

    let mut asked = asked.lock().unwrap().clone();
    asked.sort();
    assert_eq!(asked, ["psp-lost", "psp-paid"]);
    let paid = lookup_history(&mut client, NS, "payout:paid")
        .await
        .operation
        .unwrap();
    assert_eq!(
        paid.result, b"found at the PSP",
        "reconciled, not re-executed"
    );
    let lost = lookup_history(&mut client, NS, "payout:lost")
        .await
        .operation
        .unwrap();
    assert_eq!(
        lost.result, b"paid payout:lost",
        "not applied: executed under the reconcile lease"
    );
    assert_eq!(runs.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_stop_lets_running_work_finish_within_the_grace_and_drops_it_after() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    settle(
        &mut client,
        NS,
        "slow:quick-enough",
        retryable(Some(Duration::ZERO)),
    )
    .await;
    let typed = opreg_client::Client::connect(app.endpoint.clone())
        .await
        .unwrap();
    let started = Arc::new(tokio::sync::Notify::new());
    let worker = |grace: Duration, work: Duration| {
        let started = Arc::clone(&started);
        Worker::new(&typed, NS)
            .poll_interval(Duration::from_millis(20))
            .grace(grace)
            .default_handler(move |_operation, _lease| {
                let started = Arc::clone(&started);
                async move {
                    started.notify_one();
                    tokio::time::sleep(work).await;
                    Ok::<_, WorkError>(Success::new("done"))
                }
            })
    };

    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(
        worker(Duration::from_secs(5), Duration::from_millis(300)).run(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }),
    );
    started.notified().await;
    stop.send(true).unwrap();
    let report = running.await.unwrap().unwrap();
    assert_eq!((report.succeeded, report.abandoned), (1, 0), "{report:?}");

    settle(
        &mut client,
        NS,
        "slow:too-slow",
        retryable(Some(Duration::ZERO)),
    )
    .await;
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(
        worker(Duration::from_millis(100), Duration::from_secs(30)).run(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }),
    );
    started.notified().await;
    stop.send(true).unwrap();
    let report = running.await.unwrap().unwrap();
    assert_eq!(report.abandoned, 1, "{report:?}");
    let abandoned = lookup_history(&mut client, NS, "slow:too-slow")
        .await
        .operation
        .unwrap();
    assert_eq!(
        abandoned.status(),
        OperationStatus::InProgress,
        "nothing recorded; the lease lapses"
    );
}

#[tokio::test]
async fn an_operation_no_handler_takes_is_recorded_retryable() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    settle(&mut client, NS, "refund:1", retryable(Some(Duration::ZERO))).await;
    let typed = opreg_client::Client::connect(app.endpoint.clone())
        .await
        .unwrap();
    let runs: Runs = Arc::default();
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(counting_worker(&typed, "w", &runs).run(async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    }));
    for _ in 0..200 {
        let found = lookup_history(&mut client, NS, "refund:1")
            .await
            .operation
            .unwrap();
        if found.last_error_class == "NO_HANDLER" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    stop.send(true).unwrap();
    assert!(running.await.unwrap().unwrap().retried >= 1);
    let found = lookup_history(&mut client, NS, "refund:1")
        .await
        .operation
        .unwrap();
    assert_eq!(found.last_error_class, "NO_HANDLER");
    assert!(runs.lock().unwrap().is_empty());
}
