//! `opreg-bench`: drives one scenario against one opreg endpoint, in a closed
//! loop (a fixed number of calls in flight) or an open loop (a fixed arrival
//! rate, each latency measured from the time its call was due to be sent, so
//! queueing in front of a slow server is counted, not hidden), and prints
//! throughput, latency percentiles from an HDR histogram, and the answers by
//! outcome or error reason.
//!
//!     opreg-bench --endpoint http://127.0.0.1:50051 --scenario new-keys \
//!                 --concurrency 32 --calls 20000 [--rate 2000] [--json]
//!
//! Bounded by `--calls` and `--duration` (whichever ends first); it talks only
//! to the endpoint it is given, in a namespace of its own per run.

mod drive;
mod report;
mod scenario;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use scenario::{Scenario, Target};

#[derive(Debug, Parser)]
#[command(name = "opreg-bench", version, about)]
struct Args {
    /// The opreg endpoint, e.g. http://127.0.0.1:50051 (https:// for TLS).
    #[arg(long, env = "OPREG_ENDPOINT", default_value = "http://127.0.0.1:50051")]
    endpoint: String,

    #[arg(long, value_enum)]
    scenario: Scenario,

    /// Calls in flight at most (the closed loop's fixed number).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,

    /// Stop after this many calls [default: 20000 unless --duration is given].
    #[arg(long)]
    calls: Option<u64>,

    /// Stop after this long, e.g. 30s.
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,

    /// An open loop at this many calls per second instead of a closed loop.
    #[arg(long)]
    rate: Option<f64>,

    /// `replay`: the share of calls that claim a completed key (the rest claim new keys).
    #[arg(long, default_value_t = 1.0)]
    hit_rate: f64,

    /// `batch-claim` and `batch-lifecycle`: claims per BatchClaim call (1 to 1000).
    #[arg(long, default_value_t = 32)]
    batch: usize,

    /// HTTP/2 connections the calls are spread over.
    #[arg(long, default_value_t = 4)]
    connections: usize,

    /// The namespace [default: bench-<scenario>-<time>, new each run].
    #[arg(long)]
    namespace: Option<String>,

    /// An API key, sent as `authorization: Bearer`.
    #[arg(long, env = "OPREG_API_KEY", hide_env_values = true)]
    api_key: Option<String>,

    /// CA certificate (PEM) to trust for an https:// endpoint.
    #[arg(long)]
    ca_cert: Option<std::path::PathBuf>,

    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,

    /// Once set up, print `prepared` on stderr and wait for a line on stdin
    /// before the clock starts, so a harness can measure the run alone.
    #[arg(long)]
    wait_before_start: bool,
}

/// Without `--calls` or `--duration`, a run stops after this many calls.
const DEFAULT_CALLS: u64 = 20_000;

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("opreg-bench: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if args.concurrency == 0 || args.connections == 0 {
        return Err("--concurrency and --connections must be at least 1".into());
    }
    if !(1..=1000).contains(&args.batch) {
        return Err("--batch is 1 to 1000 claims".into());
    }
    if !(0.0..=1.0).contains(&args.hit_rate) {
        return Err("--hit-rate is a share between 0 and 1".into());
    }
    if args
        .rate
        .is_some_and(|rate| !(rate > 0.0 && rate.is_finite()))
    {
        return Err("--rate must be a positive number of calls per second".into());
    }
    let limits = drive::Limits {
        calls: args
            .calls
            .or(args.duration.is_none().then_some(DEFAULT_CALLS)),
        duration: args.duration,
    };
    let mut options = opreg_client::ConnectOptions::default();
    if let Some(key) = &args.api_key {
        options = options.api_key(key)?;
    }
    if let Some(path) = &args.ca_cert {
        options = options.ca_certificate(std::fs::read(path)?);
    }
    let clients = (0..args.connections)
        .map(|_| opreg_client::Client::connect_lazy_with(args.endpoint.clone(), &options))
        .collect::<Result<Vec<_>, _>>()?;
    let namespace = args.namespace.clone().unwrap_or_else(|| {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        format!("bench-{}-{stamp}", args.scenario.name())
    });
    let target = std::sync::Arc::new(
        Target::prepare(
            args.scenario,
            &clients,
            namespace,
            (args.hit_rate, args.batch),
            args.concurrency,
            limits.calls.unwrap_or(DEFAULT_CALLS),
        )
        .await?,
    );
    if args.wait_before_start {
        eprintln!("prepared");
        tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new())).await??;
    }
    let mode = match args.rate {
        Some(rate) => drive::Mode::Open { rate },
        None => drive::Mode::Closed,
    };
    let tally = drive::run(&target, &clients, mode, args.concurrency, &limits).await?;
    let summary = report::Summary::new(&args, &target, &tally);
    if args.json {
        println!("{}", summary.json());
    } else {
        print!("{}", summary.text());
    }
    Ok(())
}
