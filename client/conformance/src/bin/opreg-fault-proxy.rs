//! `opreg-fault-proxy --upstream URL --faults JSON --log FILE [--expect JSON]`:
//! serves `opreg.v1.OperationRegistry` on a free loopback port, prints
//! `listening HOST:PORT`, and exits once stdin closes and the calls in flight
//! are logged (client/PROTOCOL.md, "The fault proxy"). With `--expect`, the
//! scenario's `expect.calls`, it then judges the calls it saw: its last line
//! says whether they matched, and its exit status is 0 if they did, 3 if not.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use opreg_conformance::{FaultProxy, Rule, calls_match};
use tokio::io::AsyncReadExt;

#[derive(Parser)]
#[command(about = "The fault-injecting proxy of opreg's run-once conformance scenarios")]
struct Args {
    /// The opreg server to forward to, e.g. http://127.0.0.1:50051.
    #[arg(long)]
    upstream: String,
    /// A JSON array of fault rules.
    #[arg(long, default_value = "[]")]
    faults: String,
    /// Where each call is logged as `Method:RESULT`.
    #[arg(long)]
    log: PathBuf,
    /// The calls expected, a JSON array of patterns (a scenario's `expect.calls`).
    #[arg(long)]
    expect: Option<String>,
}

/// The exit status when the calls seen do not match `--expect`.
const MISMATCH: u8 = 3;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let args = Args::parse();
    let rules: Vec<Rule> = serde_json::from_str(&args.faults)?;
    let expected: Option<Vec<String>> = args
        .expect
        .as_deref()
        .map(serde_json::from_str)
        .transpose()?;
    let proxy = FaultProxy::start(&args.upstream, rules, &args.log).await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening {}", proxy.addr())?;
    stdout.flush()?;
    let mut rest = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut rest).await;
    let lines = proxy.finish().await;
    let Some(expected) = expected else {
        return Ok(ExitCode::SUCCESS);
    };
    let patterns: Vec<&str> = expected.iter().map(String::as_str).collect();
    let seen = serde_json::to_string(&lines)?;
    if calls_match(&patterns, &lines) {
        writeln!(stdout, "calls matched: {seen}")?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        stdout,
        "calls mismatched: expected {}, saw {seen}",
        serde_json::to_string(&expected)?
    )?;
    Ok(ExitCode::from(MISMATCH))
}
