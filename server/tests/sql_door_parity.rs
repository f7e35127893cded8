//! The SQL door's functions are the registry's state machine a second time,
//! in PL/pgSQL. This test holds them to the server: each scenario runs the
//! same Claims and Completes through gRPC in one namespace and through
//! `opreg_sql` in another, and after every step compares the answers and the
//! whole row each door left (status, attempts, lease, the current execution
//! with its report digest, the replaced executions, the outcome columns, the
//! lease's length, a retry's delay against its cap), leaving out only tokens
//! and times.

mod common;

use std::time::Duration;

use common::*;
use opreg_client::error_reason;
use opreg_client::proto::{self as pb, complete_request::Outcome};
use serde_json::{Value, json};
use sqlx::postgres::PgDatabaseError;

const GRPC: &str = "parity-grpc";
const SQL: &str = "parity-sql";

/// A report, as both doors take it.
#[derive(Clone)]
enum Report {
    Success(&'static [u8]),
    Failure(&'static str),
    Retryable(Option<Duration>),
    Unknown(&'static str),
}

/// Which lease a Complete presents: the newest one handed out, or the one before.
#[derive(Clone, Copy)]
enum Token {
    Latest,
    Previous,
}

#[derive(Clone)]
enum Step {
    Claim {
        owner: &'static str,
        lease_seconds: u64,
        max_attempts: u32,
    },
    Complete(Token, Report),
    Wait(Duration),
    /// An operator holds the operation (OperationAdmin, for both doors).
    Hold,
}

fn claim_by(owner: &'static str) -> Step {
    Step::Claim {
        owner,
        lease_seconds: 30,
        max_attempts: 5,
    }
}

fn complete(report: Report) -> Step {
    Step::Complete(Token::Latest, report)
}

/// One door's side of a scenario: the tokens it was handed, in order.
struct Side {
    namespace: &'static str,
    tokens: Vec<u64>,
}

impl Side {
    fn token(&self, which: Token) -> u64 {
        let back = match which {
            Token::Latest => 1,
            Token::Previous => 2,
        };
        self.tokens[self.tokens.len() - back]
    }

    async fn claim(&mut self, app: &mut TestApp, key: &str, step: &Step) -> String {
        let Step::Claim {
            owner,
            lease_seconds,
            max_attempts,
        } = *step
        else {
            unreachable!()
        };
        let parameters = json!({"key": key, "amount": 10});
        let (outcome, token) = if self.namespace == GRPC {
            let mut request = claim_request(GRPC, key, owner, parameters);
            request.lease_ttl = Some(prost_types::Duration {
                seconds: i64::try_from(lease_seconds).unwrap(),
                nanos: 0,
            });
            request.retry_policy = Some(policy(max_attempts));
            let answer = claim(&mut app.client, request).await;
            let name = answer
                .outcome()
                .as_str_name()
                .trim_start_matches("CLAIM_OUTCOME_");
            (
                name.to_owned(),
                answer.lease.map(|lease| lease.fencing_token),
            )
        } else {
            let (outcome, token): (String, Option<i64>) = sqlx::query_as(
                "SELECT outcome, fencing_token FROM opreg_sql.claim($1, $2, $3::jsonb, $4,
                     lease => make_interval(secs => $5), execution_id => 'run-' || $4,
                     max_attempts => $6, initial_backoff => '1 second',
                     max_backoff => '1 second', deadline => '86400 seconds')",
            )
            .bind(SQL)
            .bind(key)
            .bind(parameters.to_string())
            .bind(owner)
            .bind(f64::from(u32::try_from(lease_seconds).unwrap()))
            .bind(i32::try_from(max_attempts).unwrap())
            .fetch_one(&app.db)
            .await
            .unwrap();
            (outcome, token.map(|token| u64::try_from(token).unwrap()))
        };
        // A resumed lease is the same token: count it once.
        if let Some(token) = token.filter(|token| self.tokens.last() != Some(token)) {
            self.tokens.push(token);
        }
        // Whether the answer hands out a lease is part of the answer.
        match token {
            Some(_) => format!("{outcome}+lease"),
            None => outcome,
        }
    }

    async fn hold(&self, app: &mut TestApp, key: &str) -> String {
        app.admin
            .hold_operation(pb::HoldOperationRequest {
                namespace: self.namespace.into(),
                operation_key: key.into(),
                operator: "ops".into(),
                reason: "parity".into(),
            })
            .await
            .unwrap();
        "held".into()
    }

    /// The status a Complete answered, or the contract's reason it was refused for.
    async fn complete(&self, app: &mut TestApp, key: &str, token: u64, report: &Report) -> String {
        if self.namespace == GRPC {
            let outcome = match report.clone() {
                Report::Success(result) => success(result),
                Report::Failure(code) => Outcome::Failure(pb::Failure {
                    code: code.into(),
                    message: "declined".into(),
                }),
                Report::Retryable(retry_after) => retryable(retry_after),
                Report::Unknown(remote_ref) => unknown(remote_ref),
            };
            return match app
                .client
                .complete(complete_request(GRPC, key, token, outcome))
                .await
            {
                Ok(answer) => {
                    let status = answer.into_inner().operation.unwrap().status();
                    status
                        .as_str_name()
                        .trim_start_matches("OPERATION_STATUS_")
                        .to_owned()
                }
                Err(status) => error_reason(&status).unwrap_or_default(),
            };
        }
        let query = sqlx::query_scalar(
            "SELECT status FROM opreg_sql.complete($1, $2, $3, $4, result => $5, code => $6,
                 message => $7, error_class => $8, retry_after => make_interval(secs => $9),
                 remote_ref => $10)",
        )
        .bind(SQL)
        .bind(key)
        .bind(i64::try_from(token).unwrap());
        let query = match report {
            Report::Success(result) => query
                .bind("SUCCESS")
                .bind(Some(result.to_vec()))
                .bind("")
                .bind("")
                .bind("")
                .bind(None::<f64>)
                .bind(""),
            Report::Failure(code) => query
                .bind("FAILURE")
                .bind(None::<Vec<u8>>)
                .bind(*code)
                .bind("declined")
                .bind("")
                .bind(None::<f64>)
                .bind(""),
            Report::Retryable(retry_after) => query
                .bind("RETRYABLE")
                .bind(None::<Vec<u8>>)
                .bind("")
                .bind("connect timed out")
                .bind("downstream_timeout")
                .bind(retry_after.map(|d| d.as_secs_f64()))
                .bind(""),
            Report::Unknown(remote_ref) => query
                .bind("UNKNOWN")
                .bind(None::<Vec<u8>>)
                .bind("")
                .bind("response lost after send")
                .bind("")
                .bind(None::<f64>)
                .bind(*remote_ref),
        };
        match query.fetch_one(&app.db).await {
            Ok(status) => status,
            Err(error) => error
                .as_database_error()
                .and_then(|e| e.try_downcast_ref::<PgDatabaseError>())
                .and_then(PgDatabaseError::detail)
                .unwrap_or_else(|| panic!("{error:?}"))
                .to_owned(),
        }
    }

    /// The row the door left, without tokens and times.
    async fn row(&self, app: &TestApp, key: &str) -> Value {
        let row: String = sqlx::query_scalar(
            "SELECT row_to_json(r)::text FROM (
                 SELECT status, attempts, reconciling, lease_takeover, lease_owner,
                        CASE WHEN execution_outcome = 'running'
                             THEN extract(epoch FROM lease_expires_at - execution_started_at)::float8
                        END AS lease_seconds,
                        next_attempt_at - updated_at
                            <= least(max_backoff_us, initial_backoff_us
                                     * 2 ^ greatest(0, attempts - budget_attempts_base - 1))
                               * interval '1 microsecond' AS retry_within_its_cap,
                        execution_kind, execution_outcome,
                        encode(execution_outcome_digest, 'hex') AS report_digest,
                        execution_error_class, execution_message, execution_id, execution_owner,
                        execution_finished_at IS NOT NULL AS execution_finished,
                        encode(result, 'hex') AS result, result_ref, failure_code, failure_message,
                        remote_ref, last_error_class, last_error_message,
                        next_attempt_at IS NOT NULL AS retry_due, completed_at IS NOT NULL AS completed,
                        unknown_since IS NOT NULL AS unknown, max_attempts, budget_attempts_base,
                        initial_backoff_us, max_backoff_us,
                        extract(epoch FROM deadline_at - created_at)::bigint AS deadline_seconds,
                        encode(parameters_digest, 'hex') AS digest, parameters_canonical,
                        held_at IS NOT NULL AS held,
                        (SELECT string_agg(h.attempt || ':' || h.kind || ':' || h.outcome || ':'
                                           || coalesce(encode(h.outcome_digest, 'hex'), '-'), ','
                                           ORDER BY h.fencing_token)
                         FROM execution_history AS h
                         WHERE h.namespace = o.namespace AND h.operation_key = o.operation_key)
                            AS replaced
                 FROM operations AS o WHERE namespace = $1 AND operation_key = $2) AS r",
        )
        .bind(self.namespace)
        .bind(key)
        .fetch_one(&app.db)
        .await
        .unwrap();
        serde_json::from_str(&row).unwrap()
    }
}

/// Runs `steps` through both doors and compares after each.
async fn both_doors_agree(app: &mut TestApp, key: &str, steps: &[Step], expected: &[&str]) {
    let mut grpc = Side {
        namespace: GRPC,
        tokens: Vec::new(),
    };
    let mut sql = Side {
        namespace: SQL,
        tokens: Vec::new(),
    };
    let mut answers = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        let (over_grpc, over_sql) = match step {
            Step::Wait(pause) => {
                tokio::time::sleep(*pause).await;
                continue;
            }
            Step::Claim { .. } => (
                grpc.claim(app, key, step).await,
                sql.claim(app, key, step).await,
            ),
            Step::Hold => (grpc.hold(app, key).await, sql.hold(app, key).await),
            Step::Complete(which, report) => (
                grpc.complete(app, key, grpc.token(*which), report).await,
                sql.complete(app, key, sql.token(*which), report).await,
            ),
        };
        assert_eq!(
            over_sql, over_grpc,
            "{key}, step {index}: the answers differ"
        );
        assert_eq!(
            sql.row(app, key).await,
            grpc.row(app, key).await,
            "{key}, step {index} ({over_grpc}): the rows differ"
        );
        answers.push(over_grpc);
    }
    assert_eq!(answers, expected, "{key}");
}

#[tokio::test]
async fn claims_and_completes_leave_the_same_answers_and_rows_through_either_door() {
    let mut app = spawn_app().await;
    both_doors_agree(
        &mut app,
        "lifecycle",
        &[
            claim_by("first"),
            claim_by("second"),
            claim_by("first"),
            complete(Report::Retryable(Some(Duration::ZERO))),
            claim_by("second"),
            complete(Report::Unknown("psp-7")),
            claim_by("third"),
            complete(Report::Success(b"settled")),
            complete(Report::Success(b"settled")),
            complete(Report::Success(b"other")),
            Step::Complete(Token::Previous, Report::Success(b"settled")),
            claim_by("fourth"),
        ],
        &[
            "ACQUIRED+lease",
            "IN_PROGRESS",
            "ACQUIRED+lease",
            "RETRY_SCHEDULED",
            "ACQUIRED+lease",
            "UNKNOWN",
            "RECONCILE+lease",
            "SUCCEEDED",
            "SUCCEEDED",
            "ALREADY_COMPLETED",
            // The reconcile's predecessor reported UNKNOWN: another report
            // from its token is answered from that record.
            "ALREADY_COMPLETED",
            "REPLAYED",
        ],
    )
    .await;
    both_doors_agree(
        &mut app,
        "pushback",
        &[
            claim_by("first"),
            complete(Report::Retryable(Some(Duration::from_millis(1500)))),
            complete(Report::Retryable(Some(Duration::from_millis(1500)))),
            claim_by("second"),
        ],
        &[
            "ACQUIRED+lease",
            "RETRY_SCHEDULED",
            "RETRY_SCHEDULED",
            "RETRY_LATER",
        ],
    )
    .await;
}

#[tokio::test]
async fn budgets_takeovers_and_failures_agree_through_either_door() {
    let mut app = spawn_app().await;
    let once = |owner, lease_seconds| Step::Claim {
        owner,
        lease_seconds,
        max_attempts: 1,
    };
    both_doors_agree(
        &mut app,
        "spent-by-a-report",
        &[
            once("first", 30),
            complete(Report::Retryable(None)),
            once("second", 30),
        ],
        &["ACQUIRED+lease", "DEAD", "DEAD"],
    )
    .await;
    both_doors_agree(
        &mut app,
        "spent-by-a-claim",
        &[
            once("first", 1),
            Step::Wait(Duration::from_millis(1100)),
            once("second", 30),
        ],
        &["ACQUIRED+lease", "DEAD"],
    )
    .await;
    let short = |owner| Step::Claim {
        owner,
        lease_seconds: 1,
        max_attempts: 5,
    };
    both_doors_agree(
        &mut app,
        "taken-over",
        &[
            short("first"),
            Step::Wait(Duration::from_millis(1100)),
            short("second"),
            Step::Complete(Token::Previous, Report::Success(b"late")),
            complete(Report::Failure("card_declined")),
            claim_by("third"),
        ],
        &[
            "ACQUIRED+lease",
            "ACQUIRED+lease",
            "STALE_FENCING_TOKEN",
            "FAILED",
            "REPLAYED",
        ],
    )
    .await;
    both_doors_agree(
        &mut app,
        "held",
        &[
            claim_by("first"),
            Step::Hold,
            claim_by("second"),
            complete(Report::Success(b"while held")),
        ],
        &["ACQUIRED+lease", "held", "HELD", "STALE_FENCING_TOKEN"],
    )
    .await;
    both_doors_agree(
        &mut app,
        "reconciled-twice",
        &[
            claim_by("first"),
            complete(Report::Unknown("psp-8")),
            short("second"),
            Step::Wait(Duration::from_millis(1100)),
            claim_by("third"),
            complete(Report::Success(b"found")),
        ],
        &[
            "ACQUIRED+lease",
            "UNKNOWN",
            "RECONCILE+lease",
            "RECONCILE+lease",
            "SUCCEEDED",
        ],
    )
    .await;
}
