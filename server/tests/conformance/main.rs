//! The Rust client's run-once helper through every conformance scenario of
//! `client/testdata/run_once_scenarios.json`, and its worker through those of
//! `worker_scenarios.json` (`worker.rs`), against the real server and through
//! the fault proxy (`client/PROTOCOL.md`). The other clients run the same
//! files; a scenario added there runs here unchanged.

#[path = "../common/mod.rs"]
mod common;
mod worker;

use std::future::Future;
use std::path::PathBuf;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use opreg_client::proto::{self as pb, complete_request::Outcome};
use opreg_client::{Client, Error, LeaseHandle, RunError, RunOnce, Success, Verdict, WorkError};
use opreg_conformance::{FaultProxy, Rule, calls_match};
use serde_json::{Value, json};

const SCENARIOS: &str = include_str!("../../../client/testdata/run_once_scenarios.json");
const NS: &str = "conformance";
/// Scenarios run this many at a time: several lean on 900 ms leases.
const AT_ONCE: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_of_the_shared_file_passes() {
    run_every_scenario(SCENARIOS, 20, |app, defaults, scenario| async move {
        run_scenario(&app, &Settings::of(&defaults, &scenario), &scenario).await
    })
    .await;
}

/// Runs every scenario of `file` (a few at a time) against one server, and
/// fails with every scenario that failed and why.
async fn run_every_scenario<F, Fut>(file: &str, at_least: usize, run: F)
where
    F: Fn(Arc<TestApp>, Value, Value) -> Fut,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let file: Value = serde_json::from_str(file).unwrap();
    let app = Arc::new(spawn_app().await);
    let defaults = file["defaults"].clone();
    let scenarios = file["scenarios"].as_array().unwrap().clone();
    assert!(
        scenarios.len() >= at_least,
        "the scenario file lost scenarios"
    );
    let limit = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let mut runs = tokio::task::JoinSet::new();
    for scenario in scenarios {
        let name = scenario["name"].as_str().unwrap().to_owned();
        let verdict = run(app.clone(), defaults.clone(), scenario);
        let limit = limit.clone();
        runs.spawn(async move {
            let _turn = limit.acquire().await.unwrap();
            (name, verdict.await)
        });
    }
    let mut failures = Vec::new();
    while let Some(joined) = runs.join_next().await {
        let (name, verdict) = joined.unwrap();
        if let Err(why) = verdict {
            failures.push(format!("{name}: {why}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} scenario(s) failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// A scenario's settings, its own over the file's defaults.
struct Settings {
    lease_ttl: Duration,
    deadline: Duration,
    call_timeout: Duration,
    retry_policy: pb::RetryPolicy,
}

impl Settings {
    fn of(defaults: &Value, scenario: &Value) -> Self {
        let setting = Setting { defaults, scenario };
        Self {
            lease_ttl: setting.millis("lease_ttl_ms"),
            deadline: setting.millis("deadline_ms"),
            call_timeout: setting.millis("call_timeout_ms"),
            retry_policy: setting.retry_policy(),
        }
    }
}

/// A scenario's setting: its own value, else the file's default.
struct Setting<'a> {
    defaults: &'a Value,
    scenario: &'a Value,
}

impl Setting<'_> {
    fn value(&self, field: &str) -> &Value {
        self.scenario.get(field).unwrap_or(&self.defaults[field])
    }

    fn millis(&self, field: &str) -> Duration {
        Duration::from_millis(self.value(field).as_u64().unwrap())
    }

    fn retry_policy(&self) -> pb::RetryPolicy {
        let policy = self.value("retry_policy");
        let millis = |field: &str| {
            Some(proto_duration(Duration::from_millis(
                policy[field].as_u64().unwrap(),
            )))
        };
        pb::RetryPolicy {
            max_attempts: u32::try_from(policy["max_attempts"].as_u64().unwrap()).unwrap(),
            initial_backoff: millis("initial_backoff_ms"),
            max_backoff: millis("max_backoff_ms"),
            deadline: millis("deadline_ms"),
        }
    }
}

async fn run_scenario(app: &TestApp, settings: &Settings, scenario: &Value) -> Result<(), String> {
    let name = scenario["name"].as_str().unwrap();
    let key = format!("{name}-rust-{:08x}", rand::random::<u32>());
    let parameters = json!({"amount": 100, "scenario": name});
    let direct = Client::connect(app.endpoint.clone()).await.unwrap();
    let mut completing_before = None;
    if let Some(before) = scenario["before"].as_str() {
        let operation = Prepared {
            namespace: NS,
            key: &key,
            parameters: &parameters,
            retry_policy: None,
            lease_ttl: scenario["before_lease_ttl_ms"]
                .as_u64()
                .map_or(Duration::from_secs(30), Duration::from_millis),
        };
        let token = operation.prepare(&direct, before).await;
        if let Some(after) = scenario["before_complete_after_ms"].as_u64() {
            completing_before = Some(tokio::spawn(complete_before_after(
                direct.clone(),
                key.clone(),
                token,
                Duration::from_millis(after),
            )));
        }
    }

    let (proxy, through, log) = proxy_for(app, scenario, &key).await;

    let work = Work::of(scenario, settings.lease_ttl);
    let mut run = RunOnce::new(&through, NS, &key, parameters)
        .lease_ttl(settings.lease_ttl)
        .deadline(settings.deadline)
        .call_timeout(settings.call_timeout)
        .retry_policy(settings.retry_policy);
    let saw = Arc::new(Mutex::new(None::<String>));
    if let Some(verdict) = scenario["reconcile"].as_str() {
        let (saw, verdict) = (saw.clone(), verdict.to_owned());
        run = run.reconcile(move |_lease, remote_ref| {
            *saw.lock().unwrap() = Some(remote_ref);
            reconciled(verdict.clone())
        });
    }
    let outcome = run.run(|lease| work.next(lease)).await;
    if let Some(completing) = completing_before {
        completing
            .await
            .map_err(|_| "the before owner's Complete panicked".to_owned())??;
    }
    let lines = proxy.finish().await;
    let _ = std::fs::remove_file(&log);
    let status = final_status(&direct, NS, &key).await.0;

    let expect = &scenario["expect"];
    check_outcome(expect, &outcome).map_err(|why| format!("{why}\n{}", shown(&lines)))?;
    let seen = saw.lock().unwrap().clone();
    check_seen(expect, &lines, &status, seen)
}

/// The scenario's fault proxy in front of the server, a client through it,
/// and the proxy's log file.
async fn proxy_for(app: &TestApp, scenario: &Value, key: &str) -> (FaultProxy, Client, PathBuf) {
    let rules: Vec<Rule> =
        serde_json::from_value(scenario.get("faults").cloned().unwrap_or(json!([]))).unwrap();
    let log = std::env::temp_dir().join(format!("opreg-conformance-{}.log", key.replace(':', "-")));
    let proxy = FaultProxy::start(&app.endpoint, rules, &log).await.unwrap();
    let through = Client::connect(format!("http://{}", proxy.addr()))
        .await
        .unwrap();
    (proxy, through, log)
}

/// What every scenario expects: `calls` the proxy saw, the operation's
/// `status`, and what the reconcile callback saw (`reconcile_saw`).
fn check_seen(
    expect: &Value,
    lines: &[String],
    status: &str,
    reconcile_saw: Option<String>,
) -> Result<(), String> {
    if let Some(wanted) = expect["reconcile_saw"].as_str()
        && reconcile_saw.as_deref() != Some(wanted)
    {
        return Err(format!(
            "reconcile saw {reconcile_saw:?}, expected {wanted:?}\n{}",
            shown(lines)
        ));
    }
    let patterns: Vec<&str> = expect["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    if !calls_match(&patterns, lines) {
        return Err(format!("calls {patterns:?} expected\n{}", shown(lines)));
    }
    let wanted = expect["status"].as_str().unwrap();
    if status != wanted {
        return Err(format!(
            "status {status}, expected {wanted}\n{}",
            shown(lines)
        ));
    }
    Ok(())
}

fn shown(lines: &[String]) -> String {
    format!("proxy log:\n  {}", lines.join("\n  "))
}

/// A scenario's `work`: the action of each execution in turn, the last one
/// repeating; `began` counts the executions.
#[derive(Clone)]
struct Work {
    actions: Arc<Vec<String>>,
    began: Arc<AtomicUsize>,
    lease_ttl: Duration,
}

impl Work {
    fn of(scenario: &Value, lease_ttl: Duration) -> Self {
        let actions = scenario["work"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect();
        Self {
            actions: Arc::new(actions),
            began: Arc::default(),
            lease_ttl,
        }
    }

    fn began(&self) -> usize {
        self.began.load(Ordering::SeqCst)
    }

    /// The next execution's action, performed under `lease`.
    fn next(&self, lease: LeaseHandle) -> impl Future<Output = Result<Success, WorkError>> + use<> {
        let n = self.began.fetch_add(1, Ordering::SeqCst);
        let action = self.actions[n.min(self.actions.len() - 1)].clone();
        let lease_ttl = self.lease_ttl;
        async move {
            match action.as_str() {
                "succeed" => Ok(Success::new(b"done".to_vec())),
                "fail_business" => Err(WorkError::Business {
                    code: "insufficient_funds".into(),
                    message: "balance 20 < 100".into(),
                }),
                "fail_transient" => Err(WorkError::Transient {
                    message: "the ledger is busy".into(),
                    retry_after: None,
                }),
                "fail_unexpected" => Err(WorkError::Other("a bug in the work".into())),
                "report_unknown" => Err(WorkError::SentButUnconfirmed {
                    remote_ref: "remote-1".into(),
                    message: "the answer timed out".into(),
                }),
                "slow" => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok(Success::new(b"done".to_vec()))
                }
                "hang" => {
                    tokio::select! {
                        () = lease.lost() => {}
                        () = tokio::time::sleep(HANG) => {}
                    }
                    Ok(Success::new(b"done".to_vec()))
                }
                "hang_ignoring_lease" => {
                    tokio::time::sleep(lease_ttl * 2).await;
                    Ok(Success::new(b"done".to_vec()))
                }
                other => panic!("unknown work action {other}"),
            }
        }
    }
}

/// The longest a `hang` waits for its lease to be lost.
const HANG: Duration = Duration::from_secs(10);

/// A scenario's `reconcile` verdict. `hang` waits, and is dropped by a
/// helper that loses the lease meanwhile.
async fn reconciled(verdict: String) -> Verdict {
    match verdict.as_str() {
        "succeeded" => Verdict::Succeeded(Success::new(b"reconciled".to_vec())),
        "failed" => Verdict::Failed {
            code: "reconciled_failed".into(),
            message: "the remote system refused it".into(),
        },
        "not_applied" => Verdict::NotApplied,
        "hang" => {
            tokio::time::sleep(HANG).await;
            Verdict::Succeeded(Success::new(b"reconciled".to_vec()))
        }
        other => panic!("unknown reconcile verdict {other}"),
    }
}

/// `before_complete_after_ms`: the `before` owner completes its lease with
/// success (result `before`) this long after the helper started.
async fn complete_before_after(
    client: Client,
    key: String,
    token: u64,
    after: Duration,
) -> Result<(), String> {
    tokio::time::sleep(after).await;
    client
        .complete(pb::CompleteRequest {
            namespace: NS.into(),
            operation_key: key,
            fencing_token: token,
            outcome: before_outcome("success"),
        })
        .await
        .map(|_| ())
        .map_err(|error| format!("the before owner's Complete failed: {error}"))
}

/// The operation a scenario's `before` prepares.
struct Prepared<'a> {
    namespace: &'a str,
    key: &'a str,
    parameters: &'a Value,
    retry_policy: Option<pb::RetryPolicy>,
    /// The `before` Claim's lease.
    lease_ttl: Duration,
}

impl Prepared<'_> {
    /// The scenario's `before`, made directly against the server; the token
    /// of its Claim.
    async fn prepare(&self, client: &Client, before: &str) -> u64 {
        let claimed = client
            .claim(pb::ClaimRequest {
                namespace: self.namespace.into(),
                operation_key: self.key.into(),
                fingerprint: Some(pb::claim_request::Fingerprint::Parameters(
                    opreg_client::parameters(self.parameters.clone()),
                )),
                owner: "conformance-before".into(),
                lease_ttl: Some(proto_duration(self.lease_ttl)),
                retry_policy: self.retry_policy,
                ..Default::default()
            })
            .await
            .unwrap();
        let token = claimed.lease.unwrap().fencing_token;
        let Some(outcome) = before_outcome(before) else {
            return token;
        };
        client
            .complete(pb::CompleteRequest {
                namespace: self.namespace.into(),
                operation_key: self.key.into(),
                fencing_token: token,
                outcome: Some(outcome),
            })
            .await
            .unwrap();
        token
    }
}

/// What `before` completes the prepared operation with (None: it stays claimed).
fn before_outcome(before: &str) -> Option<Outcome> {
    let outcome = match before {
        "in_progress" => return None,
        "success" => Outcome::Success(pb::Success {
            result: b"before".to_vec(),
            result_ref: String::new(),
        }),
        "failure" => Outcome::Failure(pb::Failure {
            code: "before_failed".into(),
            message: "refused earlier".into(),
        }),
        "unknown" => Outcome::Unknown(pb::UnknownOutcome {
            remote_ref: "remote-before".into(),
            message: "the answer was lost earlier".into(),
        }),
        "retry_due" => Outcome::Retryable(pb::RetryableError {
            error_class: "BEFORE".into(),
            message: "retry at once".into(),
            retry_after: Some(proto_duration(Duration::from_millis(1))),
        }),
        other => panic!("unknown before {other}"),
    };
    Some(outcome)
}

/// The helper's answer against `expect.result` or `expect.error`.
fn check_outcome(
    expect: &Value,
    outcome: &Result<opreg_client::Completed, RunError>,
) -> Result<(), String> {
    match (outcome, expect.get("result")) {
        (Ok(done), Some(result)) => {
            let value = String::from_utf8_lossy(&done.result);
            if value != result["value"].as_str().unwrap()
                || done.replayed != result["replayed"].as_bool().unwrap()
            {
                return Err(format!(
                    "got {value:?} (replayed {}), expected {result}",
                    done.replayed
                ));
            }
            Ok(())
        }
        (Ok(done), None) => Err(format!(
            "succeeded with {:?}, expected error {}",
            done.result, expect["error"]
        )),
        (Err(error), None) => {
            let kind = expect["error"].as_str().unwrap();
            if RunError::kind(error) != kind {
                return Err(format!(
                    "error {error:?} ({}), expected {kind}",
                    RunError::kind(error)
                ));
            }
            if let RunError::Business { code, replayed, .. } = error
                && (Some(code.as_str()) != expect["code"].as_str()
                    || Some(*replayed) != expect["replayed"].as_bool())
            {
                return Err(format!(
                    "business failure {code} (replayed {replayed}), expected {expect}"
                ));
            }
            Ok(())
        }
        (Err(error), Some(result)) => Err(format!("error {error:?}, expected result {result}")),
    }
}

/// The operation's status name by a direct Lookup (`NOT_FOUND` when there is
/// none), with the operation.
async fn final_status(client: &Client, namespace: &str, key: &str) -> (String, pb::Operation) {
    let found = client
        .lookup(pb::LookupRequest {
            namespace: namespace.into(),
            operation_key: key.into(),
            ..Default::default()
        })
        .await;
    match found {
        Ok(found) => {
            let operation = found.operation.unwrap_or_default();
            let status = operation
                .status()
                .as_str_name()
                .trim_start_matches("OPERATION_STATUS_")
                .to_owned();
            (status, operation)
        }
        Err(Error::NotFound { .. }) => ("NOT_FOUND".into(), pb::Operation::default()),
        Err(error) => (format!("lookup failed: {error}"), pb::Operation::default()),
    }
}

fn proto_duration(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap(),
        nanos: i32::try_from(duration.subsec_nanos()).unwrap(),
    }
}
