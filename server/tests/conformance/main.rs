//! The Rust client's run-once helper through every conformance scenario of
//! `client/testdata/run_once_scenarios.json`, against the real server and
//! through the fault proxy (`client/PROTOCOL.md`). The Python and TypeScript
//! clients run the same file; a scenario added there runs here unchanged.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use opreg_client::proto::{self as pb, complete_request::Outcome};
use opreg_client::{Client, Error, RunError, RunOnce, Success, Verdict, WorkError};
use opreg_conformance::{FaultProxy, Rule, calls_match};
use serde_json::{Value, json};

const SCENARIOS: &str = include_str!("../../client/testdata/run_once_scenarios.json");
const NS: &str = "conformance";
/// Scenarios run this many at a time: several lean on 900 ms leases.
const AT_ONCE: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_of_the_shared_file_passes() {
    let file: Value = serde_json::from_str(SCENARIOS).unwrap();
    let app = Arc::new(spawn_app().await);
    let defaults = file["defaults"].clone();
    let scenarios = file["scenarios"].as_array().unwrap().clone();
    assert!(scenarios.len() >= 20, "the scenario file lost scenarios");
    let limit = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let mut runs = tokio::task::JoinSet::new();
    for scenario in scenarios {
        let (app, defaults, limit) = (app.clone(), defaults.clone(), limit.clone());
        runs.spawn(async move {
            let _turn = limit.acquire().await.unwrap();
            let name = scenario["name"].as_str().unwrap().to_owned();
            let verdict = run_scenario(&app, &Settings::of(&defaults, &scenario), &scenario).await;
            (name, verdict)
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
        let pick = |field: &str| scenario.get(field).unwrap_or(&defaults[field]).clone();
        let millis = |field: &str| Duration::from_millis(pick(field).as_u64().unwrap());
        let policy = pick("retry_policy");
        let policy_millis = |field: &str| {
            Some(proto_duration(Duration::from_millis(
                policy[field].as_u64().unwrap(),
            )))
        };
        Self {
            lease_ttl: millis("lease_ttl_ms"),
            deadline: millis("deadline_ms"),
            call_timeout: millis("call_timeout_ms"),
            retry_policy: pb::RetryPolicy {
                max_attempts: u32::try_from(policy["max_attempts"].as_u64().unwrap()).unwrap(),
                initial_backoff: policy_millis("initial_backoff_ms"),
                max_backoff: policy_millis("max_backoff_ms"),
                deadline: policy_millis("deadline_ms"),
            },
        }
    }
}

async fn run_scenario(app: &TestApp, settings: &Settings, scenario: &Value) -> Result<(), String> {
    let name = scenario["name"].as_str().unwrap();
    let key = format!("{name}-rust-{:08x}", rand::random::<u32>());
    let parameters = json!({"amount": 100, "scenario": name});
    let direct = Client::connect(app.endpoint.clone()).await.unwrap();
    if let Some(before) = scenario["before"].as_str() {
        prepare(&direct, &key, &parameters, before).await;
    }

    let rules: Vec<Rule> =
        serde_json::from_value(scenario.get("faults").cloned().unwrap_or(json!([]))).unwrap();
    let log = std::env::temp_dir().join(format!("opreg-conformance-{key}.log"));
    let proxy = FaultProxy::start(&app.endpoint, rules, &log).await.unwrap();
    let through = Client::connect(format!("http://{}", proxy.addr()))
        .await
        .unwrap();

    let work_actions: Vec<String> = scenario["work"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    let executions = Arc::new(AtomicUsize::new(0));
    let lease_ttl = settings.lease_ttl;
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
            let verdict = match verdict.as_str() {
                "succeeded" => Verdict::Succeeded(Success::new(b"reconciled".to_vec())),
                "failed" => Verdict::Failed {
                    code: "reconciled_failed".into(),
                    message: "the remote system refused it".into(),
                },
                "not_applied" => Verdict::NotApplied,
                other => panic!("unknown reconcile verdict {other}"),
            };
            async move { verdict }
        });
    }
    let outcome = run
        .run(|lease| {
            let n = executions.fetch_add(1, Ordering::SeqCst);
            let action = work_actions[n.min(work_actions.len() - 1)].clone();
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
                    "hang" => {
                        tokio::select! {
                            () = lease.lost() => {}
                            () = tokio::time::sleep(Duration::from_secs(10)) => {}
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
        })
        .await;
    let lines = proxy.finish().await;
    let _ = std::fs::remove_file(&log);
    let status = final_status(&direct, &key).await;
    let shown = || format!("proxy log:\n  {}", lines.join("\n  "));

    let expect = &scenario["expect"];
    check_outcome(expect, &outcome).map_err(|why| format!("{why}\n{}", shown()))?;
    if let Some(wanted) = expect["reconcile_saw"].as_str() {
        let seen = saw.lock().unwrap().clone();
        if seen.as_deref() != Some(wanted) {
            return Err(format!("reconcile saw {seen:?}, expected {wanted:?}"));
        }
    }
    let patterns: Vec<&str> = expect["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    if !calls_match(&patterns, &lines) {
        return Err(format!("calls {patterns:?} expected\n{}", shown()));
    }
    let wanted = expect["status"].as_str().unwrap();
    if status != wanted {
        return Err(format!("status {status}, expected {wanted}\n{}", shown()));
    }
    Ok(())
}

/// The scenario's `before`, made directly against the server.
async fn prepare(client: &Client, key: &str, parameters: &Value, before: &str) {
    let claimed = client
        .claim(pb::ClaimRequest {
            namespace: NS.into(),
            operation_key: key.into(),
            fingerprint: Some(pb::claim_request::Fingerprint::Parameters(
                opreg_client::parameters(parameters.clone()),
            )),
            owner: "conformance-before".into(),
            lease_ttl: Some(proto_duration(Duration::from_secs(30))),
            ..Default::default()
        })
        .await
        .unwrap();
    let outcome = match before {
        "in_progress" => return,
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
        other => panic!("unknown before {other}"),
    };
    client
        .complete(pb::CompleteRequest {
            namespace: NS.into(),
            operation_key: key.into(),
            fencing_token: claimed.lease.unwrap().fencing_token,
            outcome: Some(outcome),
        })
        .await
        .unwrap();
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

async fn final_status(client: &Client, key: &str) -> String {
    let found = client
        .lookup(pb::LookupRequest {
            namespace: NS.into(),
            operation_key: key.into(),
            ..Default::default()
        })
        .await;
    match found {
        Ok(found) => {
            let status = found.operation.unwrap_or_default().status();
            status
                .as_str_name()
                .trim_start_matches("OPERATION_STATUS_")
                .to_owned()
        }
        Err(Error::NotFound { .. }) => "NOT_FOUND".into(),
        Err(error) => format!("lookup failed: {error}"),
    }
}

fn proto_duration(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap(),
        nanos: i32::try_from(duration.subsec_nanos()).unwrap(),
    }
}
