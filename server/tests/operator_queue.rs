//! ListOperations: the manual queue, filtered and paged by a keyset that stays
//! stable while operations keep arriving.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use opreg_client::proto::{self as pb, OperationStatus};
use serde_json::json;
use tonic::Code;

const NS: &str = "settlement";

fn list(page_size: u32, page_token: String) -> pb::ListOperationsRequest {
    pb::ListOperationsRequest {
        namespace: NS.into(),
        statuses: vec![OperationStatus::Dead.into()],
        page_size,
        page_token,
        ..Default::default()
    }
}

/// Registers `key` and spends its only attempt, leaving it DEAD.
async fn kill(client: &mut Client, key: &str) {
    let mut request = claim_request(NS, key, "w", json!({"key": key}));
    request.retry_policy = Some(policy(1));
    let claimed = claim(client, request).await;
    client
        .complete(complete_request(NS, key, token(&claimed), retryable(None)))
        .await
        .unwrap();
}

#[tokio::test]
async fn pages_stay_stable_while_operations_are_inserted() {
    let app = spawn_app().await;
    let mut client = app.client.clone();
    let mut originals = Vec::new();
    for i in 0..60 {
        let key = format!("dead:{i:02}");
        kill(&mut client, &key).await;
        originals.push(key);
    }

    let mut writer = app.new_client().await;
    let inserting = tokio::spawn(async move {
        for i in 0..60 {
            kill(&mut writer, &format!("late:{i:02}")).await;
        }
    });
    let mut admin = app.admin.clone();
    let mut listed = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = admin
            .list_operations(list(7, page_token))
            .await
            .unwrap()
            .into_inner();
        assert!(page.operations.len() <= 7);
        listed.extend(page.operations);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    inserting.await.unwrap();

    let keys: Vec<_> = listed.iter().map(|op| op.operation_key.clone()).collect();
    let unique: HashSet<_> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "no operation listed twice");
    for key in &originals {
        assert!(unique.contains(key), "{key} missing from the pages");
    }
    let order: Vec<_> = listed
        .iter()
        .map(|op| {
            let at = op.created_at.unwrap();
            (at.seconds, at.nanos, op.operation_key.clone())
        })
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "listed by registration, then key");
    assert!(listed.iter().all(|op| op.status() == OperationStatus::Dead));
}

#[tokio::test]
async fn filters_narrow_the_queue() {
    let app = spawn_app().await;
    let (mut client, mut admin) = (app.client.clone(), app.admin.clone());
    settle(
        &mut client,
        NS,
        "retry",
        retryable(Some(Duration::from_secs(600))),
    )
    .await;
    settle(&mut client, NS, "unknown", unknown("psp-1")).await;
    settle(&mut client, NS, "done", success(b"ok")).await;
    claim(&mut client, claim_request(NS, "live", "w", json!({}))).await;
    claim(&mut client, claim_request(NS, "stalled", "w", json!({}))).await;
    app.expire_lease(NS, "stalled").await;
    kill(&mut client, "dead").await;
    admin
        .hold_operation(pb::HoldOperationRequest {
            namespace: NS.into(),
            operation_key: "dead".into(),
            operator: "alice".into(),
            reason: "investigating".into(),
        })
        .await
        .unwrap();

    let keys = |request: pb::ListOperationsRequest| {
        let mut admin = admin.clone();
        async move {
            let mut keys: Vec<_> = admin
                .list_operations(request)
                .await
                .unwrap()
                .into_inner()
                .operations
                .into_iter()
                .map(|op| op.operation_key)
                .collect();
            keys.sort();
            keys
        }
    };
    let base = pb::ListOperationsRequest {
        namespace: NS.into(),
        ..Default::default()
    };
    assert_eq!(
        keys(base.clone()).await,
        ["dead", "live", "retry", "stalled", "unknown"],
        "the unfinished backlog by default"
    );
    assert_eq!(
        keys(pb::ListOperationsRequest {
            expired_leases_only: true,
            ..base.clone()
        })
        .await,
        ["stalled"]
    );
    assert_eq!(
        keys(pb::ListOperationsRequest {
            held_only: true,
            ..base.clone()
        })
        .await,
        ["dead"]
    );
    assert_eq!(
        keys(pb::ListOperationsRequest {
            statuses: vec![
                OperationStatus::Unknown.into(),
                OperationStatus::RetryScheduled.into()
            ],
            ..base.clone()
        })
        .await,
        ["retry", "unknown"]
    );
    let untouched_for_an_hour = pb::ListOperationsRequest {
        older_than: Some(prost_types::Duration {
            seconds: 3_600,
            nanos: 0,
        }),
        ..base.clone()
    };
    assert!(keys(untouched_for_an_hour).await.is_empty());

    for (bad, field) in [
        (
            pb::ListOperationsRequest {
                statuses: vec![OperationStatus::Succeeded.into()],
                ..base.clone()
            },
            "statuses",
        ),
        (
            pb::ListOperationsRequest {
                page_token: "not-a-token".into(),
                ..base.clone()
            },
            "page_token",
        ),
        (
            pb::ListOperationsRequest {
                page_size: 5000,
                ..base.clone()
            },
            "page_size",
        ),
    ] {
        let status = assert_error(
            admin.list_operations(bad).await,
            Code::InvalidArgument,
            "INVALID_ARGUMENT",
        );
        let violations = tonic_types::StatusExt::get_details_bad_request(&status).unwrap();
        assert_eq!(violations.field_violations[0].field, field);
    }
}
