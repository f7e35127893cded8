//! Claims and Lookups that wait for their operation to move: woken by the
//! change notice of exactly their key on every replica (counted by the wake
//! histogram, which only a notice feeds), by the time the row names (a
//! lease's expiry), never answered with a state that did not commit, bounded
//! per replica, answered at shutdown, and holding no place among the calls
//! in flight while they wait.
//!
//! The metrics are the test process's, shared by every replica it runs; the
//! tests here take turns ([`one_at_a_time`]) and read them as differences.

mod common;

use std::time::Duration;

use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome};
use serde_json::json;
use tonic::Code;

const NS: &str = "payments";

fn seconds(seconds: i64) -> prost_types::Duration {
    prost_types::Duration { seconds, nanos: 0 }
}

fn waiting_claim(key: &str, owner: &str, wait: i64) -> pb::ClaimRequest {
    pb::ClaimRequest {
        wait: Some(seconds(wait)),
        ..claim_request(NS, key, owner, json!({"amount": 100}))
    }
}

fn std(duration: Option<prost_types::Duration>) -> Duration {
    let duration = duration.expect("waited is set");
    Duration::new(
        u64::try_from(duration.seconds).unwrap(),
        u32::try_from(duration.nanos).unwrap(),
    )
}

/// The tests here read process-wide metrics: one runs at a time.
async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// Waits (polling the gauge) until `waiters` calls wait in this process.
async fn until_waiting(app: &TestApp, waiters: f64) {
    for _ in 0..400 {
        if scrape(app.metrics_addr).await.value("opreg_waiters", &[]) == waiters {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{waiters} waiters never waited");
}

/// Registers `key` under a live lease of the owner `holder`; a client.
async fn held(app: &TestApp, key: &str) -> Client {
    let mut client = app.client.clone();
    claim(
        &mut client,
        claim_request(NS, key, "holder", json!({"amount": 100})),
    )
    .await;
    client
}

type Waiting = tokio::task::JoinHandle<Result<tonic::Response<pb::ClaimResponse>, tonic::Status>>;

/// Starts `count` callers waiting on `key` (owners `w0`, `w1`, …), each once
/// the one before is asleep (no other calls may wait meanwhile).
async fn start_waiters(app: &TestApp, key: &'static str, count: u32) -> Vec<Waiting> {
    let mut waiting = Vec::new();
    for i in 0..count {
        let mut waiter = app.client.clone();
        waiting.push(tokio::spawn(async move {
            waiter.claim(waiting_claim(key, &format!("w{i}"), 60)).await
        }));
        until_waiting(app, f64::from(i + 1)).await;
    }
    waiting
}

/// The answers of waiting calls, in the order they were started.
async fn answered(waiting: Vec<Waiting>) -> Vec<pb::ClaimResponse> {
    let mut answers = Vec::new();
    for task in waiting {
        answers.push(task.await.unwrap().unwrap().into_inner());
    }
    answers
}

/// Cancels waiting calls; each leaves the waiters.
async fn cancel(app: &TestApp, waiting: Vec<Waiting>) {
    for task in waiting {
        task.abort();
    }
    until_waiting(app, 0.0).await;
}

/// Calls woken by a change notice so far (a wake by the fallback poll or a
/// timer is not counted).
async fn woken_by_notices(app: &TestApp) -> f64 {
    scrape(app.metrics_addr)
        .await
        .value("opreg_wait_wake_seconds_count", &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_waiters_on_two_replicas_are_all_woken_by_one_complete() {
    let _turn = one_at_a_time().await;
    let (first, second) = two_patient_replicas().await;
    let key = "settle:window-1";
    let mut holder = first.client.clone();
    let held = claim(
        &mut holder,
        claim_request(NS, key, "holder", json!({"amount": 100})),
    )
    .await;
    let mut waiters = tokio::task::JoinSet::new();
    for i in 0..40 {
        let mut client = if i % 2 == 0 {
            first.client.clone()
        } else {
            second.client.clone()
        };
        waiters.spawn(async move {
            client
                .claim(waiting_claim(key, &format!("waiter-{i}"), 60))
                .await
        });
    }
    let woken_before = woken_by_notices(&first).await;
    // The gauge sums the waiters of both replicas of this process.
    until_waiting(&first, 40.0).await;
    // Nothing a waiter was told so far can have been an answer: all still wait.
    assert_eq!(waiters.len(), 40);

    holder
        .complete(complete_request(NS, key, token(&held), success(b"settled")))
        .await
        .unwrap();
    while let Some(joined) = waiters.join_next().await {
        let answer = joined.unwrap().unwrap().into_inner();
        assert_eq!(outcome(&answer), ClaimOutcome::Replayed);
        let operation = answer.operation.unwrap();
        assert_eq!(operation.status(), pb::OperationStatus::Succeeded);
        assert_eq!(operation.result, b"settled");
        assert!(std(answer.waited) < Duration::from_secs(60));
    }
    // Every waiter, on either replica, was woken by the notice: a replica
    // that missed it would have woken its 20 by the fallback poll, uncounted.
    assert_eq!(woken_by_notices(&first).await - woken_before, 40.0);
    until_waiting(&first, 0.0).await;
    assert_eq!(first.count("SELECT count(*) FROM executions").await, 1);
    assert_eq!(
        first
            .count("SELECT count(*) FROM operations WHERE watched AND status = 'succeeded'")
            .await,
        1
    );
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_lease_expiry_and_takes_over() {
    let _turn = one_at_a_time().await;
    let app = spawn_app().await;
    let key = "payout:7";
    let mut client = app.client.clone();
    let short = pb::ClaimRequest {
        lease_ttl: Some(seconds(1)),
        ..claim_request(NS, key, "holder", json!({"amount": 100}))
    };
    let held = claim(&mut client, short).await;
    let answer = claim(&mut client, waiting_claim(key, "waiter", 30)).await;
    assert_eq!(outcome(&answer), ClaimOutcome::Acquired);
    let lease = answer.lease.unwrap();
    assert!(lease.takeover);
    assert!(lease.fencing_token > token(&held));
    // It waited for the lease to end (1 s), not for its whole wait.
    let waited = std(answer.waited);
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    assert!(waited < Duration::from_secs(30), "{waited:?}");
    let history = lookup_history(&mut client, NS, key).await;
    let outcomes: Vec<_> = history
        .executions
        .iter()
        .map(|execution| {
            (
                execution.kind(),
                execution.outcome(),
                execution.owner.as_str(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            (
                pb::ExecutionKind::First,
                pb::ExecutionOutcome::Superseded,
                "holder"
            ),
            (
                pb::ExecutionKind::Takeover,
                pb::ExecutionOutcome::Running,
                "waiter"
            ),
        ]
    );
}

#[tokio::test]
async fn waiters_are_woken_when_an_operator_holds_or_resolves() {
    let _turn = one_at_a_time().await;
    let app = spawn_app().await;
    let (mut client, mut admin) = (app.client.clone(), app.admin.clone());
    let woken_before = woken_by_notices(&app).await;

    // A hold: HELD is an answer the waiter can act on.
    let key = "payout:held";
    claim(
        &mut client,
        claim_request(NS, key, "holder", json!({"amount": 100})),
    )
    .await;
    let waiting = start_waiters(&app, key, 1).await;
    admin
        .hold_operation(pb::HoldOperationRequest {
            namespace: NS.into(),
            operation_key: key.into(),
            operator: "alice".into(),
            reason: "looking into it".into(),
        })
        .await
        .unwrap();
    let answer = answered(waiting).await.remove(0);
    assert_eq!(outcome(&answer), ClaimOutcome::Held);

    // A resolution of an operation under a reconcile lease.
    let key = "payout:resolved";
    let first = claim(
        &mut client,
        claim_request(NS, key, "holder", json!({"amount": 100})),
    )
    .await;
    client
        .complete(complete_request(NS, key, token(&first), unknown("psp-1")))
        .await
        .unwrap();
    let reconciling = claim(
        &mut client,
        claim_request(NS, key, "checker", json!({"amount": 100})),
    )
    .await;
    assert_eq!(outcome(&reconciling), ClaimOutcome::Reconcile);
    let waiting = start_waiters(&app, key, 1).await;
    admin
        .resolve_operation(pb::ResolveOperationRequest {
            namespace: NS.into(),
            operation_key: key.into(),
            operator: "bob".into(),
            reason: "the PSP shows the payout".into(),
            outcome: Some(pb::resolve_operation_request::Outcome::Success(
                pb::Success {
                    result: b"paid".to_vec(),
                    result_ref: String::new(),
                },
            )),
        })
        .await
        .unwrap();
    let answer = answered(waiting).await.remove(0);
    assert_eq!(outcome(&answer), ClaimOutcome::Replayed);
    assert_eq!(answer.operation.unwrap().result, b"paid");
    assert_eq!(woken_by_notices(&app).await - woken_before, 2.0);
}

#[tokio::test]
async fn a_lookup_waits_for_the_status_to_move() {
    let _turn = one_at_a_time().await;
    let app = spawn_app().await;
    let key = "refund:9";
    let mut client = app.client.clone();
    let held = claim(
        &mut client,
        claim_request(NS, key, "holder", json!({"amount": 100})),
    )
    .await;
    let lookup = |wait: i64, changed_from: pb::OperationStatus| pb::LookupRequest {
        namespace: NS.into(),
        operation_key: key.into(),
        include_executions: true,
        wait: Some(seconds(wait)),
        changed_from: changed_from.into(),
        ..Default::default()
    };
    let mut looker = client.clone();
    let waiting = tokio::spawn(async move {
        looker
            .lookup(lookup(60, pb::OperationStatus::Unspecified))
            .await
    });
    until_waiting(&app, 1.0).await;
    client
        .complete(complete_request(NS, key, token(&held), success(b"ok")))
        .await
        .unwrap();
    let found = waiting.await.unwrap().unwrap().into_inner();
    assert_eq!(
        found.operation.unwrap().status(),
        pb::OperationStatus::Succeeded
    );
    assert_eq!(found.executions.len(), 1);
    assert!(found.waited.is_some());

    // A status the caller already knows is not waited on.
    let found = client
        .lookup(lookup(60, pb::OperationStatus::InProgress))
        .await
        .unwrap()
        .into_inner();
    assert!(std(found.waited) < Duration::from_secs(1));

    // No operation: NOT_FOUND at once.
    let missing = client
        .lookup(pb::LookupRequest {
            operation_key: "refund:none".into(),
            ..lookup(60, pb::OperationStatus::Unspecified)
        })
        .await;
    assert_error(missing, Code::NotFound, "OPERATION_NOT_FOUND");
}

#[tokio::test]
async fn waits_end_on_time_and_a_claim_that_does_not_ask_is_not_told_it_waited() {
    let _turn = one_at_a_time().await;
    let app = spawn_app().await;
    let key = "payout:timed";
    let mut client = held(&app, key).await;
    let timed_out = || async {
        scrape(app.metrics_addr).await.value(
            "opreg_waits_total",
            &[("call", "claim"), ("outcome", "timed_out")],
        )
    };
    let before = timed_out().await;
    let answer = claim(&mut client, waiting_claim(key, "waiter", 1)).await;
    assert_eq!(outcome(&answer), ClaimOutcome::InProgress);
    assert!(std(answer.waited) >= Duration::from_millis(900));
    assert_eq!(timed_out().await - before, 1.0);

    let answer = claim(
        &mut client,
        claim_request(NS, key, "other", json!({"amount": 100})),
    )
    .await;
    assert_eq!(outcome(&answer), ClaimOutcome::InProgress);
    assert_eq!(answer.waited, None, "no wait asked, none reported");
}

#[tokio::test]
async fn the_claim_latency_measure_leaves_out_the_time_a_claim_waited() {
    let _turn = one_at_a_time().await;
    let app = spawn_app().await;
    let key = "payout:measured";
    let mut client = held(&app, key).await;
    let grpc_claim = [
        ("grpc_service", "opreg.v1.OperationRegistry"),
        ("grpc_method", "Claim"),
        ("grpc_type", "unary"),
    ];
    let figures = || async {
        let scraped = scrape(app.metrics_addr).await;
        let mut slow = grpc_claim.to_vec();
        slow.push(("le", "0.5"));
        (
            scraped.value("opreg_claim_seconds_count", &[]),
            scraped.value("opreg_claim_seconds_bucket", &[("le", "0.5")]),
            scraped.value("grpc_server_handling_seconds_count", &grpc_claim),
            scraped.value("grpc_server_handling_seconds_bucket", &slow),
        )
    };
    let before = figures().await;
    let answer = claim(&mut client, waiting_claim(key, "waiter", 1)).await;
    assert!(std(answer.waited) >= Duration::from_millis(900));
    let after = figures().await;
    assert_eq!(after.0 - before.0, 1.0, "one Claim measured");
    assert_eq!(
        after.1 - before.1,
        1.0,
        "in well under 0.5 s of its own time"
    );
    assert_eq!(after.2 - before.2, 1.0);
    assert_eq!(
        after.3 - before.3,
        0.0,
        "the gRPC histogram has the wait in it"
    );
}

#[tokio::test]
async fn a_wait_longer_than_the_callers_deadline_ends_in_an_answer_before_it() {
    let _turn = one_at_a_time().await;
    let app = spawn_app().await;
    let key = "payout:deadline";
    let mut client = held(&app, key).await;
    let mut request = tonic::Request::new(waiting_claim(key, "waiter", 30));
    request.set_timeout(Duration::from_secs(2));
    let answer = client.claim(request).await.unwrap().into_inner();
    assert_eq!(outcome(&answer), ClaimOutcome::InProgress);
    let waited = std(answer.waited);
    assert!(waited > Duration::from_millis(500), "{waited:?}");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

#[tokio::test]
async fn a_server_with_waiting_off_answers_at_once_without_waited() {
    let _turn = one_at_a_time().await;
    let app = spawn_app_with(|config| config.limits.max_wait = Duration::ZERO).await;
    let key = "payout:off";
    let mut client = held(&app, key).await;
    let answer = claim(&mut client, waiting_claim(key, "waiter", 30)).await;
    assert_eq!(outcome(&answer), ClaimOutcome::InProgress);
    assert_eq!(answer.waited, None);
    assert!(answer.retry_after.is_some());
}

#[tokio::test]
async fn waiters_past_the_limit_are_refused_with_retry_info() {
    let _turn = one_at_a_time().await;
    let app = spawn_app_with(|config| config.limits.max_waiters = 2).await;
    let key = "payout:crowded";
    let mut client = held(&app, key).await;
    let waiting = start_waiters(&app, key, 2).await;
    let refused = client.claim(waiting_claim(key, "third", 60)).await;
    let status = assert_error(refused, Code::ResourceExhausted, "TOO_MANY_WAITERS");
    assert_eq!(metadata(&status, "limit"), "2");
    use tonic_types::StatusExt;
    assert!(status.get_details_retry_info().is_some());
    // Without a wait the same call is answered as ever.
    let answer = claim(
        &mut client,
        claim_request(NS, key, "third", json!({"amount": 100})),
    )
    .await;
    assert_eq!(outcome(&answer), ClaimOutcome::InProgress);
    cancel(&app, waiting).await;
}

#[tokio::test]
async fn waiters_give_up_their_place_among_the_calls_in_flight() {
    let _turn = one_at_a_time().await;
    let app = spawn_app_with(|config| config.limits.max_concurrent_calls = 3).await;
    let key = "payout:busy";
    let mut client = held(&app, key).await;
    // One at a time: each needs a place in flight until it sleeps.
    let waiting = start_waiters(&app, key, 5).await;
    // Five calls wait and three may be in flight: this one is not shed.
    let other = claim(
        &mut client,
        claim_request(NS, "payout:other", "x", json!({})),
    )
    .await;
    assert_eq!(outcome(&other), ClaimOutcome::Acquired);
    cancel(&app, waiting).await;
}

#[tokio::test]
async fn shutdown_answers_every_waiter_at_once() {
    let _turn = one_at_a_time().await;
    let mut app = spawn_app().await;
    let key = "payout:closing";
    held(&app, key).await;
    let waiting = start_waiters(&app, key, 3).await;
    app.begin_shutdown();
    for answer in answered(waiting).await {
        assert_eq!(outcome(&answer), ClaimOutcome::InProgress);
        assert!(std(answer.waited) < Duration::from_secs(60));
    }
}

#[tokio::test]
async fn a_batch_claim_does_not_wait() {
    let _turn = one_at_a_time().await;
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let answer = client
        .batch_claim(pb::BatchClaimRequest {
            claims: vec![waiting_claim("payout:batch", "w", 5)],
        })
        .await
        .unwrap()
        .into_inner();
    let Some(pb::batch_claim_result::Result::Error(status)) = &answer.results[0].result else {
        panic!("a waiting claim in a batch is refused: {answer:?}");
    };
    assert_eq!(status.code, Code::InvalidArgument as i32);
    assert_eq!(app.count("SELECT count(*) FROM operations").await, 0);
}
