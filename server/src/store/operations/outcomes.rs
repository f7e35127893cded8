//! Recorded outcomes: the reports of current lease holders, many in one
//! statement.

use std::collections::HashMap;

use sqlx::PgExecutor;

use super::{OperationRow, operation_columns};
use crate::domain::commands::CompleteCommand;
use crate::domain::complete::{Report, Transition};
use crate::domain::operation::Operation;
use crate::domain::policy::micros_ceil;
use crate::store::QueryTimer;

/// A report to record, and the transition it makes from the current lease.
pub type Recording<'a> = (&'a CompleteCommand, Transition);

/// Records each report of a current lease holder and ends its lease, in one
/// statement that commits on its own. Each operation's row is locked by its
/// primary key, in key order, and only while it still holds the reported
/// token in progress and unheld, with the execution that token started
/// current and unreported; then that execution finishes and the operation
/// moves, in one row. The answer is
/// in `reports`' order: `None` where the token is not the current lease (or
/// its execution already reported), and nothing was written for it.
///
/// `reports` name distinct operations: a second report of one operation must
/// see what the first one left, so it belongs to a later statement.
#[tracing::instrument(level = "debug", name = "store.operations.record_outcomes", skip_all)]
pub async fn record_outcomes(
    db: impl PgExecutor<'_>,
    reports: &[Recording<'_>],
) -> sqlx::Result<Vec<Option<Operation>>> {
    if reports.is_empty() {
        return Ok(Vec::new());
    }
    let _timer = QueryTimer::start("operations_record_outcomes");
    let wanted = Wanted::of(reports);
    let rows: Vec<OperationRow> = sqlx::query_as(concat!(
        "WITH wanted AS (
             SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bytea[],
                                  $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
                                  $11::text[], $12::bigint[], $13::text[], $14::bytea[],
                                  $15::text[], $16::text[])
                 AS w(w_namespace, w_key, w_token, w_status, w_result, w_result_ref,
                      w_failure_code, w_failure_message, w_remote_ref, w_error_class,
                      w_error_message, w_retry_us, w_outcome, w_digest, w_class, w_message)
         ),
         -- One primary-key probe and row lock per report, in the arrays' key
         -- order (a LATERAL with a LIMIT is never flattened into a join):
         -- concurrent statements lock shared rows in one order, never in a
         -- cycle, whatever the plan thinks of the table's size. The guard is
         -- checked on the locked row, outside the probe: inside, it would let
         -- the planner probe the due index (whose predicate it implies) by
         -- namespace alone, through every live and dead lease of the namespace.
         current_lease AS MATERIALIZED (
             SELECT wanted.*, locked.locked_row, clock_timestamp() AS recorded_at
             FROM wanted CROSS JOIN LATERAL (
                 SELECT ctid AS locked_row, fencing_token, status, held_at, execution_token,
                        execution_outcome_digest
                 FROM operations
                 WHERE namespace = w_namespace AND operation_key = w_key
                 LIMIT 1
                 FOR UPDATE
             ) AS locked
             WHERE locked.fencing_token = w_token AND locked.status = 'in_progress'
               AND locked.held_at IS NULL
               AND locked.execution_token = w_token AND locked.execution_outcome_digest IS NULL
         )
         -- The execution the token started is the operation's current one:
         -- it finishes and the operation moves in one row. The row is the one
         -- locked above, by its tuple id: a join by key would be planned once
         -- per session, and a plan made while the table was empty scans it on
         -- every call from then on. A version committed after this statement
         -- began (a Renew between its snapshot and the lock) is not visible to
         -- it, so such a report is left unrecorded here and decided on a
         -- session of its own. The key beside the tuple id routes the update
         -- to the operation's shard on a distributed engine (tuple ids are
         -- per shard); here it is a filter on the row the tuple id found.
         UPDATE operations AS o SET
             status = w_status,
             result = w_result,
             result_ref = w_result_ref,
             failure_code = w_failure_code,
             failure_message = w_failure_message,
             remote_ref = COALESCE(w_remote_ref, o.remote_ref),
             last_error_class = COALESCE(w_error_class, o.last_error_class),
             last_error_message = COALESCE(w_error_message, o.last_error_message),
             next_attempt_at = recorded_at + w_retry_us * interval '1 microsecond',
             lease_owner = NULL,
             lease_expires_at = NULL,
             lease_takeover = false,
             reconciling = false,
             updated_at = recorded_at,
             completed_at = CASE WHEN w_status IN ('succeeded', 'failed', 'dead') THEN recorded_at END,
             unknown_since = CASE WHEN w_status = 'unknown' THEN COALESCE(o.unknown_since, recorded_at) END,
             execution_outcome = w_outcome,
             execution_outcome_digest = w_digest,
             execution_error_class = w_class,
             execution_message = w_message,
             execution_finished_at = recorded_at
         FROM current_lease
         WHERE o.ctid = current_lease.locked_row
           AND o.namespace = w_namespace AND o.operation_key = w_key
         RETURNING ",
        operation_columns!(),
    ))
    .bind(&wanted.namespaces)
    .bind(&wanted.keys)
    .bind(&wanted.tokens)
    .bind(&wanted.statuses)
    .bind(&wanted.results)
    .bind(&wanted.result_refs)
    .bind(&wanted.failure_codes)
    .bind(&wanted.failure_messages)
    .bind(&wanted.remote_refs)
    .bind(&wanted.error_classes)
    .bind(&wanted.error_messages)
    .bind(&wanted.retry_us)
    .bind(&wanted.outcomes)
    .bind(&wanted.digests)
    .bind(&wanted.execution_classes)
    .bind(&wanted.execution_messages)
    .fetch_all(db)
    .await?;
    let positions: HashMap<(&str, &str), usize> = reports
        .iter()
        .enumerate()
        .map(|(position, (command, _))| (command.identity(), position))
        .collect();
    let mut recorded: Vec<Option<Operation>> = reports.iter().map(|_| None).collect();
    for row in rows {
        let operation = Operation::from(row);
        let key = (
            operation.namespace.as_str(),
            operation.operation_key.as_str(),
        );
        if let Some(&position) = positions.get(&key) {
            recorded[position] = Some(operation);
        }
    }
    Ok(recorded)
}

/// The reports of one statement as parallel arrays, in key order.
#[derive(Default)]
struct Wanted<'a> {
    namespaces: Vec<&'a str>,
    keys: Vec<&'a str>,
    tokens: Vec<i64>,
    statuses: Vec<&'static str>,
    results: Vec<Option<&'a [u8]>>,
    result_refs: Vec<Option<&'a str>>,
    failure_codes: Vec<Option<&'a str>>,
    failure_messages: Vec<Option<&'a str>>,
    remote_refs: Vec<Option<&'a str>>,
    error_classes: Vec<Option<&'a str>>,
    error_messages: Vec<Option<&'a str>>,
    retry_us: Vec<Option<i64>>,
    outcomes: Vec<&'static str>,
    digests: Vec<Vec<u8>>,
    execution_classes: Vec<Option<&'a str>>,
    execution_messages: Vec<Option<&'a str>>,
}

impl<'a> Wanted<'a> {
    fn of(reports: &[Recording<'a>]) -> Self {
        let mut ordered = reports.to_vec();
        ordered.sort_by(|(a, _), (b, _)| a.identity().cmp(&b.identity()));
        let mut wanted = Wanted::default();
        for (command, transition) in ordered {
            let columns = OutcomeColumns::of(&command.report);
            wanted.namespaces.push(command.namespace.as_str());
            wanted.keys.push(command.operation_key.as_str());
            wanted.tokens.push(command.fencing_token.as_i64());
            wanted.statuses.push(transition.status.as_str());
            wanted.results.push(columns.result);
            wanted.result_refs.push(columns.result_ref);
            wanted.failure_codes.push(columns.failure_code);
            wanted.failure_messages.push(columns.failure_message);
            wanted.remote_refs.push(columns.remote_ref);
            wanted.error_classes.push(columns.error_class);
            wanted.error_messages.push(columns.error_message);
            wanted.retry_us.push(transition.retry_in.map(micros_ceil));
            wanted
                .outcomes
                .push(command.report.execution_outcome().as_str());
            wanted.digests.push(command.report.digest());
            wanted.execution_classes.push(columns.execution_class);
            wanted.execution_messages.push(columns.execution_message);
        }
        wanted
    }
}

/// How a report lands in the columns of `operations` and `executions`.
struct OutcomeColumns<'a> {
    result: Option<&'a [u8]>,
    result_ref: Option<&'a str>,
    failure_code: Option<&'a str>,
    failure_message: Option<&'a str>,
    remote_ref: Option<&'a str>,
    error_class: Option<&'a str>,
    error_message: Option<&'a str>,
    execution_class: Option<&'a str>,
    execution_message: Option<&'a str>,
}

impl<'a> OutcomeColumns<'a> {
    fn of(report: &'a Report) -> Self {
        let none = Self {
            result: None,
            result_ref: None,
            failure_code: None,
            failure_message: None,
            remote_ref: None,
            error_class: None,
            error_message: None,
            execution_class: None,
            execution_message: None,
        };
        match report {
            Report::Success { result, result_ref } => Self {
                result: Some(result),
                result_ref: Some(result_ref),
                ..none
            },
            Report::Failure { code, message } => Self {
                failure_code: Some(code),
                failure_message: Some(message),
                execution_class: Some(code),
                execution_message: Some(message),
                ..none
            },
            Report::Retryable {
                error_class,
                message,
                ..
            } => Self {
                error_class: Some(error_class),
                error_message: Some(message),
                execution_class: Some(error_class),
                execution_message: Some(message),
                ..none
            },
            Report::Unknown {
                remote_ref,
                message,
            } => Self {
                remote_ref: Some(remote_ref),
                error_class: Some("unknown_outcome"),
                error_message: Some(message),
                execution_message: Some(message),
                ..none
            },
        }
    }
}
