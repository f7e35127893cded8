//! Waiting Claims against polling ones, side by side on one server and one
//! PostgreSQL, in one run. Each round holds `--keys` operations under live
//! leases and sets `--waiters` callers (spread evenly over the keys) asking
//! for their results; the holders complete the keys one after another over
//! `--seconds`. A polling caller claims, and while it is told IN_PROGRESS
//! sleeps as the run-once helpers did before the server could wait (at most
//! the 1 s poll interval, plus 5 ms and up to a fifth more); a waiting caller
//! claims once with a wait and is answered when its key completes. Rounds
//! take turns (polling, waiting, polling, waiting) so that a noisy machine
//! weighs on both alike.
//!
//!     cargo run --release -p opreg-server --example waiting_vs_polling -- \
//!         [--keys 100] [--waiters 1000] [--seconds 10] [--database-url URL]
//!
//! Without a URL it starts an embedded PostgreSQL. The server runs in this
//! process, so "server + callers" is their CPU together. It prints, per way:
//! Claims sent, the server's statements (its own query metric), database
//! transactions (pg_stat_database), PostgreSQL's CPU,
//! this process's CPU, and how long after its key completed a caller learned
//! the result.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use opreg_proto::v1 as pb;
use opreg_proto::v1::operation_registry_client::OperationRegistryClient;
use opreg_server::app::Application;
use opreg_server::config::Config;
use opreg_server::store;
use sqlx::postgres::{PgConnectOptions, PgPool};
use tonic::transport::Channel;

/// The run-once helpers' poll interval before the server could wait.
const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Each waiting Claim asks for this long, more than a round lasts.
const WAIT: Duration = Duration::from_secs(60);
/// Connections the callers share.
const CHANNELS: usize = 8;

#[derive(Debug, Parser)]
struct Args {
    /// Operations held in each round.
    #[arg(long, default_value_t = 100)]
    keys: usize,
    /// Callers asking for them, spread evenly.
    #[arg(long, default_value_t = 1_000)]
    waiters: usize,
    /// Over how long the holders complete their keys.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// A local PostgreSQL to use instead of an embedded one.
    #[arg(long)]
    database_url: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Polling,
    Waiting,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Polling => "polling (1 s)",
            Way::Waiting => "waiting",
        }
    }
}

/// What one way spent over its rounds.
#[derive(Debug, Default)]
struct Spent {
    claims: u64,
    statements: f64,
    transactions: i64,
    postgres_seconds: f64,
    own_seconds: f64,
    /// From a key's Complete to each of its callers' answers, in ms.
    lags_ms: Vec<f64>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    support::with_database(
        "waiting-vs-polling",
        args.database_url.as_deref(),
        |options| compare(&args, options),
    )
}

async fn compare(args: &Args, options: PgConnectOptions) -> Result<(), Box<dyn std::error::Error>> {
    let mut config = Config::defaults();
    config.listeners.listen_addr = "127.0.0.1:0".parse()?;
    config.listeners.metrics_addr = "127.0.0.1:0".parse()?;
    config.limits.max_waiters = args.waiters.max(1);
    let pool = store::connect(options.clone(), &config.database.pool_settings()).await?;
    store::MIGRATOR.run(&pool).await?;
    let app = Application::build(&config, pool.clone())
        .await
        .map_err(|error| error.to_string())?;
    let endpoint = format!("http://{}", app.local_addr()?);
    let metrics_addr = app.metrics_addr()?;
    let server = tokio::spawn(app.serve(std::future::pending()));
    let mut channels = Vec::new();
    for _ in 0..CHANNELS {
        channels.push(Channel::from_shared(endpoint.clone())?.connect().await?);
    }
    let postmaster = support::postmaster_of(&pool).await?;
    let mut spent = [Spent::default(), Spent::default()];
    for round in 0..4 {
        let way = if round % 2 == 0 {
            Way::Polling
        } else {
            Way::Waiting
        };
        let before = (
            support::postgres_seconds(postmaster)?,
            support::own_seconds()?,
            transactions(&pool).await?,
            statements(metrics_addr).await?,
        );
        let (claims, lags) = run_round(args, &channels, way, round).await?;
        let total = &mut spent[round % 2];
        total.claims += claims;
        total.lags_ms.extend(lags);
        total.postgres_seconds += support::postgres_seconds(postmaster)? - before.0;
        total.own_seconds += support::own_seconds()? - before.1;
        total.transactions += transactions(&pool).await? - before.2;
        total.statements += statements(metrics_addr).await? - before.3;
    }
    server.abort();
    report(args, &mut spent);
    Ok(())
}

/// The statements the server has run so far, counted by its own metric
/// (`opreg_db_query_duration_seconds`, every query), from its metrics page.
async fn statements(addr: std::net::SocketAddr) -> Result<f64, Box<dyn std::error::Error>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await?;
    let mut page = String::new();
    stream.read_to_string(&mut page).await?;
    Ok(page
        .lines()
        .filter(|line| line.starts_with("opreg_db_query_duration_seconds_count"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Transactions committed in this database so far.
async fn transactions(pool: &PgPool) -> Result<i64, sqlx::Error> {
    // The statistics snapshot of a transaction is taken once; read afresh.
    sqlx::query_scalar(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(pool)
    .await
}

/// One round: the keys held, the callers asking, the keys completed one
/// after another. The Claims the callers sent, and each caller's lag.
async fn run_round(
    args: &Args,
    channels: &[Channel],
    way: Way,
    round: usize,
) -> Result<(u64, Vec<f64>), Box<dyn std::error::Error>> {
    let namespace = format!("round-{round}");
    let client = |i: usize| OperationRegistryClient::new(channels[i % channels.len()].clone());
    let mut tokens = Vec::new();
    for key in 0..args.keys {
        let held = client(key)
            .claim(claim_request(&namespace, key, "holder", None))
            .await?
            .into_inner();
        tokens.push(held.lease.ok_or("the holder got no lease")?.fencing_token);
    }
    let claims = Arc::new(AtomicU64::new(0));
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..args.waiters {
        let mut client = client(caller);
        let (namespace, claims) = (namespace.clone(), Arc::clone(&claims));
        let key = caller % args.keys;
        callers.spawn(async move {
            let owner = format!("caller-{caller}");
            let wait = (way == Way::Waiting).then_some(WAIT);
            loop {
                claims.fetch_add(1, Ordering::Relaxed);
                let answer = client
                    .claim(claim_request(&namespace, key, &owner, wait))
                    .await?
                    .into_inner();
                if answer.outcome() != pb::ClaimOutcome::InProgress {
                    return Ok::<_, tonic::Status>((key, Instant::now()));
                }
                tokio::time::sleep(poll_wait(answer.retry_after, caller)).await;
            }
        });
    }
    let spacing = Duration::from_secs(args.seconds) / u32::try_from(args.keys.max(1))?;
    let mut completed_at = Vec::with_capacity(args.keys);
    for (key, token) in tokens.into_iter().enumerate() {
        tokio::time::sleep(spacing).await;
        completed_at.push(Instant::now());
        client(key)
            .complete(pb::CompleteRequest {
                namespace: namespace.clone(),
                operation_key: key_name(key),
                fencing_token: token,
                outcome: Some(pb::complete_request::Outcome::Success(pb::Success {
                    result: b"done".to_vec(),
                    result_ref: String::new(),
                })),
            })
            .await?;
    }
    let mut lags = Vec::with_capacity(args.waiters);
    while let Some(answered) = callers.join_next().await {
        let (key, at) = answered??;
        lags.push(
            at.saturating_duration_since(completed_at[key])
                .as_secs_f64()
                * 1_000.0,
        );
    }
    Ok((claims.load(Ordering::Relaxed), lags))
}

/// The old helpers' sleep after IN_PROGRESS: `retry_after`, at most the
/// poll interval, plus 5 ms and up to a fifth more (spread by the caller).
fn poll_wait(retry_after: Option<prost_types::Duration>, caller: usize) -> Duration {
    let after = retry_after
        .and_then(|d| Duration::try_from(d).ok())
        .unwrap_or(POLL_INTERVAL)
        .min(POLL_INTERVAL);
    let spread = after / 5;
    let share = f64::from(u32::try_from(caller % 97).unwrap_or(0)) / 97.0;
    after + Duration::from_millis(5) + spread.mul_f64(share)
}

fn key_name(key: usize) -> String {
    format!("settlement:{key}")
}

fn claim_request(
    namespace: &str,
    key: usize,
    owner: &str,
    wait: Option<Duration>,
) -> pb::ClaimRequest {
    pb::ClaimRequest {
        namespace: namespace.into(),
        operation_key: key_name(key),
        fingerprint: Some(pb::claim_request::Fingerprint::ParametersDigest(vec![
            7;
            32
        ])),
        owner: owner.into(),
        lease_ttl: Some(prost_types::Duration {
            seconds: 120,
            nanos: 0,
        }),
        wait: wait.and_then(|wait| prost_types::Duration::try_from(wait).ok()),
        ..Default::default()
    }
}

fn report(args: &Args, spent: &mut [Spent; 2]) {
    println!(
        "{} callers on {} keys, the keys completed over {} s; two rounds each way",
        args.waiters, args.keys, args.seconds
    );
    println!(
        "{:<14} {:>8} {:>11} {:>13} {:>14} {:>16} {:>10} {:>10}",
        "way",
        "claims",
        "statements",
        "transactions",
        "postgres cpu s",
        "server+callers s",
        "lag p50",
        "lag p99"
    );
    for (way, spent) in [Way::Polling, Way::Waiting]
        .into_iter()
        .zip(spent.iter_mut())
    {
        spent.lags_ms.sort_by(f64::total_cmp);
        println!(
            "{:<14} {:>8} {:>11} {:>13} {:>14.2} {:>16.2} {:>8.0}ms {:>8.0}ms",
            way.name(),
            spent.claims,
            spent.statements,
            spent.transactions,
            spent.postgres_seconds,
            spent.own_seconds,
            percentile(&spent.lags_ms, 50),
            percentile(&spent.lags_ms, 99),
        );
    }
    let [polling, waiting] = spent;
    let ratio = |a: f64, b: f64| a / b.max(f64::MIN_POSITIVE);
    println!(
        "polling costs {:.1}x the claims, {:.1}x the statements, {:.1}x the transactions and {:.1}x PostgreSQL's CPU of waiting",
        ratio(polling.claims as f64, waiting.claims as f64),
        ratio(polling.statements, waiting.statements),
        ratio(polling.transactions as f64, waiting.transactions as f64),
        ratio(polling.postgres_seconds, waiting.postgres_seconds),
    );
}

fn percentile(sorted: &[f64], percent: usize) -> f64 {
    let Some(last) = sorted.len().checked_sub(1) else {
        return 0.0;
    };
    sorted[last * percent / 100]
}
