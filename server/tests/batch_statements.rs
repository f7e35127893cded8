//! A batch call's items go to the writers together, in chunks of the batch
//! limit: a BatchClaim of new keys takes one registration statement per chunk
//! and a BatchComplete one recording statement per chunk, however many
//! writers are idle, and a key repeated in the batch is answered after its
//! first item, as in sequence. One test function, so that this binary's
//! batch-size histograms count only its own statements.

mod common;

use common::*;
use opreg_client::proto::{self as pb, ClaimOutcome};
use serde_json::json;

const NAMESPACE: &str = "payments";
const KEYS: usize = 300;
const BATCH_MAX: usize = 128;
/// What a BatchClaim of `KEYS` new keys and a repeat adds to its batch-size
/// histogram: one statement per chunk, every new key in one of them (the
/// repeat is claimed after them, on its own).
const CLAIMS_CHUNKED: (f64, f64) = (KEYS.div_ceil(BATCH_MAX) as f64, KEYS as f64);
/// What a BatchComplete of `KEYS + 1` items adds to its batch-size
/// histogram: one statement per chunk, and every item in one of them.
const CHUNKED: (f64, f64) = (KEYS.div_ceil(BATCH_MAX) as f64, (KEYS + 1) as f64);

/// Totals of one batch-size histogram: (statements, calls in them).
async fn statements(app: &TestApp, histogram: &str) -> (f64, f64) {
    let scrape = scrape(app.metrics_addr).await;
    (
        scrape.value(&format!("{histogram}_count"), &[]),
        scrape.value(&format!("{histogram}_sum"), &[]),
    )
}

/// `call`'s answer, and the statements (and calls in them) it added to the
/// batch-size histogram `histogram`.
async fn counted<T>(
    app: &TestApp,
    histogram: &str,
    call: impl Future<Output = T>,
) -> (T, (f64, f64)) {
    let before = statements(app, histogram).await;
    let answer = call.await;
    let after = statements(app, histogram).await;
    (answer, (after.0 - before.0, after.1 - before.1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_takes_one_statement_per_chunk_and_answers_repeats_in_sequence() {
    let app = spawn_app_with(|config| {
        config.database.claim_writers = 4;
        config.database.complete_writers = 4;
        config.database.claim_batch_max = BATCH_MAX;
        config.database.complete_batch_max = BATCH_MAX;
    })
    .await;
    let mut client = app.client.clone();

    // 300 new keys, then the first key again for another owner.
    let mut claims: Vec<pb::ClaimRequest> = (0..KEYS)
        .map(|i| claim_request(NAMESPACE, &format!("k-{i}"), "w1", json!({"amount": i})))
        .collect();
    claims.push(claim_request(NAMESPACE, "k-0", "w2", json!({"amount": 0})));
    let (answer, registrations) = counted(
        &app,
        "opreg_claim_batch_size",
        client.batch_claim(pb::BatchClaimRequest { claims }),
    )
    .await;
    let results = answer.unwrap().into_inner().results;
    let claimed: Vec<pb::ClaimResponse> = results
        .into_iter()
        .map(|result| match result.result {
            Some(pb::batch_claim_result::Result::Claim(claimed)) => claimed,
            other => panic!("expected a claim, got {other:?}"),
        })
        .collect();
    assert!(
        claimed[..KEYS]
            .iter()
            .all(|claimed| outcome(claimed) == ClaimOutcome::Acquired)
    );
    assert_eq!(outcome(&claimed[KEYS]), ClaimOutcome::InProgress);
    assert_eq!(
        registrations, CLAIMS_CHUNKED,
        "registration statements, and the claims in them"
    );
    assert_eq!(
        app.count("SELECT count(DISTINCT fencing_token) FROM operations")
            .await,
        i64::try_from(KEYS).unwrap()
    );

    // Every lease reported, then the first report again.
    let mut completions: Vec<pb::CompleteRequest> = claimed[..KEYS]
        .iter()
        .enumerate()
        .map(|(i, claimed)| {
            complete_request(NAMESPACE, &format!("k-{i}"), token(claimed), success(b"ok"))
        })
        .collect();
    completions.push(completions[0].clone());
    let (answer, recordings) = counted(
        &app,
        "opreg_complete_batch_size",
        client.batch_complete(pb::BatchCompleteRequest { completions }),
    )
    .await;
    let results = answer.unwrap().into_inner().results;
    for (i, result) in results.iter().enumerate() {
        match &result.result {
            Some(pb::batch_complete_result::Result::Completed(completed)) => {
                assert_eq!(completed.operation.as_ref().unwrap().result, b"ok", "{i}");
            }
            other => panic!("item {i}: expected a completion, got {other:?}"),
        }
    }
    assert_eq!(
        recordings, CHUNKED,
        "recording statements, and the reports in them"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM operations WHERE status = 'succeeded'")
            .await,
        i64::try_from(KEYS).unwrap()
    );
    assert_eq!(
        app.count("SELECT count(*) FROM executions WHERE outcome = 'succeeded'")
            .await,
        i64::try_from(KEYS).unwrap(),
        "one report recorded per lease"
    );
}
