//! The operator console over a large table: seeds `--operations` stored
//! operations in one namespace (by SQL, in the mix a long-running registry
//! holds: mostly finished, a few percent unfinished), starts the server, and
//! times each console page `--requests` times over HTTP: the overview, the
//! unfinished list's first page and a page 20 pages in, a status filter, the
//! finished list by key with and without a key prefix, an operation page and
//! the due work. It prints the milliseconds per page (p50, p95, max), and the
//! CPU per request of PostgreSQL and of this process (the server, and the
//! small HTTP client that times it).
//!
//!     cargo run --release -p opreg-server --example console_load -- \
//!         [--operations 1000000] [--requests 50] [--database-url URL]
//!
//! Without a URL it starts an embedded PostgreSQL.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use opreg_server::app::Application;
use opreg_server::config::Config;
use opreg_server::store;
use sqlx::postgres::PgConnectOptions;

const NAMESPACE: &str = "load";

#[derive(Debug, Parser)]
struct Args {
    /// Operations stored before the pages are timed.
    #[arg(long, default_value_t = 1_000_000)]
    operations: u64,
    /// Requests per page.
    #[arg(long, default_value_t = 50)]
    requests: usize,
    /// A local PostgreSQL to use instead of an embedded one.
    #[arg(long)]
    database_url: Option<String>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    support::with_database("console-load", args.database_url.as_deref(), |options| {
        measure(&args, options)
    })
}

/// One row in 200 UNKNOWN, one DEAD, one in 100 RETRY_SCHEDULED, one in 50
/// IN_PROGRESS (half of them past their lease) and one in 50 FAILED; the rest
/// SUCCEEDED. Registered one millisecond apart, oldest first.
const SEED: &str = "
INSERT INTO operations (
    namespace, operation_key, status, parameters_digest, parameters_canonical, fencing_token,
    lease_owner, lease_expires_at, attempts, max_attempts, initial_backoff_us, max_backoff_us,
    deadline_at, next_attempt_at, result, failure_code, created_at, updated_at, completed_at,
    unknown_since)
SELECT $1, 'op-' || lpad(n::text, 8, '0'), s.status, sha256(n::text::bytea),
       '{\"amount\":' || n || '}', next_fencing_token(),
       CASE WHEN s.status = 'in_progress' THEN 'worker-' || n % 16 END,
       CASE WHEN s.status = 'in_progress'
            THEN now() + CASE WHEN n % 2 = 0 THEN interval '1 hour' ELSE interval '-1 minute' END END,
       1, 5, 100000, 10000000, now() + interval '1 day',
       CASE WHEN s.status = 'retry_scheduled' THEN now() + (n % 600) * interval '1 second' END,
       CASE WHEN s.status = 'succeeded' THEN convert_to('{\"ledger\":\"L-' || n || '\"}', 'UTF8') END,
       CASE WHEN s.status = 'failed' THEN 'insufficient_funds' END,
       c.at, c.at,
       CASE WHEN s.status IN ('succeeded', 'failed') THEN c.at END,
       CASE WHEN s.status = 'unknown' THEN c.at END
FROM generate_series(1, $2::bigint) AS n
CROSS JOIN LATERAL (SELECT CASE
    WHEN n % 200 = 0 THEN 'unknown'
    WHEN n % 200 = 1 THEN 'dead'
    WHEN n % 100 = 2 THEN 'retry_scheduled'
    WHEN n % 50 = 3 THEN 'in_progress'
    WHEN n % 50 = 4 THEN 'failed'
    ELSE 'succeeded' END AS status) AS s
CROSS JOIN LATERAL (SELECT now() - ($2::bigint - n) * interval '1 millisecond' AS at) AS c";

async fn measure(args: &Args, options: PgConnectOptions) -> Result<(), Box<dyn std::error::Error>> {
    let mut config = Config::defaults();
    config.listeners.listen_addr = "127.0.0.1:0".parse()?;
    config.listeners.metrics_addr = "127.0.0.1:0".parse()?;
    config.telemetry.gauge_refresh_interval = Duration::from_secs(1);
    let pool = store::connect(options.clone(), &config.database.pool_settings()).await?;
    store::MIGRATOR.run(&pool).await?;
    let seeding = Instant::now();
    let mut seeder = pool.acquire().await?;
    sqlx::query("SET statement_timeout = 0")
        .execute(&mut *seeder)
        .await?;
    sqlx::query(SEED)
        .bind(NAMESPACE)
        .bind(i64::try_from(args.operations)?)
        .execute(&mut *seeder)
        .await?;
    sqlx::query("ANALYZE operations")
        .execute(&mut *seeder)
        .await?;
    drop(seeder);
    println!(
        "seeded {} operations in {:.1} s",
        args.operations,
        seeding.elapsed().as_secs_f64()
    );
    let app = Application::build(&config, pool.clone())
        .await
        .map_err(|error| error.to_string())?;
    let addr = app.metrics_addr()?;
    let server = tokio::spawn(app.serve(std::future::pending()));
    // The overview reads the gauges: wait for their first refresh.
    for _ in 0..600 {
        if get(addr, "/metrics")
            .await?
            .1
            .contains("opreg_operations{namespace=\"load\"")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (deep, deep_page) = page_after(addr, "/console/operations?namespace=load", 20).await?;
    let deep_name = format!("unfinished, page {deep_page}");
    let middle = format!(
        "/console/operations/{NAMESPACE}/op-{:08}",
        args.operations / 2
    );
    let pages: Vec<(&str, String)> = vec![
        ("overview", "/console/".into()),
        (
            "unfinished, first page",
            "/console/operations?namespace=load".into(),
        ),
        (&deep_name, deep),
        (
            "status UNKNOWN",
            "/console/operations?namespace=load&status=unknown".into(),
        ),
        (
            "finished, by key",
            "/console/operations?namespace=load&status=finished".into(),
        ),
        (
            "finished, key prefix",
            "/console/operations?namespace=load&status=finished&prefix=op-0050".into(),
        ),
        ("one operation", middle),
        ("due work", "/console/due?namespace=load".into()),
    ];
    let postmaster = support::postmaster_of(&pool).await?;
    println!(
        "{:<24} {:>8} {:>8} {:>8} {:>12} {:>14}   ({} requests each)",
        "page", "p50 ms", "p95 ms", "max ms", "PG CPU ms", "server CPU ms", args.requests
    );
    for (name, path) in &pages {
        let cpu_before = (
            support::postgres_seconds(postmaster)?,
            support::own_seconds()?,
        );
        let mut times = Vec::with_capacity(args.requests);
        for _ in 0..args.requests {
            let started = Instant::now();
            let (status, _) = get(addr, path).await?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            if status != 200 {
                return Err(format!("{path} answered {status}").into());
            }
        }
        let per_request = |before: f64, after: f64| (after - before) * 1000.0 / times.len() as f64;
        let postgres = per_request(cpu_before.0, support::postgres_seconds(postmaster)?);
        let own = per_request(cpu_before.1, support::own_seconds()?);
        times.sort_by(f64::total_cmp);
        let at = |percent: usize| times[(times.len() * percent / 100).min(times.len() - 1)];
        println!(
            "{name:<24} {:>8.1} {:>8.1} {:>8.1} {postgres:>12.2} {own:>14.2}",
            at(50),
            at(95),
            times[times.len() - 1]
        );
    }
    server.abort();
    Ok(())
}

/// The path of the page `pages` "Next page" links after `path`, or of the
/// last page when there are fewer, and its number (the first is 1).
async fn page_after(
    addr: SocketAddr,
    path: &str,
    pages: usize,
) -> Result<(String, usize), Box<dyn std::error::Error>> {
    let mut path = path.to_owned();
    for followed in 0..pages {
        let (_, body) = get(addr, &path).await?;
        let Some(rest) = body.split("rel=\"next\" href=\"").nth(1) else {
            return Ok((path, followed + 1));
        };
        path = rest[..rest.find('"').ok_or("unterminated link")?].replace("&amp;", "&");
    }
    Ok((path, pages + 1))
}

/// One GET over a new connection, as a browser's first request: the status and the body.
async fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), Box<dyn std::error::Error>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response.split(' ').nth(1).ok_or("no status")?.parse()?;
    Ok((status, response))
}
