//! The Rust client's worker through every scenario of
//! `client/testdata/worker_scenarios.json` (`client/PROTOCOL.md`, "Worker
//! scenarios"): one operation put where ClaimDue finds it, the worker run
//! through the fault proxy until the proxy saw the scenario's `stop_after`
//! call, then stopped as a user stops it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opreg_client::{Client, Worker};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::common::TestApp;
use super::{
    Prepared, Setting, Work, check_seen, final_status, proxy_for, reconciled, run_every_scenario,
    shown,
};

const SCENARIOS: &str = include_str!("../../../client/testdata/worker_scenarios.json");
/// How long a scenario may take to reach its `stop_after` call.
const STOP_PATIENCE: Duration = Duration::from_secs(10);
/// Beyond the grace, how long the worker may take to return once stopped.
const RETURN_PATIENCE: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_scenario_of_the_shared_file_passes() {
    run_every_scenario(SCENARIOS, 10, |app, defaults, scenario| async move {
        run_scenario(&app, &defaults, &scenario).await
    })
    .await;
}

async fn run_scenario(app: &TestApp, defaults: &Value, scenario: &Value) -> Result<(), String> {
    let setting = Setting { defaults, scenario };
    let name = scenario["name"].as_str().unwrap();
    let tag = format!("{:08x}", rand::random::<u32>());
    let namespace = format!("conformance-rust-{tag}");
    let key = format!("payout:{name}-rust-{tag}");
    let parameters = json!({"amount": 100, "scenario": name});
    let direct = Client::connect(app.endpoint.clone()).await.unwrap();
    let operation = Prepared {
        namespace: &namespace,
        key: &key,
        parameters: &parameters,
        retry_policy: Some(setting.retry_policy()),
        lease_ttl: Duration::from_secs(30),
    };
    operation
        .prepare(&direct, scenario["before"].as_str().unwrap())
        .await;

    let (proxy, through, log) = proxy_for(app, scenario, &key).await;
    let lease_ttl = setting.millis("lease_ttl_ms");
    let grace = setting.millis("grace_ms");
    let work = Work::of(scenario, lease_ttl);
    let mut worker = Worker::new(&through, &namespace)
        .lease_ttl(lease_ttl)
        .poll_interval(setting.millis("poll_interval_ms"))
        .call_timeout(setting.millis("call_timeout_ms"))
        .grace(grace);
    for kind in setting.value("handlers").as_array().unwrap() {
        let work = work.clone();
        worker = match kind.as_str().unwrap() {
            "*" => worker.default_handler(move |_operation, lease| work.next(lease)),
            kind => worker.handler(kind, move |_operation, lease| work.next(lease)),
        };
    }
    let saw = Arc::new(Mutex::new(None::<String>));
    if let Some(verdict) = scenario["reconcile"].as_str() {
        let (saw, verdict) = (saw.clone(), verdict.to_owned());
        worker = worker.reconcile(move |_operation, _lease, remote_ref| {
            *saw.lock().unwrap() = Some(remote_ref);
            reconciled(verdict.clone())
        });
    }
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));

    let stop_after = scenario["stop_after"].as_str().unwrap();
    let reached = seen_in_log(&log, stop_after).await;
    let _ = stop.send(());
    let returned = tokio::time::timeout(grace + RETURN_PATIENCE, running).await;
    let lines = proxy.finish().await;
    let _ = std::fs::remove_file(&log);
    match returned {
        Ok(Ok(Ok(_report))) => {}
        Ok(Ok(Err(error))) => return Err(format!("the worker failed: {error:?}")),
        Ok(Err(panicked)) => return Err(format!("the worker panicked: {panicked}")),
        Err(_) => return Err("the worker did not return once stopped".into()),
    }
    if !reached {
        return Err(format!(
            "the proxy never saw {stop_after}\n{}",
            shown(&lines)
        ));
    }

    let expect = &scenario["expect"];
    let (status, recorded) = final_status(&direct, &namespace, &key).await;
    let seen = saw.lock().unwrap().clone();
    check_seen(expect, &lines, &status, seen)?;
    if let Some(wanted) = expect["last_error_class"].as_str()
        && recorded.last_error_class != wanted
    {
        return Err(format!(
            "last error class {:?}, expected {wanted:?}",
            recorded.last_error_class
        ));
    }
    let wanted = expect["work_runs"].as_u64().unwrap();
    let began = u64::try_from(work.began()).unwrap();
    if began != wanted {
        return Err(format!(
            "the work began {began} time(s), expected {wanted}\n{}",
            shown(&lines)
        ));
    }
    Ok(())
}

/// Reads the proxy's log every 20 ms until it holds `line`; false after
/// [`STOP_PATIENCE`].
async fn seen_in_log(log: &std::path::Path, line: &str) -> bool {
    let looking = async {
        loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if text.lines().any(|logged| logged == line) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(STOP_PATIENCE, looking).await.is_ok()
}
