//! Concurrent Completes share recording statements: each answer is the one the
//! Completes would get run one after another, the database holds each report
//! once, and replicas recording the same reports never deadlock. One test
//! function, so that this binary's batch-size histogram counts only its own
//! Completes.

mod common;

use std::time::Duration;

use common::*;
use opreg_client::proto as pb;
use serde_json::json;

const NAMESPACE: &str = "payments";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_completes_share_statements_and_answer_as_in_sequence() {
    reports_of_one_key_queued_together_answer_as_in_sequence().await;
    many_concurrent_completes_record_each_report_once().await;
    replicas_recording_the_same_reports_never_deadlock().await;
}

/// Batch-size histogram totals: (statements, reports in them).
async fn batches(app: &TestApp) -> (f64, f64) {
    let scrape = scrape(app.metrics_addr).await;
    (
        scrape.value("opreg_complete_batch_size_count", &[]),
        scrape.value("opreg_complete_batch_size_sum", &[]),
    )
}

fn status(response: &pb::CompleteResponse) -> pb::OperationStatus {
    response.operation.as_ref().expect("the operation").status()
}

/// Claims `key` new and returns its token.
async fn claimed(app: &TestApp, key: &str) -> u64 {
    let mut client = app.client.clone();
    let request = claim_request(NAMESPACE, key, "worker", json!({"amount": 100}));
    token(&claim(&mut client, request).await)
}

/// The one writer is held on a row lock while five reports of one operation
/// queue behind it; they then share one statement. The first is recorded; the
/// two repeats of it are answered as repeats, the different report as
/// ALREADY_COMPLETED and a token that is not this operation's as stale, as if
/// they had run one after another.
async fn reports_of_one_key_queued_together_answer_as_in_sequence() {
    let app = spawn_app_with(|config| config.database.complete_writers = 1).await;
    let blocker_token = claimed(&app, "blocker").await;
    let token = claimed(&app, "order-A").await;
    let lock = app.lock_row("blocker").await;
    let mut blocked = app.client.clone();
    let blocked = tokio::spawn(async move {
        blocked
            .complete(complete_request(
                NAMESPACE,
                "blocker",
                blocker_token,
                success(b"done"),
            ))
            .await
    });
    app.observe_lock_wait().await;
    let (statements_before, reports_before) = batches(&app).await;

    let send = |token: u64, result: &'static [u8]| {
        let mut client = app.client.clone();
        tokio::spawn(async move {
            client
                .complete(complete_request(
                    NAMESPACE,
                    "order-A",
                    token,
                    success(result),
                ))
                .await
        })
    };
    // Queued one after another, in this order.
    let mut queued = Vec::new();
    for (token, result) in [
        (token, b"done".as_slice()),
        (token, b"done"),
        (token, b"other"),
        (token, b"done"),
        (blocker_token, b"done"),
    ] {
        queued.push(send(token, result));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let [first, repeat, different, repeat_again, stale] = <[_; 5]>::try_from(queued).unwrap();
    let repeats = [repeat, repeat_again];
    lock.release().await;

    blocked
        .await
        .unwrap()
        .expect("the blocked report is recorded");
    let recorded = first.await.unwrap().expect("the first report is recorded");
    assert_eq!(status(recorded.get_ref()), pb::OperationStatus::Succeeded);
    for repeat in repeats {
        let answer = repeat
            .await
            .unwrap()
            .expect("a repeat is answered as before");
        assert_eq!(answer.get_ref(), recorded.get_ref());
    }
    assert_error(
        different.await.unwrap(),
        tonic::Code::FailedPrecondition,
        "ALREADY_COMPLETED",
    );
    assert_error(
        stale.await.unwrap(),
        tonic::Code::Aborted,
        "STALE_FENCING_TOKEN",
    );

    let (statements, reports) = batches(&app).await;
    assert_eq!(
        (statements - statements_before, reports - reports_before),
        (1.0, 5.0),
        "the five queued reports share one statement"
    );
    let stored: (String, Vec<u8>) =
        sqlx::query_as("SELECT status, result FROM operations WHERE operation_key = 'order-A'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(stored, ("succeeded".to_owned(), b"done".to_vec()));
    assert_eq!(
        app.count(
            "SELECT count(*) FROM executions
             WHERE outcome = 'succeeded' AND outcome_digest IS NOT NULL AND finished_at IS NOT NULL"
        )
        .await,
        2
    );
}

/// 200 Completes at once, of 200 operations, through one writer.
async fn many_concurrent_completes_record_each_report_once() {
    let app = spawn_app_with(|config| {
        config.database.complete_writers = 1;
        config.database.pool_acquire_timeout = Duration::from_secs(30);
    })
    .await;
    let mut tokens = Vec::new();
    for i in 0..200 {
        let key = format!("order-{i:03}");
        tokens.push((key.clone(), claimed(&app, &key).await));
    }
    let (statements_before, reports_before) = batches(&app).await;
    let mut tasks = tokio::task::JoinSet::new();
    for (key, token) in tokens {
        let mut client = app.client.clone();
        tasks.spawn(async move {
            client
                .complete(complete_request(
                    NAMESPACE,
                    &key,
                    token,
                    success(key.as_bytes()),
                ))
                .await
        });
    }
    while let Some(joined) = tasks.join_next().await {
        let answer = joined.unwrap().expect("every report is recorded");
        assert_eq!(status(answer.get_ref()), pb::OperationStatus::Succeeded);
    }
    assert_eq!(
        app.count("SELECT count(*) FROM operations WHERE status = 'succeeded' AND result = convert_to(operation_key, 'UTF8')")
            .await,
        200
    );
    assert_eq!(
        app.count("SELECT count(*) FROM executions WHERE outcome = 'succeeded'")
            .await,
        200
    );
    let (statements, reports) = batches(&app).await;
    assert_eq!(reports - reports_before, 200.0);
    assert!(
        statements - statements_before < 200.0,
        "concurrent reports shared statements: {} statements",
        statements - statements_before
    );
}

/// Two replicas over one database, each with several writers, report the
/// same outcome of the same 50 operations at once, in opposite orders. Their
/// statements lock in key order: PostgreSQL reports no deadlock, each
/// operation is recorded once and every report is answered with it.
async fn replicas_recording_the_same_reports_never_deadlock() {
    let (first, second) = two_patient_replicas().await;

    let mut tokens = Vec::new();
    for i in 0..50 {
        let key = format!("order-{i:02}");
        tokens.push((key.clone(), claimed(&first, &key).await));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for round in 0..8 {
        for (index, client) in [&first.client, &second.client].into_iter().enumerate() {
            let order: Vec<_> = if (round + index) % 2 == 0 {
                tokens.clone()
            } else {
                tokens.iter().rev().cloned().collect()
            };
            for (key, token) in order {
                let mut client = client.clone();
                tasks.spawn(async move {
                    client
                        .complete(complete_request(NAMESPACE, &key, token, success(b"done")))
                        .await
                });
            }
        }
    }
    while let Some(joined) = tasks.join_next().await {
        let answer = joined.unwrap().expect("every report is answered");
        assert_eq!(status(answer.get_ref()), pb::OperationStatus::Succeeded);
    }
    assert_eq!(
        first
            .count("SELECT count(*) FROM executions WHERE outcome = 'succeeded'")
            .await,
        50
    );
    assert_eq!(first.deadlocks().await, 0);
}
