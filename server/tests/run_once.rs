//! The Rust client's run-once helper against the real server.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use opreg_client::proto::{self as pb, ExecutionOutcome, OperationStatus};
use opreg_client::{Client, Error, LeaseHandle, RunError, RunOnce, Success, Verdict, WorkError};
use serde_json::json;

const NS: &str = "helper";

async fn client(app: &TestApp) -> Client {
    Client::connect(app.endpoint.clone()).await.unwrap()
}

fn counted(calls: &Arc<AtomicUsize>) -> Arc<AtomicUsize> {
    calls.fetch_add(1, Ordering::SeqCst);
    calls.clone()
}

#[tokio::test]
async fn a_second_run_replays_without_executing() {
    let app = spawn_app().await;
    let client = client(&app).await;
    let calls = Arc::new(AtomicUsize::new(0));
    for expected_replay in [false, true] {
        let calls = calls.clone();
        let done = RunOnce::new(&client, NS, "k", json!({"amount": 100}))
            .run(move |_lease| {
                counted(&calls);
                async { Ok(Success::new(b"ledger-1".to_vec()).with_ref("ledger:1")) }
            })
            .await
            .unwrap();
        assert_eq!(
            (done.result.as_slice(), done.result_ref.as_str()),
            (&b"ledger-1"[..], "ledger:1")
        );
        assert_eq!(done.replayed, expected_replay);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_business_failure_is_recorded_and_replayed() {
    let app = spawn_app().await;
    let client = client(&app).await;
    for expected_replay in [false, true] {
        let failed = RunOnce::new(&client, NS, "debit", json!({}))
            .run(|_lease| async {
                Err(WorkError::Business {
                    code: "INSUFFICIENT_BALANCE".into(),
                    message: "20 < 100".into(),
                })
            })
            .await;
        match failed {
            Err(RunError::Business { code, replayed, .. }) => {
                assert_eq!(
                    (code.as_str(), replayed),
                    ("INSUFFICIENT_BALANCE", expected_replay)
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn different_parameters_are_a_typed_conflict_and_never_execute() {
    let app = spawn_app().await;
    let client = client(&app).await;
    RunOnce::new(&client, NS, "k", json!({"amount": 100, "to": "A"}))
        .run(|_lease| async { Ok(Success::new(b"ok".to_vec())) })
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let tracked = calls.clone();
    let conflict = RunOnce::new(&client, NS, "k", json!({"amount": 101, "to": "A"}))
        .run(move |_lease| {
            counted(&tracked);
            async { Ok(Success::new(b"twice".to_vec())) }
        })
        .await;
    match conflict {
        Err(RunError::Rpc(Error::ParameterConflict {
            differing_fields, ..
        })) => {
            assert_eq!(differing_fields, ["amount"]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_crashed_holder_is_taken_over_after_its_lease_expires() {
    let app = spawn_app().await;
    let client = client(&app).await;
    let crashed = pb::ClaimRequest {
        lease_ttl: Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        }),
        ..claim_request(NS, "k", "crashed-worker", json!({"n": 1}))
    };
    client.claim(crashed).await.unwrap();

    let started = Instant::now();
    let done = RunOnce::new(&client, NS, "k", json!({"n": 1}))
        .deadline(Duration::from_secs(15))
        .run(|lease| async move {
            assert!(lease.lease().takeover);
            Ok(Success::new(b"after-takeover".to_vec()))
        })
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "waited for the expiry"
    );
    assert_eq!(done.result, b"after-takeover");
    let found = lookup_history(&mut app.client.clone(), NS, "k").await;
    let outcomes: Vec<_> = found.executions.iter().map(|e| e.outcome()).collect();
    assert_eq!(
        outcomes,
        [ExecutionOutcome::Superseded, ExecutionOutcome::Succeeded]
    );
}

/// Sets a flag when dropped before it is disarmed: proves a future was cancelled.
struct DropFlag(Arc<AtomicUsize>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_lease_lost_mid_work_stops_the_work_and_sends_no_complete() {
    const LOST: &str = "helper-lost";
    let app = spawn_app().await;
    let client = client(&app).await;
    let seen: Arc<Mutex<Option<LeaseHandle>>> = Arc::default();
    let dropped = Arc::new(AtomicUsize::new(0));
    let (kept, flag) = (seen.clone(), dropped.clone());
    let run = tokio::spawn(
        RunOnce::new(&client, LOST, "slow", json!({}))
            .renew_every(Duration::from_millis(300))
            .run(move |lease| {
                *kept.lock().unwrap() = Some(lease.clone());
                let guard = DropFlag(flag.clone());
                async move {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    std::mem::forget(guard);
                    Ok(Success::new(b"late".to_vec()))
                }
            }),
    );
    // Another execution takes over while the work runs: the next renew is refused.
    tokio::time::sleep(Duration::from_millis(200)).await;
    app.expire_lease(LOST, "slow").await;
    let taken = claim(
        &mut app.client.clone(),
        claim_request(LOST, "slow", "new-holder", json!({})),
    )
    .await;
    assert!(taken.lease.as_ref().unwrap().takeover);

    let outcome = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(outcome, Err(RunError::LeaseLost)), "{outcome:?}");
    assert_eq!(dropped.load(Ordering::SeqCst), 1, "the work was stopped");
    let handle = seen.lock().unwrap().clone().unwrap();
    assert!(handle.is_lost(), "the work was told to stop");
    let before = scrape(app.metrics_addr).await;
    assert_eq!(
        before.value(
            "opreg_stale_token_rejections_total",
            &[("namespace", LOST), ("rpc", "Complete")]
        ),
        0.0,
        "the helper never tried to complete"
    );
    // A Complete with its token would be refused anyway.
    let late = app
        .client
        .clone()
        .complete(complete_request(
            LOST,
            "slow",
            handle.fencing_token(),
            success(b"late"),
        ))
        .await;
    assert_error(late, tonic::Code::Aborted, "STALE_FENCING_TOKEN");
    let found = lookup_history(&mut app.client.clone(), LOST, "slow").await;
    assert_eq!(found.operation.unwrap().lease.unwrap().owner, "new-holder");
    assert_eq!(found.executions[0].outcome(), ExecutionOutcome::Superseded);
}

#[tokio::test]
async fn renewals_keep_a_short_lease_while_long_work_runs() {
    let app = spawn_app().await;
    let client = client(&app).await;
    let run = tokio::spawn(
        RunOnce::new(&client, NS, "long", json!({}))
            .lease_ttl(Duration::from_secs(1))
            .run(|_lease| async {
                tokio::time::sleep(Duration::from_millis(2_500)).await;
                Ok(Success::new(b"long work".to_vec()))
            }),
    );
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    let other = claim(
        &mut app.client.clone(),
        claim_request(NS, "long", "other", json!({})),
    )
    .await;
    assert_eq!(
        outcome(&other),
        pb::ClaimOutcome::InProgress,
        "renewed past its 1 s TTL"
    );
    let done = run.await.unwrap().unwrap();
    assert_eq!(done.result, b"long work");
    assert_eq!(
        lookup_history(&mut app.client.clone(), NS, "long")
            .await
            .executions
            .len(),
        1
    );
}

#[tokio::test]
async fn dropping_a_run_stops_its_renewals_and_tells_the_work() {
    let app = spawn_app().await;
    let client = client(&app).await;
    let seen: Arc<Mutex<Option<LeaseHandle>>> = Arc::default();
    let kept = seen.clone();
    let run = tokio::spawn(
        RunOnce::new(&client, NS, "dropped", json!({}))
            .lease_ttl(Duration::from_secs(1))
            .run(move |lease| {
                *kept.lock().unwrap() = Some(lease);
                async {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    Ok(Success::default())
                }
            }),
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    run.abort();
    let _ = run.await;
    assert!(seen.lock().unwrap().as_ref().unwrap().is_lost());
    // With no renewals the 1 s lease lapses and another execution takes over.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let taken = claim(
        &mut app.client.clone(),
        claim_request(NS, "dropped", "other", json!({})),
    )
    .await;
    assert!(taken.lease.unwrap().takeover);
}

#[tokio::test]
async fn work_that_outlasts_the_deadline_is_still_recorded() {
    let app = spawn_app().await;
    let client = client(&app).await;
    let done = RunOnce::new(&client, NS, "slow-but-done", json!({}))
        .deadline(Duration::from_millis(300))
        .run(|_lease| async {
            tokio::time::sleep(Duration::from_millis(800)).await;
            Ok(Success::new(b"finished late".to_vec()))
        })
        .await
        .unwrap();
    assert_eq!(done.result, b"finished late");
    let found = lookup_history(&mut app.client.clone(), NS, "slow-but-done").await;
    assert_eq!(
        found.operation.unwrap().status(),
        OperationStatus::Succeeded
    );
}

/// Runs work whose request left but whose answer never came: an unknown outcome.
async fn leave_unknown(
    client: &Client,
    key: &str,
    remote_ref: &str,
) -> Result<opreg_client::Completed, RunError> {
    let remote_ref = remote_ref.to_owned();
    RunOnce::new(client, NS, key, json!({}))
        .run(move |_lease| {
            let remote_ref = remote_ref.clone();
            async move {
                Err(WorkError::SentButUnconfirmed {
                    remote_ref,
                    message: "timed out after send".into(),
                })
            }
        })
        .await
}

#[tokio::test]
async fn an_unknown_outcome_is_reconciled_before_executing() {
    let app = spawn_app().await;
    let client = client(&app).await;
    let unknown = leave_unknown(&client, "payout", "psp-77").await;
    assert!(
        matches!(&unknown, Err(RunError::OutcomeUnknown { remote_ref }) if remote_ref == "psp-77"),
        "{unknown:?}"
    );

    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let recorder = asked.clone();
    let done = RunOnce::new(&client, NS, "payout", json!({}))
        .reconcile(move |_lease, remote_ref| {
            recorder.lock().unwrap().push(remote_ref);
            async { Verdict::Succeeded(Success::new(b"paid".to_vec())) }
        })
        .run(|_lease| async { panic!("must not execute: the payout already happened") })
        .await
        .unwrap();
    assert_eq!(
        (done.result.as_slice(), done.replayed),
        (&b"paid"[..], false)
    );
    assert_eq!(*asked.lock().unwrap(), ["psp-77"]);
    let found = lookup_history(&mut app.client.clone(), NS, "payout").await;
    assert_eq!(
        found.operation.unwrap().status(),
        OperationStatus::Succeeded
    );
}

#[tokio::test]
async fn a_payout_that_never_happened_is_executed_after_reconcile() {
    let app = spawn_app().await;
    let client = client(&app).await;
    let _ = leave_unknown(&client, "payout", "psp-1").await;
    let done = RunOnce::new(&client, NS, "payout", json!({}))
        .reconcile(|_lease, _remote_ref| async { Verdict::NotApplied })
        .run(|_lease| async { Ok(Success::new(b"sent-now".to_vec())) })
        .await
        .unwrap();
    assert_eq!(done.result, b"sent-now");
}

#[tokio::test]
async fn a_transient_failure_is_retried_under_the_budget() {
    let app = spawn_app().await;
    let client = client(&app).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let tracked = calls.clone();
    let done = RunOnce::new(&client, NS, "flaky", json!({}))
        .deadline(Duration::from_secs(15))
        .run(move |_lease| {
            let attempt = counted(&tracked).load(Ordering::SeqCst);
            async move {
                if attempt == 1 {
                    Err(WorkError::Transient {
                        message: "503".into(),
                        retry_after: Some(Duration::from_millis(200)),
                    })
                } else {
                    Ok(Success::new(b"second time".to_vec()))
                }
            }
        })
        .await
        .unwrap();
    assert_eq!(done.result, b"second time");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(done.operation.attempts, 2);
}

#[tokio::test]
async fn transport_failures_are_retried_until_the_server_answers() {
    let port = free_port();
    let client = Client::connect_lazy(format!("http://127.0.0.1:{port}")).unwrap();
    let run = tokio::spawn(
        RunOnce::new(&client, NS, "k", json!({}))
            .deadline(Duration::from_secs(20))
            .run(|_lease| async { Ok(Success::new(b"eventually".to_vec())) }),
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!run.is_finished(), "nothing listens yet");
    let _app = spawn_app_with(|config| {
        config.listeners.listen_addr = format!("127.0.0.1:{port}").parse().unwrap()
    })
    .await;
    let done = run.await.unwrap().unwrap();
    assert_eq!(done.result, b"eventually");
}

#[tokio::test]
async fn the_overall_deadline_bounds_transport_retries_and_waits() {
    let nowhere = Client::connect_lazy(format!("http://127.0.0.1:{}", free_port())).unwrap();
    let started = Instant::now();
    let outcome = RunOnce::new(&nowhere, NS, "k", json!({}))
        .deadline(Duration::from_millis(800))
        .run(|_lease| async { Ok(Success::default()) })
        .await;
    assert!(
        matches!(outcome, Err(RunError::DeadlineExceeded)),
        "{outcome:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(1_500),
        "{:?}",
        started.elapsed()
    );

    let app = spawn_app().await;
    let client = client(&app).await;
    client
        .claim(claim_request(NS, "held", "other", json!({})))
        .await
        .unwrap();
    let started = Instant::now();
    let outcome = RunOnce::new(&client, NS, "held", json!({}))
        .deadline(Duration::from_millis(800))
        .run(|_lease| async { Ok(Success::default()) })
        .await;
    assert!(
        matches!(outcome, Err(RunError::DeadlineExceeded)),
        "{outcome:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(1_500),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_reconcile_that_finds_a_refusal_records_a_business_failure() {
    let app = spawn_app().await;
    let client = client(&app).await;
    let _ = leave_unknown(&client, "declined", "psp-9").await;
    let outcome = RunOnce::new(&client, NS, "declined", json!({}))
        .reconcile(|_lease, _remote_ref| async {
            Verdict::Failed {
                code: "DECLINED".into(),
                message: "the PSP refused it".into(),
            }
        })
        .run(|_lease| async { panic!("must not execute") })
        .await;
    assert!(
        matches!(&outcome, Err(RunError::Business { code, replayed: false, .. }) if code == "DECLINED"),
        "{outcome:?}"
    );
    let found = lookup_history(&mut app.client.clone(), NS, "declined").await;
    assert_eq!(found.operation.unwrap().status(), OperationStatus::Failed);
}

#[tokio::test]
async fn without_a_reconcile_the_unknown_outcome_is_handed_back_not_held() {
    let app = spawn_app().await;
    let client = client(&app).await;
    let _ = leave_unknown(&client, "unknown", "psp-5").await;
    let outcome = RunOnce::new(&client, NS, "unknown", json!({}))
        .run(|_lease| async { panic!("must not execute") })
        .await;
    assert!(
        matches!(&outcome, Err(RunError::ReconcileRequired { remote_ref }) if remote_ref == "psp-5"),
        "{outcome:?}"
    );
    let operation = lookup_history(&mut app.client.clone(), NS, "unknown")
        .await
        .operation
        .unwrap();
    assert_eq!(operation.status(), OperationStatus::Unknown);
    assert!(
        operation.lease.is_none(),
        "nobody sits on the reconcile lease"
    );
}
