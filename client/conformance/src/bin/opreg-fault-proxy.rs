//! `opreg-fault-proxy --upstream URL --faults JSON --log FILE`: serves
//! `opreg.v1.OperationRegistry` on a free loopback port, prints
//! `listening HOST:PORT`, and exits once stdin closes and the calls in flight
//! are logged (client/PROTOCOL.md, "The fault proxy").

use std::io::Write;
use std::path::PathBuf;

use clap::Parser;
use opreg_conformance::{FaultProxy, Rule};
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
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let rules: Vec<Rule> = serde_json::from_str(&args.faults)?;
    let proxy = FaultProxy::start(&args.upstream, rules, &args.log).await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening {}", proxy.addr())?;
    stdout.flush()?;
    let mut rest = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut rest).await;
    proxy.finish().await;
    Ok(())
}
