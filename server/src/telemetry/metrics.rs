//! Every metric opreg exports: names (a public contract — dashboards and
//! alerts depend on them), units, help texts, buckets, and the functions that
//! record them. Nothing else in the code names a metric.

use std::collections::{HashMap, HashSet};
use std::sync::{OnceLock, RwLock};

use metrics::{
    Counter, Histogram, Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge,
    histogram,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::domain::admin::AdminAction;
use crate::domain::claim::ClaimOutcome;
use crate::domain::operation::{ExecutionKind, Status};
use crate::domain::text::{NAMESPACE_MAX_BYTES, check_identifier};

pub const CLAIMS: &str = "opreg_claims_total";
pub const REGISTERED: &str = "opreg_operations_registered_total";
pub const PARAMETER_CONFLICTS: &str = "opreg_parameter_conflicts_total";
pub const UNKNOWN_OUTCOMES: &str = "opreg_unknown_outcomes_total";
pub const OPERATIONS_UNKNOWN: &str = "opreg_operations_unknown";
pub const UNKNOWN_OLDEST_AGE: &str = "opreg_unknown_oldest_age_seconds";
pub const EXECUTIONS: &str = "opreg_executions_total";
pub const ATTEMPTS_PER_OPERATION: &str = "opreg_attempts_per_operation";
pub const COMPLETIONS: &str = "opreg_completions_total";
pub const STALE_TOKEN_REJECTIONS: &str = "opreg_stale_token_rejections_total";
pub const LEASE_TAKEOVERS: &str = "opreg_lease_takeovers_total";
pub const COMPENSATIONS: &str = "opreg_compensations_total";
pub const OPERATIONS: &str = "opreg_operations";
pub const DUE_OLDEST_AGE: &str = "opreg_due_oldest_age_seconds";
pub const COMPENSATIONS_PENDING: &str = "opreg_compensations_pending";
pub const CLAIM_DUE_OPERATIONS: &str = "opreg_claim_due_operations_total";
pub const ADMIN_ACTIONS: &str = "opreg_admin_actions_total";
pub const OPERATIONS_PURGED: &str = "opreg_operations_purged_total";
pub const MAINTENANCE_EXHAUSTED: &str = "opreg_maintenance_exhausted_total";
pub const RETENTION_LAG: &str = "opreg_retention_lag_seconds";
pub const MAINTENANCE_LEADER: &str = "opreg_maintenance_leader";
pub const MAINTENANCE_LAST_RUN: &str = "opreg_maintenance_last_run_timestamp_seconds";
pub const MALFORMED_REQUESTS: &str = "opreg_malformed_requests_total";
pub const CALLS_SHED: &str = "opreg_calls_shed_total";
pub const CONNECTIONS_REFUSED: &str = "opreg_connections_refused_total";
pub const AUTH_REFUSALS: &str = "opreg_auth_refusals_total";
pub const RATE_LIMITED: &str = "opreg_rate_limited_total";
pub const CONFIG_RELOADS: &str = "opreg_config_reloads_total";
pub const TLS_HANDSHAKE_FAILURES: &str = "opreg_tls_handshake_failures_total";
pub const STORE_UP: &str = "opreg_store_up";
pub const GRPC_STARTED: &str = "grpc_server_started_total";
pub const GRPC_HANDLED: &str = "grpc_server_handled_total";
pub const GRPC_HANDLING_SECONDS: &str = "grpc_server_handling_seconds";
pub const POOL_CONNECTIONS: &str = "opreg_db_pool_connections";
pub const RUNTIME_ALIVE_TASKS: &str = "opreg_runtime_alive_tasks";
pub const POOL_WAITING: &str = "opreg_db_pool_waiting";
pub const QUERY_DURATION: &str = "opreg_db_query_duration_seconds";
pub const CLAIM_BATCH_SIZE: &str = "opreg_claim_batch_size";
pub const COMPLETE_BATCH_SIZE: &str = "opreg_complete_batch_size";
pub const REPLAY_CACHE_HITS: &str = "opreg_replay_cache_hits_total";
pub const REPLAY_CACHE_FOLLOWING: &str = "opreg_replay_cache_following";
pub const SQL_DOOR_CALLS: &str = "opreg_sql_door_calls_total";
pub const WAITERS: &str = "opreg_waiters";
pub const WAITS: &str = "opreg_waits_total";
pub const WAIT_WAKE_SECONDS: &str = "opreg_wait_wake_seconds";
pub const CLAIM_SECONDS: &str = "opreg_claim_seconds";
pub const REUSES: &str = "opreg_reuses_total";

const ATTEMPT_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 10.0, 15.0, 20.0, 30.0, 50.0];
const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The namespace label used once the cap of distinct namespaces is reached.
pub const OTHER_NAMESPACE: &str = "other";

struct Exporter {
    handle: PrometheusHandle,
    /// Namespaces that are labels of their own, interned: at most the cap,
    /// or the allowlist, each kept for the life of the process.
    namespaces: RwLock<HashSet<&'static str>>,
    namespace_cap: usize,
    /// When given, the only namespaces that become labels.
    allowlist: bool,
    counters: Series<Counter>,
    histograms: Series<Histogram>,
}

/// Series handles by metric and label values, registered with the recorder
/// on first use. Recording then costs a read lock and an atomic add, not the
/// recorder's lookup of a key built (and allocated) from the labels on every
/// call. Every label value is static or an interned namespace, so the map is
/// bounded by the metrics' label sets.
struct Series<H> {
    handles: RwLock<HashMap<SeriesKey, H>>,
}

/// A metric's name and its label values in the order the metric names them.
type SeriesKey = (&'static str, [&'static str; 4]);

impl<H: Clone> Series<H> {
    fn new() -> Self {
        Self {
            handles: RwLock::new(HashMap::new()),
        }
    }

    fn get(&self, key: SeriesKey, register: impl FnOnce() -> H) -> H {
        if let Some(handle) = read(&self.handles).get(&key) {
            return handle.clone();
        }
        let handle = register();
        write(&self.handles).entry(key).or_insert(handle).clone()
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Handles the exporter keeps a [`Series`] of.
trait Kept: Clone + Sized {
    fn series(exporter: &Exporter) -> &Series<Self>;
}

impl Kept for Counter {
    fn series(exporter: &Exporter) -> &Series<Self> {
        &exporter.counters
    }
}

impl Kept for Histogram {
    fn series(exporter: &Exporter) -> &Series<Self> {
        &exporter.histograms
    }
}

/// The handle of metric `name` with these label values, registered by
/// `register` the first time; before the exporter is installed, whatever
/// `register` gives (the recorder's no-op), never kept.
fn series_handle<H: Kept>(
    name: &'static str,
    values: [&'static str; 4],
    register: impl FnOnce() -> H,
) -> H {
    match EXPORTER.get() {
        Some(exporter) => H::series(exporter).get((name, values), register),
        None => register(),
    }
}

static EXPORTER: OnceLock<Exporter> = OnceLock::new();

/// Installs the process-wide recorder (once; later calls reuse it) and
/// returns the handle that renders `/metrics`.
pub fn install(namespace_cap: usize, allowlist: &[String]) -> Result<PrometheusHandle, String> {
    if let Some(exporter) = EXPORTER.get() {
        return Ok(exporter.handle.clone());
    }
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(ATTEMPTS_PER_OPERATION.into()),
            ATTEMPT_BUCKETS,
        )
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(GRPC_HANDLING_SECONDS.into()), LATENCY_BUCKETS)
        })
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(QUERY_DURATION.into()), LATENCY_BUCKETS)
        })
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(CLAIM_BATCH_SIZE.into()), BATCH_BUCKETS)
        })
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(COMPLETE_BATCH_SIZE.into()), BATCH_BUCKETS)
        })
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(WAIT_WAKE_SECONDS.into()), LATENCY_BUCKETS)
        })
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(CLAIM_SECONDS.into()), LATENCY_BUCKETS)
        })
        .map_err(|error| error.to_string())?
        .build_recorder();
    let handle = recorder.handle();
    let exporter = Exporter {
        handle,
        namespaces: RwLock::new(
            allowlist
                .iter()
                .map(|namespace| intern(namespace))
                .collect(),
        ),
        namespace_cap,
        allowlist: !allowlist.is_empty(),
        counters: Series::new(),
        histograms: Series::new(),
    };
    if EXPORTER.set(exporter).is_ok() {
        metrics::set_global_recorder(recorder).map_err(|error| error.to_string())?;
        describe();
    }
    Ok(EXPORTER
        .get()
        .map(|e| e.handle.clone())
        .ok_or("metrics exporter missing")?)
}

fn describe() {
    describe_counter!(
        SQL_DOOR_CALLS,
        Unit::Count,
        "Calls of the SQL door (opreg_sql) by call and outcome, as PostgreSQL counts them for the whole database: every replica reports the same values."
    );
    describe_counter!(
        CLAIMS,
        Unit::Count,
        "Claims answered, by outcome (acquired, replayed, in_progress, retry_later, reconcile, dead, conflict, invalid)."
    );
    describe_counter!(
        REGISTERED,
        Unit::Count,
        "Operations registered for the first time (new keys)."
    );
    describe_counter!(
        PARAMETER_CONFLICTS,
        Unit::Count,
        "Claims refused because the key is registered with different parameters."
    );
    describe_counter!(
        UNKNOWN_OUTCOMES,
        Unit::Count,
        "Completes that reported an unknown outcome."
    );
    describe_gauge!(
        OPERATIONS_UNKNOWN,
        Unit::Count,
        "Operations whose unknown outcome is not resolved yet, including those under a reconcile lease."
    );
    describe_gauge!(
        UNKNOWN_OLDEST_AGE,
        Unit::Seconds,
        "Age of the oldest unresolved unknown outcome."
    );
    describe_counter!(
        EXECUTIONS,
        Unit::Count,
        "Executions started or resumed, by kind (first, retry, takeover, reconcile, resume)."
    );
    describe_histogram!(
        ATTEMPTS_PER_OPERATION,
        Unit::Count,
        "Attempts an operation took when it reached SUCCEEDED, FAILED or DEAD."
    );
    describe_counter!(
        COMPLETIONS,
        Unit::Count,
        "Outcomes recorded by Complete, by outcome (success, failure, retryable, unknown)."
    );
    describe_counter!(
        STALE_TOKEN_REJECTIONS,
        Unit::Count,
        "Calls refused because their fencing token was superseded, by rpc."
    );
    describe_counter!(
        LEASE_TAKEOVERS,
        Unit::Count,
        "Expired leases taken over by another claim."
    );
    describe_counter!(
        COMPENSATIONS,
        Unit::Count,
        "Compensating operations registered."
    );
    describe_gauge!(
        OPERATIONS,
        Unit::Count,
        "Backlog by state (in_progress with a live lease, expired_lease, retry_scheduled, unknown, dead, held), read from the database."
    );
    describe_gauge!(
        DUE_OLDEST_AGE,
        Unit::Seconds,
        "How long the oldest due, unheld retry or expired lease has waited for a worker."
    );
    describe_gauge!(
        COMPENSATIONS_PENDING,
        Unit::Count,
        "Compensating operations registered but not finished."
    );
    describe_counter!(
        CLAIM_DUE_OPERATIONS,
        Unit::Count,
        "Operations handed out by ClaimDue, by kind (retry, takeover, reconcile)."
    );
    describe_counter!(
        ADMIN_ACTIONS,
        Unit::Count,
        "Operator actions, by action (resolve, requeue, hold, release)."
    );
    describe_counter!(
        OPERATIONS_PURGED,
        Unit::Count,
        "Finished operations deleted by retention."
    );
    describe_counter!(
        MAINTENANCE_EXHAUSTED,
        Unit::Count,
        "Operations the maintenance made DEAD because their budget or deadline ran out."
    );
    describe_gauge!(
        RETENTION_LAG,
        Unit::Seconds,
        "How far past its retention the oldest finished operation is (0 when retention keeps up); from the maintaining replica."
    );
    describe_gauge!(
        MAINTENANCE_LEADER,
        Unit::Count,
        "1 on the replica that runs the maintenance, else 0."
    );
    describe_counter!(
        MALFORMED_REQUESTS,
        Unit::Count,
        "Requests refused before decoding, by reason (malformed, truncated, too_large); answered INVALID_ARGUMENT or RESOURCE_EXHAUSTED, never as server errors."
    );
    describe_counter!(
        CALLS_SHED,
        Unit::Count,
        "Calls answered UNAVAILABLE (OVERLOADED) at once because OPREG_MAX_CONCURRENT_CALLS were in flight."
    );
    describe_counter!(
        CONNECTIONS_REFUSED,
        Unit::Count,
        "Connections closed at the door: past OPREG_MAX_CONNECTIONS, or no HTTP/2 preface within OPREG_HANDSHAKE_TIMEOUT."
    );
    describe_gauge!(
        MAINTENANCE_LAST_RUN,
        Unit::Seconds,
        "Unix time of the last maintenance pass this replica completed."
    );
    describe_gauge!(
        STORE_UP,
        Unit::Count,
        "1 when the last health probe reached the database, else 0."
    );
    describe_counter!(
        AUTH_REFUSALS,
        Unit::Count,
        "Calls refused by the access policy, by reason (unauthenticated, permission_denied)."
    );
    describe_counter!(
        RATE_LIMITED,
        Unit::Count,
        "Calls refused by a namespace's rate limit on this replica."
    );
    describe_counter!(
        CONFIG_RELOADS,
        Unit::Count,
        "Reloads of the policy or TLS files, by file (policy, tls) and result (ok, error)."
    );
    describe_counter!(
        TLS_HANDSHAKE_FAILURES,
        Unit::Count,
        "Connections closed because their TLS handshake failed or timed out."
    );
    describe_counter!(GRPC_STARTED, Unit::Count, "RPCs started on the server.");
    describe_counter!(
        GRPC_HANDLED,
        Unit::Count,
        "RPCs completed on the server, by gRPC status code."
    );
    describe_histogram!(
        GRPC_HANDLING_SECONDS,
        Unit::Seconds,
        "Time from receiving an RPC to sending its status."
    );
    describe_histogram!(
        CLAIM_SECONDS,
        Unit::Seconds,
        "Time a Claim took to be answered, without the time it was held waiting for its operation to move (wait)."
    );
    describe_gauge!(
        RUNTIME_ALIVE_TASKS,
        Unit::Count,
        "Tasks alive in the server's Tokio runtime: one per connection, call and background loop; growth without load is a leak."
    );
    describe_gauge!(
        POOL_CONNECTIONS,
        Unit::Count,
        "Database connections in the pool, by state (size, idle)."
    );
    describe_gauge!(
        POOL_WAITING,
        Unit::Count,
        "Requests waiting for a database connection."
    );
    describe_histogram!(
        QUERY_DURATION,
        Unit::Seconds,
        "Duration of database statements, by query."
    );
    describe_histogram!(
        CLAIM_BATCH_SIZE,
        Unit::Count,
        "Claims registered or read together in one statement."
    );
    describe_histogram!(
        COMPLETE_BATCH_SIZE,
        Unit::Count,
        "Reports of current lease holders recorded together in one statement."
    );
    describe_counter!(
        REPLAY_CACHE_HITS,
        Unit::Count,
        "Claims replayed from this process's kept terminal results, without a statement."
    );
    describe_gauge!(
        WAITERS,
        Unit::Count,
        "Claims and Lookups asleep on this replica, waiting for an operation to move."
    );
    describe_counter!(
        WAITS,
        Unit::Count,
        "Waiting Claims and Lookups by how the wait ended: woken (the operation reached an answer the caller can act on), timed_out, shutdown, or refused (the replica's limit of waiters)."
    );
    describe_histogram!(
        WAIT_WAKE_SECONDS,
        Unit::Seconds,
        "From the change notice reaching this replica to the woken call's answer."
    );
    describe_counter!(
        REUSES,
        Unit::Count,
        "FAILED or DEAD operations started again by a Claim with REUSE_POLICY_AFTER_FAILURE, by namespace."
    );
    describe_gauge!(
        REPLAY_CACHE_FOLLOWING,
        Unit::Count,
        "1 while this replica hears its own heartbeats through the change notices, so replays may be answered from memory; else 0."
    );
}

/// The label for `namespace`: with an allowlist, itself when listed; without
/// one, itself while fewer than the cap have been seen; else `other`, so label
/// cardinality stays bounded.
pub fn namespace_label(namespace: &str) -> &'static str {
    let Some(exporter) = EXPORTER.get() else {
        return OTHER_NAMESPACE;
    };
    if let Some(known) = read(&exporter.namespaces).get(namespace) {
        return known;
    }
    // Configured namespaces keep their labels whatever arrives first.
    if exporter.allowlist {
        return OTHER_NAMESPACE;
    }
    let mut seen = write(&exporter.namespaces);
    if let Some(known) = seen.get(namespace) {
        return known;
    }
    if seen.len() < exporter.namespace_cap {
        let label = intern(namespace);
        seen.insert(label);
        return label;
    }
    OTHER_NAMESPACE
}

/// A label kept for the life of the process; only namespaces under the cap
/// or in the allowlist are interned, so the memory is bounded.
fn intern(namespace: &str) -> &'static str {
    Box::leak(namespace.to_owned().into_boxed_str())
}

/// One more of the counter `name` labelled with `namespace` and, when given,
/// one more label.
fn count_in(name: &'static str, namespace: &str, label: Option<(&'static str, &'static str)>) {
    count_labelled(name, namespace_label(namespace), label);
}

/// [`count_in`] with the namespace's label already decided.
fn count_labelled(
    name: &'static str,
    namespace: &'static str,
    label: Option<(&'static str, &'static str)>,
) {
    match label {
        None => series_handle(
            name,
            [namespace, "", "", ""],
            || counter!(name, "namespace" => namespace),
        ),
        Some((key, value)) => series_handle(
            name,
            [namespace, value, "", ""],
            || counter!(name, "namespace" => namespace, key => value),
        ),
    }
    .increment(1);
}

/// A Claim's answer. A refused request's namespace may itself be the invalid
/// part, so it only becomes a label when it is a valid namespace.
pub fn claim_answered(namespace: &str, outcome: &'static str) {
    let valid = check_identifier("namespace", namespace, NAMESPACE_MAX_BYTES).is_ok();
    // An invalid one is `other` without taking a place under the label cap.
    let namespace = if valid {
        namespace_label(namespace)
    } else {
        OTHER_NAMESPACE
    };
    count_labelled(CLAIMS, namespace, Some(("outcome", outcome)));
}

pub fn claim_outcome_label(outcome: ClaimOutcome) -> &'static str {
    match outcome {
        ClaimOutcome::Acquired => "acquired",
        ClaimOutcome::Replayed => "replayed",
        ClaimOutcome::InProgress => "in_progress",
        ClaimOutcome::RetryLater => "retry_later",
        ClaimOutcome::Reconcile => "reconcile",
        ClaimOutcome::Dead => "dead",
        ClaimOutcome::Held => "held",
    }
}

pub fn registered(namespace: &str) {
    count_in(REGISTERED, namespace, None);
}

pub fn parameter_conflict(namespace: &str) {
    count_in(PARAMETER_CONFLICTS, namespace, None);
}

/// An execution started (or, for `None`, a live lease resumed).
pub fn execution(namespace: &str, kind: Option<ExecutionKind>) {
    let kind = kind.map_or("resume", ExecutionKind::as_str);
    count_in(EXECUTIONS, namespace, Some(("kind", kind)));
    if kind == ExecutionKind::Takeover.as_str() {
        count_in(LEASE_TAKEOVERS, namespace, None);
    }
}

pub fn compensation(namespace: &str) {
    count_in(COMPENSATIONS, namespace, None);
}

pub fn completion(namespace: &str, outcome: &'static str) {
    count_in(COMPLETIONS, namespace, Some(("outcome", outcome)));
    if outcome == "unknown" {
        count_in(UNKNOWN_OUTCOMES, namespace, None);
    }
}

/// An operation reached a terminal status after `attempts` attempts.
pub fn finished(namespace: &str, status: Status, attempts: u32) {
    if matches!(status, Status::Succeeded | Status::Failed | Status::Dead) {
        let namespace = namespace_label(namespace);
        series_handle(
            ATTEMPTS_PER_OPERATION,
            [namespace, "", "", ""],
            || histogram!(ATTEMPTS_PER_OPERATION, "namespace" => namespace),
        )
        .record(f64::from(attempts));
    }
}

pub fn stale_token(namespace: &str, rpc: &'static str) {
    count_in(STALE_TOKEN_REJECTIONS, namespace, Some(("rpc", rpc)));
}

pub fn grpc_started(service: &'static str, method: &'static str, kind: &'static str) {
    series_handle(GRPC_STARTED, [service, method, kind, ""], || {
        counter!(GRPC_STARTED, "grpc_service" => service, "grpc_method" => method, "grpc_type" => kind)
    })
    .increment(1);
}

pub fn grpc_handled(
    service: &'static str,
    method: &'static str,
    kind: &'static str,
    code: &'static str,
    seconds: f64,
) {
    series_handle(GRPC_HANDLED, [service, method, kind, code], || {
        counter!(GRPC_HANDLED, "grpc_service" => service, "grpc_method" => method, "grpc_type" => kind, "grpc_code" => code)
    })
    .increment(1);
    series_handle(GRPC_HANDLING_SECONDS, [service, method, kind, ""], || {
        histogram!(GRPC_HANDLING_SECONDS, "grpc_service" => service, "grpc_method" => method, "grpc_type" => kind)
    })
    .record(seconds);
}

pub fn runtime(alive_tasks: usize) {
    gauge!(RUNTIME_ALIVE_TASKS).set(alive_tasks as f64);
}

pub fn pool(size: u32, idle: usize) {
    gauge!(POOL_CONNECTIONS, "state" => "size").set(f64::from(size));
    gauge!(POOL_CONNECTIONS, "state" => "idle").set(idle as f64);
}

/// Counts one request in `opreg_db_pool_waiting` until dropped.
pub struct PoolWaiter(metrics::Gauge);

impl PoolWaiter {
    pub fn start() -> Self {
        let waiting = gauge!(POOL_WAITING);
        waiting.increment(1.0);
        Self(waiting)
    }
}

impl Drop for PoolWaiter {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

pub fn query(name: &'static str, seconds: f64) {
    series_handle(
        QUERY_DURATION,
        [name, "", "", ""],
        || histogram!(QUERY_DURATION, "query" => name),
    )
    .record(seconds);
}

pub fn claim_batch(claims: usize) {
    series_handle(CLAIM_BATCH_SIZE, [""; 4], || histogram!(CLAIM_BATCH_SIZE)).record(claims as f64);
}

pub fn complete_batch(reports: usize) {
    series_handle(COMPLETE_BATCH_SIZE, [""; 4], || {
        histogram!(COMPLETE_BATCH_SIZE)
    })
    .record(reports as f64);
}

pub fn replay_cache_hit(namespace: &str) {
    count_in(REPLAY_CACHE_HITS, namespace, None);
}

/// The SQL door's count of `call` ending in `outcome`, read from the
/// database (a set of names the migrations fix, so the labels are bounded).
pub fn sql_door_calls(call: &str, outcome: &str, calls: i64) {
    counter!(SQL_DOOR_CALLS, "call" => call.to_owned(), "outcome" => outcome.to_owned())
        .absolute(u64::try_from(calls).unwrap_or(0));
}

/// A call fell asleep waiting (`+1`) or stopped waiting (`-1`).
pub fn waiters(change: f64) {
    gauge!(WAITERS).increment(change);
}

/// How a wait of `call` (`claim` or `lookup`) ended.
pub fn wait_ended(call: &'static str, outcome: &'static str) {
    series_handle(
        WAITS,
        [call, outcome, "", ""],
        || counter!(WAITS, "call" => call, "outcome" => outcome),
    )
    .increment(1);
}

/// A woken call answered `seconds` after the notice that woke it arrived.
/// A Claim's own time: the latency alert's measure, which a caller's wait
/// (seconds by design) would otherwise swamp.
pub fn claim_answered_in(seconds: f64) {
    series_handle(CLAIM_SECONDS, [""; 4], || histogram!(CLAIM_SECONDS)).record(seconds);
}

pub fn wait_woken_after(seconds: f64) {
    series_handle(WAIT_WAKE_SECONDS, [""; 4], || histogram!(WAIT_WAKE_SECONDS)).record(seconds);
}

pub fn reused(namespace: &str) {
    count_in(REUSES, namespace, None);
}

pub fn replay_cache_following(following: bool) {
    gauge!(REPLAY_CACHE_FOLLOWING).set(if following { 1.0 } else { 0.0 });
}

pub fn store_up(up: bool) {
    gauge!(STORE_UP).set(if up { 1.0 } else { 0.0 });
}

/// The backlog gauges of one namespace; `state` is a status, `expired_lease` or `held`.
pub fn backlog(namespace: &str, state: &str, operations: f64) {
    gauge!(OPERATIONS, "namespace" => namespace.to_owned(), "status" => state.to_owned())
        .set(operations);
}

pub fn due_and_compensations(namespace: &str, oldest_due_age_seconds: f64, compensations: f64) {
    gauge!(DUE_OLDEST_AGE, "namespace" => namespace.to_owned()).set(oldest_due_age_seconds);
    gauge!(COMPENSATIONS_PENDING, "namespace" => namespace.to_owned()).set(compensations);
}

pub fn claimed_due(namespace: &str, kind: ExecutionKind) {
    count_in(
        CLAIM_DUE_OPERATIONS,
        namespace,
        Some(("kind", kind.as_str())),
    );
}

pub fn admin_action(namespace: &str, action: AdminAction) {
    count_in(ADMIN_ACTIONS, namespace, Some(("action", action.as_str())));
}

pub fn purged(namespace: &str, operations: u64) {
    counter!(OPERATIONS_PURGED, "namespace" => namespace_label(namespace)).increment(operations);
}

pub fn maintenance_exhausted(namespace: &str) {
    count_in(MAINTENANCE_EXHAUSTED, namespace, None);
}

pub fn retention_lag(namespace: &str, seconds: f64) {
    gauge!(RETENTION_LAG, "namespace" => namespace_label(namespace)).set(seconds);
}

/// A request refused at the edge; its namespace is unknown (it was never decoded).
pub fn malformed_request(reason: &'static str) {
    counter!(MALFORMED_REQUESTS, "reason" => reason).increment(1);
}

pub fn call_shed() {
    counter!(CALLS_SHED).increment(1);
}

pub fn connection_refused() {
    counter!(CONNECTIONS_REFUSED).increment(1);
}

pub fn auth_refused(reason: &'static str) {
    counter!(AUTH_REFUSALS, "reason" => reason).increment(1);
}

pub fn rate_limited(namespace: &str) {
    count_in(RATE_LIMITED, namespace, None);
}

pub fn config_reloaded(file: &'static str, ok: bool) {
    let result = if ok { "ok" } else { "error" };
    counter!(CONFIG_RELOADS, "file" => file, "result" => result).increment(1);
}

pub fn tls_handshake_failed() {
    counter!(TLS_HANDSHAKE_FAILURES).increment(1);
}

pub fn maintenance_leader(leader: bool) {
    gauge!(MAINTENANCE_LEADER).set(if leader { 1.0 } else { 0.0 });
}

pub fn maintenance_ran() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |elapsed| elapsed.as_secs_f64());
    gauge!(MAINTENANCE_LAST_RUN).set(now);
}

pub fn unknown(namespace: &str, unresolved: f64, oldest_age_seconds: f64) {
    gauge!(OPERATIONS_UNKNOWN, "namespace" => namespace.to_owned()).set(unresolved);
    gauge!(UNKNOWN_OLDEST_AGE, "namespace" => namespace.to_owned()).set(oldest_age_seconds);
}
