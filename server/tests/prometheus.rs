//! A real Prometheus scrapes a running opreg and evaluates the shipped rules;
//! the dedupe hit rate is read back through Prometheus's HTTP API.
//!
//! Needs the `prometheus` binary. Without it the test says so and passes,
//! unless `OPREG_REQUIRE_PROMETHEUS` is set (as `.ci/run` does).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::json;

const NS: &str = "prom";

/// Kills Prometheus when the test ends, however it ends.
struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn prometheus_binary() -> Option<&'static str> {
    let found = Command::new("prometheus")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    match (found, std::env::var_os("OPREG_REQUIRE_PROMETHEUS")) {
        (true, _) => Some("prometheus"),
        (false, Some(_)) => {
            panic!("OPREG_REQUIRE_PROMETHEUS is set but `prometheus` is not installed")
        }
        (false, None) => {
            eprintln!("prometheus is not installed: skipping (apt-get install prometheus)");
            None
        }
    }
}

async fn http_get(port: u16, path: &str) -> Option<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: prometheus\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    serde_json::from_str(response.split_once("\r\n\r\n")?.1).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_records_the_dedupe_hit_rate_from_a_live_opreg() {
    let Some(binary) = prometheus_binary() else {
        return;
    };
    let app = spawn_app().await;
    let dir = std::env::temp_dir().join(format!("opreg-prometheus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/prometheus/rules.yml"
    );
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {rules}\n\
         scrape_configs:\n  - job_name: opreg\n    static_configs:\n      - targets: ['{}']\n",
        app.metrics_addr
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let port = free_port();
    let prometheus = Prometheus(
        Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    // Every round registers one new key and repeats it twice: a hit rate of 2/3.
    let mut client = app.client.clone();
    let query =
        "/api/v1/query?query=opreg:dedupe_hit_rate:ratio_rate5m%7Bnamespace%3D%22prom%22%7D";
    let mut hit_rate = None;
    for round in 0..150 {
        let key = format!("key-{round}");
        for owner in ["a", "b", "c"] {
            claim(&mut client, claim_request(NS, &key, owner, json!({}))).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        if round % 5 == 0
            && let Some(answer) = http_get(port, query).await
        {
            let value = &answer["data"]["result"][0]["value"][1];
            hit_rate = value.as_str().and_then(|v| v.parse::<f64>().ok());
            if hit_rate.is_some() && round > 40 {
                break;
            }
        }
    }
    drop(prometheus);
    let _ = std::fs::remove_dir_all(&dir);
    let hit_rate = hit_rate.expect("Prometheus evaluated the hit-rate recording rule");
    assert!((hit_rate - 2.0 / 3.0).abs() < 0.1, "hit rate {hit_rate}");
}
