//! The SQL door's Claim, Complete and FencedWrite (`opreg_sql.claim`,
//! `opreg_sql.complete`, `opreg_sql.fenced_write`,
//! `migrations/20261205000001_sql_door_claim_complete.sql`): the record and
//! the business write commit together or not at all, racing callers of
//! either door wait on the uncommitted row, one set of records serves the
//! three doors, a database role reaches only its namespaces, and the
//! functions leave the rows the server's statements leave. Every check reads
//! the database (or the server) after the transactions ended.

mod common;

use std::time::Duration;

use common::accounts::*;
use common::*;
use opreg_client::error_reason;
use opreg_client::proto::{self as pb, ClaimOutcome};
use serde_json::{Value, json};
use sqlx::postgres::PgDatabaseError;
use sqlx::{Connection, PgConnection, PgExecutor};

const NS: &str = "sql-door";

/// `opreg_sql.claim` of `key` in `namespace`: its outcome, and its token
/// when the answer hands out a lease.
async fn sql_claim_in(
    db: impl PgExecutor<'_>,
    namespace: &str,
    key: &str,
    owner: &str,
    parameters: &Value,
) -> Result<(String, Option<i64>), sqlx::Error> {
    sqlx::query_as(
        "SELECT outcome, fencing_token
         FROM opreg_sql.claim($1, $2, $3::jsonb, $4, execution_id => 'run-' || $4)",
    )
    .bind(namespace)
    .bind(key)
    .bind(parameters.to_string())
    .bind(owner)
    .fetch_one(db)
    .await
}

async fn sql_claim(
    db: impl PgExecutor<'_>,
    key: &str,
    owner: &str,
    amount: i64,
) -> Result<(String, Option<i64>), sqlx::Error> {
    sql_claim_in(db, NS, key, owner, &debit_parameters(amount)).await
}

/// `opreg_sql.claim` of a new key: its token.
async fn sql_acquire(db: impl PgExecutor<'_>, key: &str, owner: &str, amount: i64) -> i64 {
    let (outcome, token) = sql_claim(db, key, owner, amount).await.unwrap();
    assert_eq!(outcome, "ACQUIRED", "{key}");
    token.expect("an ACQUIRED claim hands out its token")
}

fn debit_parameters(amount: i64) -> Value {
    json!({"account": "A", "amount": amount})
}

/// `opreg_sql.complete` with SUCCESS and `result`: the status it answers.
async fn sql_succeed(
    db: impl PgExecutor<'_>,
    key: &str,
    token: i64,
    result: &[u8],
) -> Result<String, sqlx::Error> {
    sqlx::query_scalar("SELECT status FROM opreg_sql.complete($1, $2, $3, 'SUCCESS', result => $4)")
        .bind(NS)
        .bind(key)
        .bind(token)
        .bind(result)
        .fetch_one(db)
        .await
}

/// The SQLSTATE and the contract's reason (the DETAIL) of a refusal.
fn refusal<T: std::fmt::Debug>(result: Result<T, sqlx::Error>) -> (String, String) {
    let error = result.expect_err("the call should be refused");
    let pg = error
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<PgDatabaseError>())
        .unwrap_or_else(|| panic!("a database error: {error:?}"));
    (
        pg.code().to_owned(),
        pg.detail().unwrap_or_default().to_owned(),
    )
}

fn grpc_claim(key: &str, owner: &str, amount: i64) -> pb::ClaimRequest {
    claim_request(NS, key, owner, debit_parameters(amount))
}

/// A gRPC Claim, asked again while the server answers OPERATION_BUSY: a
/// Claim waiting on an uncommitted registration gives up after the server's
/// lock timeout, and a loaded machine may stretch a short transaction past it.
async fn claim_through_busy(client: &mut Client, request: pb::ClaimRequest) -> pb::ClaimResponse {
    loop {
        match client.claim(request.clone()).await {
            Ok(answer) => return answer.into_inner(),
            Err(status) if error_reason(&status).as_deref() == Some("OPERATION_BUSY") => {}
            Err(status) => panic!("{status:?}"),
        }
    }
}

#[tokio::test]
async fn claim_debit_and_complete_commit_together_and_every_door_reads_them() {
    let mut app = spawn_app().await;
    open_account(&app.db).await;
    let mut tx = app.db.begin().await.unwrap();
    let token = sql_acquire(&mut *tx, "debit-1", "lab", 30).await;
    debit(&mut tx, 30).await.unwrap();
    let status = sql_succeed(&mut *tx, "debit-1", token, b"debited")
        .await
        .unwrap();
    assert_eq!(status, "SUCCEEDED");
    tx.commit().await.unwrap();

    assert_eq!(balance(&app.db).await, OPENING_BALANCE - 30);
    // The SQL door replays it,
    let (outcome, replayed_token) = sql_claim(&app.db, "debit-1", "again", 30).await.unwrap();
    assert_eq!(
        (outcome.as_str(), replayed_token),
        ("REPLAYED", None),
        "a replay hands out no token"
    );
    // and so does gRPC, with the result.
    let replayed = claim(&mut app.client, grpc_claim("debit-1", "grpc", 30)).await;
    assert_eq!(replayed.outcome(), ClaimOutcome::Replayed);
    let operation = replayed.operation.unwrap();
    assert_eq!(operation.result, b"debited");
    assert_eq!(balance(&app.db).await, OPENING_BALANCE - 30);
}

#[tokio::test]
async fn a_business_error_rolls_the_claim_back_with_it() {
    let app = spawn_app().await;
    open_account(&app.db).await;
    let mut tx = app.db.begin().await.unwrap();
    let (outcome, _) = sql_claim(&mut *tx, "debit-2", "lab", 30).await.unwrap();
    assert_eq!(outcome, "ACQUIRED");
    debit(&mut tx, 30).await.unwrap();
    let business = sqlx::query(
        "DO $$ BEGIN RAISE EXCEPTION 'insufficient funds' USING ERRCODE = 'P0001'; END $$",
    )
    .execute(&mut *tx)
    .await;
    assert_eq!(refusal(business).0, "P0001");
    tx.rollback().await.unwrap();

    assert_eq!(
        operation_rows(&app.db, NS, "debit-2").await,
        0,
        "operationRows"
    );
    assert_eq!(balance(&app.db).await, OPENING_BALANCE);
    let executions: i64 = sqlx::query_scalar("SELECT count(*) FROM executions")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(executions, 0);
}

#[tokio::test]
async fn claims_from_both_doors_wait_on_an_uncommitted_sql_registration_then_replay_it() {
    let app = spawn_app().await;
    open_account(&app.db).await;
    let mut first = app.db.begin().await.unwrap();
    let token = sql_acquire(&mut *first, "debit-3", "first", 30).await;

    let mut client = app.client.clone();
    let over_grpc =
        tokio::spawn(async move { claim(&mut client, grpc_claim("debit-3", "grpc", 30)).await });
    let db = app.db.clone();
    let over_sql = tokio::spawn(async move {
        let mut tx = db.begin().await.unwrap();
        let answer = sql_claim(&mut *tx, "debit-3", "second", 30).await.unwrap();
        tx.commit().await.unwrap();
        answer
    });
    // Both are seen waiting on the uncommitted row, not assumed to.
    app.observe_lock_waits(None, 2).await;
    assert!(!over_grpc.is_finished(), "the gRPC Claim did not wait");
    assert!(!over_sql.is_finished(), "the SQL Claim did not wait");
    debit(&mut first, 30).await.unwrap();
    sql_succeed(&mut *first, "debit-3", token, b"debited")
        .await
        .unwrap();
    first.commit().await.unwrap();

    let grpc_answer = over_grpc.await.unwrap();
    assert_eq!(grpc_answer.outcome(), ClaimOutcome::Replayed);
    assert_eq!(grpc_answer.operation.unwrap().result, b"debited");
    let (outcome, replayed_token) = over_sql.await.unwrap();
    assert_eq!((outcome.as_str(), replayed_token), ("REPLAYED", None));
    assert_eq!(operation_rows(&app.db, NS, "debit-3").await, 1);
    assert_eq!(balance(&app.db).await, OPENING_BALANCE - 30);
}

#[tokio::test]
async fn a_rolled_back_registration_lets_the_waiting_claim_register() {
    let app = spawn_app().await;
    let mut first = app.db.begin().await.unwrap();
    sql_claim(&mut *first, "debit-4", "first", 30)
        .await
        .unwrap();
    let db = app.db.clone();
    let waiting = tokio::spawn(async move { sql_claim(&db, "debit-4", "second", 30).await });
    app.observe_lock_waits(None, 1).await;
    assert!(!waiting.is_finished(), "the second Claim did not wait");
    first.rollback().await.unwrap();

    let (outcome, _) = waiting.await.unwrap().unwrap();
    assert_eq!(outcome, "ACQUIRED");
    let owner: String = sqlx::query_scalar(
        "SELECT lease_owner FROM operations WHERE namespace = $1 AND operation_key = 'debit-4'",
    )
    .bind(NS)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(owner, "second");
}

/// Rounds of callers racing for one key each, half through SQL transactions
/// that debit and complete before they commit, half over gRPC (which debit
/// and Complete after an ACQUIRED): each key is debited once, by its one
/// winner, and its record holds one execution.
#[tokio::test]
async fn callers_racing_through_both_doors_debit_each_key_once() {
    const ROUNDS: usize = 8;
    const CALLERS: usize = 8;
    let app = spawn_app().await;
    sqlx::raw_sql(
        "CREATE TABLE debits (operation_key text NOT NULL, door text NOT NULL, amount bigint NOT NULL)",
    )
    .execute(&app.db)
    .await
    .unwrap();
    for round in 0..ROUNDS {
        let key = format!("race-{round}");
        let mut callers = Vec::new();
        for caller in 0..CALLERS {
            let (db, mut client, key) = (app.db.clone(), app.client.clone(), key.clone());
            callers.push(tokio::spawn(async move {
                let owner = format!("caller-{caller}");
                if caller % 2 == 0 {
                    let mut tx = db.begin().await.unwrap();
                    let (outcome, token) = sql_claim(&mut *tx, &key, &owner, 30).await.unwrap();
                    if let Some(token) = token.filter(|_| outcome == "ACQUIRED") {
                        sqlx::query("INSERT INTO debits VALUES ($1, 'sql', 30)")
                            .bind(&key)
                            .execute(&mut *tx)
                            .await
                            .unwrap();
                        sql_succeed(&mut *tx, &key, token, b"debited")
                            .await
                            .unwrap();
                    }
                    tx.commit().await.unwrap();
                    outcome
                } else {
                    let answer =
                        claim_through_busy(&mut client, grpc_claim(&key, &owner, 30)).await;
                    if answer.outcome() == ClaimOutcome::Acquired {
                        sqlx::query("INSERT INTO debits VALUES ($1, 'grpc', 30)")
                            .bind(&key)
                            .execute(&db)
                            .await
                            .unwrap();
                        client
                            .complete(complete_request(
                                NS,
                                &key,
                                token(&answer),
                                success(b"debited"),
                            ))
                            .await
                            .unwrap();
                    }
                    answer
                        .outcome()
                        .as_str_name()
                        .trim_start_matches("CLAIM_OUTCOME_")
                        .to_owned()
                }
            }));
        }
        let mut acquired = 0;
        for caller in callers {
            let outcome = caller.await.unwrap();
            assert!(
                ["ACQUIRED", "IN_PROGRESS", "REPLAYED"].contains(&outcome.as_str()),
                "{key}: {outcome}"
            );
            acquired += usize::from(outcome == "ACQUIRED");
        }
        assert_eq!(acquired, 1, "{key}: one winner");
        let (debits, executions, status): (i64, i64, String) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM debits WHERE operation_key = $2),
                    (SELECT count(*) FROM executions WHERE namespace = $1 AND operation_key = $2),
                    (SELECT status FROM operations WHERE namespace = $1 AND operation_key = $2)",
        )
        .bind(NS)
        .bind(&key)
        .fetch_one(&app.db)
        .await
        .unwrap();
        assert_eq!(
            (debits, executions, status.as_str()),
            (1, 1, "succeeded"),
            "{key}"
        );
    }
}

#[tokio::test]
async fn each_door_refuses_a_token_that_is_not_the_current_one() {
    let mut app = spawn_app().await;
    let foreign = i64::try_from(token(
        &claim(&mut app.client, grpc_claim("another", "grpc", 1)).await,
    ))
    .unwrap();

    // Leased over gRPC: SQL cannot complete or write with another token,
    let held = token(&claim(&mut app.client, grpc_claim("held-by-grpc", "grpc", 1)).await);
    let answer = sql_claim(&app.db, "held-by-grpc", "lab", 1).await.unwrap();
    assert_eq!(
        answer,
        ("IN_PROGRESS".into(), None),
        "another holder's token is not handed out"
    );
    let refused = sql_succeed(&app.db, "held-by-grpc", foreign, b"x").await;
    assert_eq!(
        refusal(refused),
        ("55000".into(), "STALE_FENCING_TOKEN".into())
    );
    let write = sqlx::query(
        "SELECT * FROM opreg_sql.fenced_write($1, 'account:1', 'held-by-grpc', $2, 'x')",
    )
    .bind(NS)
    .bind(foreign)
    .execute(&app.db)
    .await;
    assert_eq!(
        refusal(write),
        ("55000".into(), "STALE_FENCING_TOKEN".into())
    );
    // but completes it with the lease's own token.
    let status = sql_succeed(&app.db, "held-by-grpc", i64::try_from(held).unwrap(), b"ok")
        .await
        .unwrap();
    assert_eq!(status, "SUCCEEDED");

    // Leased through SQL: gRPC cannot complete it with another token.
    let leased = sql_acquire(&app.db, "held-in-sql", "lab", 1).await;
    let refused = app
        .client
        .complete(complete_request(
            NS,
            "held-in-sql",
            u64::try_from(foreign).unwrap(),
            success(b"x"),
        ))
        .await;
    assert_error(refused, tonic::Code::Aborted, "STALE_FENCING_TOKEN");
    // A report recorded over gRPC is the same report to the SQL door.
    app.client
        .complete(complete_request(
            NS,
            "held-in-sql",
            u64::try_from(leased).unwrap(),
            success(b"same"),
        ))
        .await
        .unwrap();
    assert_eq!(
        sql_succeed(&app.db, "held-in-sql", leased, b"same")
            .await
            .unwrap(),
        "SUCCEEDED"
    );
    let different = sql_succeed(&app.db, "held-in-sql", leased, b"different").await;
    assert_eq!(
        refusal(different),
        ("55000".into(), "ALREADY_COMPLETED".into())
    );
}

#[tokio::test]
async fn a_takeover_over_grpc_fences_out_the_sql_holder() {
    let mut app = spawn_app().await;
    let (_, first) = sqlx::query_as::<_, (String, i64)>(
        "SELECT outcome, fencing_token FROM opreg_sql.claim($1, 'transfer-1', '{}', 'first')",
    )
    .bind(NS)
    .fetch_one(&app.db)
    .await
    .unwrap();
    let written: (i64, i64) = sqlx::query_as(
        "SELECT fence, version FROM opreg_sql.fenced_write($1, 'ledger', 'transfer-1', $2, 'first')",
    )
    .bind(NS)
    .bind(first)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(written, (first, 1));
    app.expire_lease(NS, "transfer-1").await;
    let taken = claim(
        &mut app.client,
        claim_request(NS, "transfer-1", "second", json!({})),
    )
    .await;
    assert_eq!(taken.outcome(), ClaimOutcome::Acquired);
    let second = i64::try_from(token(&taken)).unwrap();
    assert!(second > first);

    let stale = sqlx::query(
        "SELECT * FROM opreg_sql.fenced_write($1, 'ledger', 'transfer-1', $2, 'stale')",
    )
    .bind(NS)
    .bind(first)
    .execute(&app.db)
    .await;
    assert_eq!(
        refusal(stale),
        ("55000".into(), "STALE_FENCING_TOKEN".into())
    );
    let stale = sql_succeed(&app.db, "transfer-1", first, b"late").await;
    assert_eq!(
        refusal(stale),
        ("55000".into(), "STALE_FENCING_TOKEN".into())
    );
    let (value, fence): (Vec<u8>, i64) = sqlx::query_as(
        "SELECT value, fence FROM resources WHERE namespace = $1 AND resource = 'ledger'",
    )
    .bind(NS)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(
        (value.as_slice(), fence),
        (&b"first"[..], first),
        "the stale write changed nothing"
    );
    let history: Vec<(i64, String)> = sqlx::query_as(
        "SELECT fencing_token, outcome FROM executions
         WHERE namespace = $1 AND operation_key = 'transfer-1' ORDER BY fencing_token",
    )
    .bind(NS)
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(
        history,
        [(first, "superseded".into()), (second, "running".into())]
    );
}

#[tokio::test]
async fn an_unknown_outcome_recorded_in_sql_is_seen_by_lookup_the_queue_claim_due_and_the_gauges() {
    let mut app = spawn_app_with(|config| {
        config.telemetry.gauge_refresh_interval = Duration::from_millis(100);
    })
    .await;
    let token = sql_acquire(&app.db, "payout-1", "lab", 5).await;
    let status: String = sqlx::query_scalar(
        "SELECT status FROM opreg_sql.complete($1, 'payout-1', $2, 'UNKNOWN', remote_ref => 'psp-7', message => 'timed out')",
    )
    .bind(NS)
    .bind(token)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(status, "UNKNOWN");

    let looked_up = lookup_history(&mut app.client, NS, "payout-1").await;
    let operation = looked_up.operation.unwrap();
    assert_eq!(operation.status(), pb::OperationStatus::Unknown);
    assert_eq!(operation.remote_ref, "psp-7");
    let listed = app
        .admin
        .list_operations(pb::ListOperationsRequest {
            namespace: NS.into(),
            statuses: vec![pb::OperationStatus::Unknown.into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operations;
    assert_eq!(listed.len(), 1);
    let ns = ("namespace", NS);
    let mut unknown_gauge = 0.0;
    for _ in 0..50 {
        unknown_gauge = scrape(app.metrics_addr)
            .await
            .value("opreg_operations", &[ns, ("status", "unknown")]);
        if unknown_gauge == 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        unknown_gauge, 1.0,
        "the gauges read what the SQL door wrote"
    );
    let handed = claim_due(&mut app.client, NS, "worker", 10).await;
    assert_eq!(handed.len(), 1);
    assert_eq!(handed[0].outcome(), ClaimOutcome::Reconcile);
    assert!(i64::try_from(handed[0].lease.as_ref().unwrap().fencing_token).unwrap() > token);
}

/// A login role of its own for one test, dropped with what it was granted.
struct DoorRole {
    name: String,
    options: sqlx::postgres::PgConnectOptions,
}

impl DoorRole {
    async fn create(app: &TestApp, tag: &str) -> Self {
        let name = format!("door_{tag}_{}", std::process::id());
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE ROLE {name} LOGIN")))
            .execute(&app.db)
            .await
            .unwrap();
        Self {
            options: app.db_options.clone().username(&name),
            name,
        }
    }

    async fn connect(&self) -> PgConnection {
        PgConnection::connect_with(&self.options).await.unwrap()
    }

    async fn drop_from(self, app: &TestApp) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP OWNED BY {0}; DROP ROLE {0}",
            self.name
        )))
        .execute(&app.db)
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn a_role_reaches_only_the_namespaces_it_was_granted() {
    let app = spawn_app().await;
    let role = DoorRole::create(&app, "granted").await;
    sqlx::query("SELECT opreg_sql.grant_namespace($1::regrole, 'payments')")
        .bind(&role.name)
        .execute(&app.db)
        .await
        .unwrap();
    let mut door = role.connect().await;
    let params = json!({"amount": 1});

    let (outcome, token) = sql_claim_in(&mut door, "payments", "debit-1", "app", &params)
        .await
        .unwrap();
    assert_eq!(outcome, "ACQUIRED");
    let token = token.unwrap();
    let denied = ("42501".to_owned(), "PERMISSION_DENIED".to_owned());
    assert_eq!(
        refusal(sql_claim_in(&mut door, "ledger", "debit-1", "app", &params).await),
        denied
    );
    let lookup = sqlx::query("SELECT * FROM opreg_sql.lookup('ledger', 'debit-1')")
        .execute(&mut door)
        .await;
    assert_eq!(refusal(lookup), denied);
    // An operation of another namespace, with its token known: neither its
    // report nor a write under it gets through.
    let (_, foreign) = sql_claim_in(&app.db, "ledger", "entry-1", "ledger-app", &params)
        .await
        .unwrap();
    let foreign = foreign.unwrap();
    let report =
        sqlx::query("SELECT * FROM opreg_sql.complete('ledger', 'entry-1', $1, 'SUCCESS')")
            .bind(foreign)
            .execute(&mut door)
            .await;
    assert_eq!(refusal(report), denied);
    let write = sqlx::query(
        "SELECT * FROM opreg_sql.fenced_write('ledger', 'balance', 'entry-1', $1, 'x')",
    )
    .bind(foreign)
    .execute(&mut door)
    .await;
    assert_eq!(refusal(write), denied);
    // The tables and the grants are out of its reach but through the door.
    let read = sqlx::query("SELECT count(*) FROM operations")
        .execute(&mut door)
        .await;
    assert_eq!(refusal(read).0, "42501");
    let widen = sqlx::query("SELECT opreg_sql.grant_namespace(current_user::regrole, '*')")
        .execute(&mut door)
        .await;
    assert_eq!(refusal(widen).0, "42501");
    let forged =
        sqlx::query("INSERT INTO opreg_sql.namespace_grants VALUES (current_user::regrole, '*')")
            .execute(&mut door)
            .await;
    assert_eq!(refusal(forged).0, "42501");
    let completed: String = sqlx::query_scalar(
        "SELECT status FROM opreg_sql.complete('payments', 'debit-1', $1, 'SUCCESS')",
    )
    .bind(token)
    .fetch_one(&mut door)
    .await
    .unwrap();
    assert_eq!(completed, "SUCCEEDED");

    // Taken back, the namespace is refused too, and nothing was written outside it.
    let revoked: bool =
        sqlx::query_scalar("SELECT opreg_sql.revoke_namespace($1::regrole, 'payments')")
            .bind(&role.name)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert!(revoked);
    assert_eq!(
        refusal(sql_claim_in(&mut door, "payments", "debit-2", "app", &params).await),
        denied
    );
    let rows: Vec<(String, String, String)> =
        sqlx::query_as("SELECT namespace, operation_key, status FROM operations ORDER BY 1, 2")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(
        rows,
        [
            ("ledger".into(), "entry-1".into(), "in_progress".into()),
            ("payments".into(), "debit-1".into(), "succeeded".into())
        ]
    );
    let resources: i64 = sqlx::query_scalar("SELECT count(*) FROM resources")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(resources, 0);
    door.close().await.unwrap();
    role.drop_from(&app).await;
}

#[tokio::test]
async fn a_grant_to_a_group_role_covers_its_members_and_set_role() {
    let app = spawn_app().await;
    let group = DoorRole::create(&app, "group").await;
    let member = DoorRole::create(&app, "member").await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "GRANT {} TO {}",
        group.name, member.name
    )))
    .execute(&app.db)
    .await
    .unwrap();
    sqlx::query("SELECT opreg_sql.grant_namespace($1::regrole, 'payments')")
        .bind(&group.name)
        .execute(&app.db)
        .await
        .unwrap();
    let mut door = member.connect().await;
    let (outcome, _) = sql_claim_in(&mut door, "payments", "k", "app", &json!({}))
        .await
        .unwrap();
    assert_eq!(outcome, "ACQUIRED");
    // A member that sets another role answers as that role, whose
    // namespace is another.
    let other = DoorRole::create(&app, "other").await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "GRANT {} TO {}",
        other.name, member.name
    )))
    .execute(&app.db)
    .await
    .unwrap();
    sqlx::query("SELECT opreg_sql.grant_namespace($1::regrole, 'ledger')")
        .bind(&other.name)
        .execute(&app.db)
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SET ROLE {}", other.name)))
        .execute(&mut door)
        .await
        .unwrap();
    let refused = sql_claim_in(&mut door, "payments", "k2", "app", &json!({})).await;
    assert_eq!(
        refusal(refused),
        ("42501".into(), "PERMISSION_DENIED".into())
    );
    let (outcome, _) = sql_claim_in(&mut door, "ledger", "k2", "app", &json!({}))
        .await
        .unwrap();
    assert_eq!(outcome, "ACQUIRED");
    door.close().await.unwrap();
    for role in [member, other, group] {
        role.drop_from(&app).await;
    }
}

#[tokio::test]
async fn bad_input_is_refused_as_invalid_argument_and_writes_nothing() {
    let app = spawn_app().await;
    let invalid = ("22023".to_owned(), "INVALID_ARGUMENT".to_owned());
    for call in [
        "SELECT * FROM opreg_sql.claim('', 'k', '{}', 'o')",
        "SELECT * FROM opreg_sql.claim('ns', ' k', '{}', 'o')",
        "SELECT * FROM opreg_sql.claim('ns', 'k', '[1]', 'o')",
        "SELECT * FROM opreg_sql.claim('ns', 'k', '{}', '')",
        "SELECT * FROM opreg_sql.claim('ns', 'k', '{}', 'o', lease => '2 hours')",
        "SELECT * FROM opreg_sql.claim('ns', 'k', '{}', 'o', max_attempts => 0)",
        "SELECT * FROM opreg_sql.claim('ns', 'k', '{}', 'o', initial_backoff => '2 s', max_backoff => '1 s')",
        "SELECT * FROM opreg_sql.claim('ns', 'k', NULL, 'o')",
        "SELECT * FROM opreg_sql.complete('ns', 'k', 0, 'SUCCESS')",
        "SELECT * FROM opreg_sql.complete('ns', 'k', 1, 'DONE')",
        "SELECT * FROM opreg_sql.complete('ns', 'k', 1, 'SUCCESS', code => 'E1')",
        "SELECT * FROM opreg_sql.complete('ns', 'k', 1, 'FAILURE', result => 'x')",
        "SELECT * FROM opreg_sql.complete('ns', 'k', 1, 'RETRYABLE', retry_after => '-1 s')",
        "SELECT * FROM opreg_sql.fenced_write('ns', '', 'k', 1, 'x')",
        "SELECT * FROM opreg_sql.lookup('ns', '')",
    ] {
        let refused = sqlx::query(call).execute(&app.db).await;
        assert_eq!(refusal(refused), invalid, "{call}");
    }
    let large = format!(
        "SELECT * FROM opreg_sql.claim('ns', 'k', jsonb_build_object('blob', repeat('x', {})), 'o')",
        70_000
    );
    assert_eq!(
        refusal(
            sqlx::query(sqlx::AssertSqlSafe(large))
                .execute(&app.db)
                .await
        ),
        invalid
    );
    let missing = sqlx::query("SELECT * FROM opreg_sql.complete('ns', 'nothing', 1, 'SUCCESS')")
        .execute(&app.db)
        .await;
    assert_eq!(
        refusal(missing),
        ("P0002".into(), "OPERATION_NOT_FOUND".into())
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM operations")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn a_conflicting_claim_names_the_fields_that_differ() {
    let app = spawn_app().await;
    sql_claim(&app.db, "debit-5", "lab", 100).await.unwrap();
    let refused = sql_claim(&app.db, "debit-5", "lab", 101).await.unwrap_err();
    let pg = refused
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<PgDatabaseError>())
        .unwrap();
    assert_eq!(
        (pg.code(), pg.detail()),
        ("23505", Some("PARAMETER_CONFLICT"))
    );
    assert!(
        pg.hint().unwrap().ends_with("differingFields=amount"),
        "{:?}",
        pg.hint()
    );
}

#[tokio::test]
async fn retention_purges_what_the_sql_door_finished() {
    let app = spawn_app_with(|config| {
        config.lifecycle.maintenance_interval = Duration::from_millis(100);
        config.lifecycle.retention = "1h".parse().unwrap();
    })
    .await;
    for key in ["old", "recent"] {
        let token = sql_acquire(&app.db, key, "lab", 1).await;
        sql_succeed(&app.db, key, token, b"ok").await.unwrap();
    }
    sqlx::query(
        "UPDATE operations SET completed_at = clock_timestamp() - interval '2 hours'
         WHERE operation_key = 'old'",
    )
    .execute(&app.db)
    .await
    .unwrap();
    for _ in 0..100 {
        if operation_rows(&app.db, NS, "old").await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        operation_rows(&app.db, NS, "old").await,
        0,
        "purged past its retention"
    );
    assert_eq!(
        operation_rows(&app.db, NS, "recent").await,
        1,
        "kept within it"
    );
}

#[tokio::test]
async fn a_registration_that_waited_on_a_rolled_back_one_keeps_its_whole_lease() {
    let app = spawn_app().await;
    let mut first = app.db.begin().await.unwrap();
    sql_acquire(&mut *first, "slow", "first", 1).await;
    let db = app.db.clone();
    let waiting = tokio::spawn(async move { sql_claim(&db, "slow", "second", 1).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    first.rollback().await.unwrap();
    let (outcome, _) = waiting.await.unwrap().unwrap();
    assert_eq!(outcome, "ACQUIRED");

    // The lease, the creation and the deadline count from after the wait.
    let (lease, since_created, deadline): (f64, f64, f64) = sqlx::query_as(
        "SELECT extract(epoch FROM lease_expires_at - created_at)::float8,
                extract(epoch FROM clock_timestamp() - created_at)::float8,
                extract(epoch FROM deadline_at - created_at)::float8
         FROM operations WHERE namespace = $1 AND operation_key = 'slow'",
    )
    .bind(NS)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!((lease, deadline), (30.0, 86_400.0));
    assert!(
        since_created < 1.5,
        "created {since_created} s ago: before the wait"
    );
}

#[tokio::test]
async fn input_a_locale_or_a_session_setting_would_bend_is_answered_as_the_server_answers_it() {
    let mut app = spawn_app().await;
    let invalid = ("22023".to_owned(), "INVALID_ARGUMENT".to_owned());
    // White space by Unicode's White_Space, whatever the database's locale.
    for key in ["\u{a0}k", "k\u{3000}", "k\u{2028}", "k\u{85}x"] {
        let refused = sql_claim(&app.db, key, "lab", 1).await;
        assert_eq!(refusal(refused), invalid, "{key:?}");
    }
    // Nesting past 20 levels (the outer object is level 1), before any
    // canonical form is made; 20 levels are fine.
    let mut deep = json!(1);
    for _ in 0..20 {
        deep = json!({ "a": deep });
    }
    let (outcome, _) = sql_claim_in(&app.db, NS, "deep", "lab", &deep)
        .await
        .unwrap();
    assert_eq!(outcome, "ACQUIRED");
    let refused = sql_claim_in(&app.db, NS, "deeper", "lab", &json!({ "a": deep })).await;
    assert_eq!(refusal(refused), invalid);
    // A number closer to zero than any double is the 0 every client reads.
    let tiny = sqlx::query_scalar::<_, String>(
        "SELECT outcome FROM opreg_sql.claim($1, 'tiny', '{\"amount\": 1e-400}', 'lab')",
    )
    .bind(NS)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(tiny, "ACQUIRED");
    let same = claim(
        &mut app.client,
        claim_request(NS, "tiny", "grpc", json!({"amount": 0})),
    )
    .await;
    assert_eq!(
        same.outcome(),
        ClaimOutcome::InProgress,
        "the same parameters"
    );
    // Backslashes read as escapes in an old session setting change nothing.
    let mut legacy = PgConnection::connect_with(&app.db_options).await.unwrap();
    sqlx::raw_sql("SET standard_conforming_strings = off")
        .execute(&mut legacy)
        .await
        .unwrap();
    let (outcome, _) = sql_claim_in(&mut legacy, NS, "legacy", "lab", &json!({"path": "a\\b\n"}))
        .await
        .unwrap();
    assert_eq!(outcome, "ACQUIRED");
    let stored: String = sqlx::query_scalar(
        "SELECT parameters_canonical FROM operations WHERE namespace = $1 AND operation_key = 'legacy'",
    )
    .bind(NS)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(stored, r#"{"path":"a\\b\n"}"#);
}

#[tokio::test]
async fn a_dropped_roles_grants_do_not_pass_to_a_new_role_of_its_name() {
    let app = spawn_app().await;
    let role = DoorRole::create(&app, "reborn").await;
    let name = role.name.clone();
    sqlx::query("SELECT opreg_sql.grant_namespace($1::regrole, 'payments')")
        .bind(&name)
        .execute(&app.db)
        .await
        .unwrap();
    role.drop_from(&app).await;
    let reborn = DoorRole::create(&app, "reborn").await;
    assert_eq!(reborn.name, name);
    sqlx::query("SELECT opreg_sql.grant_namespace($1::regrole, 'ledger')")
        .bind(&name)
        .execute(&app.db)
        .await
        .unwrap();
    let mut door = reborn.connect().await;
    let refused = sql_claim_in(&mut door, "payments", "k", "app", &json!({})).await;
    assert_eq!(
        refusal(refused),
        ("42501".into(), "PERMISSION_DENIED".into())
    );
    door.close().await.unwrap();
    reborn.drop_from(&app).await;
}

/// A takeover whose row gains a new version (same token, status and expired
/// lease) between the statement's start and its lock: the claim waits, takes
/// over the version that committed, and writes the replaced execution to the
/// history once.
#[tokio::test]
async fn a_takeover_racing_a_new_version_of_its_row_archives_the_replaced_execution_once() {
    let app = spawn_app().await;
    let first = sqlx::query_scalar::<_, i64>(
        "SELECT fencing_token FROM opreg_sql.claim($1, 'contended', '{}', 'first')",
    )
    .bind(NS)
    .fetch_one(&app.db)
    .await
    .unwrap();
    app.expire_lease(NS, "contended").await;
    let mut other = app.db.begin().await.unwrap();
    sqlx::query(
        "UPDATE operations SET updated_at = updated_at WHERE namespace = $1 AND operation_key = 'contended'",
    )
    .bind(NS)
    .execute(&mut *other)
    .await
    .unwrap();
    let db = app.db.clone();
    let taking = tokio::spawn(async move {
        sqlx::query_as::<_, (String, Option<i64>)>(
            "SELECT outcome, fencing_token FROM opreg_sql.claim($1, 'contended', '{}', 'second')",
        )
        .bind(NS)
        .fetch_one(&db)
        .await
    });
    app.observe_lock_waits(None, 1).await;
    other.commit().await.unwrap();

    let (outcome, second) = taking.await.unwrap().unwrap();
    assert_eq!(outcome, "ACQUIRED");
    let history: Vec<(i64, String)> = sqlx::query_as(
        "SELECT fencing_token, outcome FROM execution_history
         WHERE namespace = $1 AND operation_key = 'contended'",
    )
    .bind(NS)
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(history, [(first, "superseded".into())]);
    let current: i64 = sqlx::query_scalar(
        "SELECT execution_token FROM operations WHERE namespace = $1 AND operation_key = 'contended'",
    )
    .bind(NS)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(Some(current), second);
}
