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

async fn history(client: &Client, key: &str) -> pb::LookupResponse {
    client
        .lookup(pb::LookupRequest {
            namespace: NS.into(),
            operation_key: key.into(),
            include_executions: true,
        })
        .await
        .unwrap()
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
    let found = history(&client, "k").await;
    let outcomes: Vec<_> = found.executions.iter().map(|e| e.outcome()).collect();
    assert_eq!(
        outcomes,
        [ExecutionOutcome::Superseded, ExecutionOutcome::Succeeded]
    );
}

#[tokio::test]
async fn a_lease_lost_mid_work_stops_the_work_and_sends_no_complete() {
    let app = spawn_app().await;
    let client = client(&app).await;
    let seen: Arc<Mutex<Option<LeaseHandle>>> = Arc::default();
    let kept = seen.clone();
    // Renewals slower than the TTL let the lease expire while the work runs.
    let run = tokio::spawn(
        RunOnce::new(&client, NS, "slow", json!({}))
            .lease_ttl(Duration::from_secs(1))
            .renew_every(Duration::from_millis(2_000))
            .run(move |lease| {
                *kept.lock().unwrap() = Some(lease.clone());
                async move {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    Ok(Success::new(b"late".to_vec()))
                }
            }),
    );
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let taken = claim(
        &mut app.client.clone(),
        claim_request(NS, "slow", "new-holder", json!({})),
    )
    .await;
    assert!(taken.lease.as_ref().unwrap().takeover);

    let outcome = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(outcome, Err(RunError::LeaseLost)), "{outcome:?}");
    let handle = seen.lock().unwrap().clone().unwrap();
    assert!(handle.is_lost(), "the work was told to stop");
    // Its token is refused if it ever tries to complete.
    let late = app
        .client
        .clone()
        .complete(complete_request(
            NS,
            "slow",
            handle.fencing_token(),
            success(b"late"),
        ))
        .await;
    assert_error(late, tonic::Code::Aborted, "STALE_FENCING_TOKEN");
    let found = history(&client, "slow").await;
    assert_eq!(found.operation.unwrap().lease.unwrap().owner, "new-holder");
    assert_eq!(found.executions[0].outcome(), ExecutionOutcome::Superseded);
}

#[tokio::test]
async fn an_unknown_outcome_is_reconciled_before_executing() {
    let app = spawn_app().await;
    let client = client(&app).await;
    let unknown = RunOnce::new(&client, NS, "payout", json!({"amount": 5}))
        .run(|_lease| async {
            Err(WorkError::SentButUnconfirmed {
                remote_ref: "psp-77".into(),
                message: "timed out after send".into(),
            })
        })
        .await;
    assert!(
        matches!(&unknown, Err(RunError::OutcomeUnknown { remote_ref }) if remote_ref == "psp-77"),
        "{unknown:?}"
    );

    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let recorder = asked.clone();
    let done = RunOnce::new(&client, NS, "payout", json!({"amount": 5}))
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
    let found = history(&client, "payout").await;
    assert_eq!(
        found.operation.unwrap().status(),
        OperationStatus::Succeeded
    );
}

#[tokio::test]
async fn a_payout_that_never_happened_is_executed_after_reconcile() {
    let app = spawn_app().await;
    let client = client(&app).await;
    let _ = RunOnce::new(&client, NS, "payout", json!({}))
        .run(|_lease| async {
            Err(WorkError::SentButUnconfirmed {
                remote_ref: "psp-1".into(),
                message: String::new(),
            })
        })
        .await;
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
    let _app =
        spawn_app_with(|config| config.listen_addr = format!("127.0.0.1:{port}").parse().unwrap())
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
