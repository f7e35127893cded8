//! The transactional door against the raw SQL a team would otherwise write,
//! side by side on one PostgreSQL, in one run. Each iteration is one short
//! transaction: register the operation, debit an account, record success,
//! commit. The raw path is three statements on a table of its own; the Rust
//! door is `InTransaction::claim`, the same debit and `InTransaction::complete`;
//! the SQL door is `opreg_sql.claim`, the debit and `opreg_sql.complete`. The
//! raw and Rust paths fingerprint the parameters in this process, the SQL door
//! in PostgreSQL. All share one pool with the door's connection setting
//! (`in_transaction::connect_options`; without it PostgreSQL plans the
//! registry's statements on every call). Each path first runs unmeasured,
//! then the tables are analysed and the measuring pool connects. Rounds take
//! turns (raw, Rust door, SQL door, raw, …) so that a noisy machine weighs on
//! all alike.
//!
//!     cargo run --release -p opreg-server --example door_vs_raw -- \
//!         [--seconds 10] [--concurrency 8] [--database-url URL]
//!
//! Without a URL it starts an embedded PostgreSQL (durable commits) in a
//! scratch directory. It prints, per path: transactions, throughput, and the
//! CPU per transaction of PostgreSQL (the postmaster, its reaped children and
//! every live child, from /proc: the database must be local) and of this
//! process (the door's own code runs here).

mod support;

use std::time::{Duration, Instant};

use clap::Parser;
use opreg_proto::parameters::Fingerprint;
use opreg_proto::v1 as pb;
use opreg_server::config::Config;
use opreg_server::in_transaction::{self, InTransaction};
use opreg_server::store;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Connection, PgConnection};

const ACCOUNTS: i64 = 1_000;
const ROUNDS_PER_PATH: usize = 2;
/// Each path runs this long, unmeasured, before the rounds.
const WARM_UP: Duration = Duration::from_secs(2);

#[derive(Debug, Parser)]
struct Args {
    /// Seconds each round runs (two rounds per path).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Transactions in flight.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// A local PostgreSQL to use instead of an embedded one.
    #[arg(long)]
    database_url: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Raw,
    Door,
    SqlDoor,
}

impl Path {
    /// In the order the rounds take turns.
    const ALL: [Path; 3] = [Path::Raw, Path::Door, Path::SqlDoor];

    fn name(self) -> &'static str {
        match self {
            Path::Raw => "raw SQL",
            Path::Door => "Rust door",
            Path::SqlDoor => "SQL door",
        }
    }
}

/// What one path spent over its rounds.
#[derive(Debug, Default)]
struct Spent {
    transactions: u64,
    wall: Duration,
    postgres_seconds: f64,
    own_seconds: f64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    support::with_database("door-vs-raw", args.database_url.as_deref(), |options| {
        compare(&args, options)
    })
}

async fn compare(args: &Args, options: PgConnectOptions) -> Result<(), Box<dyn std::error::Error>> {
    let door = InTransaction::new(Config::defaults().request_limits()?);
    let round = Duration::from_secs(args.seconds);
    let options = in_transaction::connect_options(options);
    // A connection plans each statement once, when it first runs it, and a
    // plan made on empty tables may not suit full ones (ARCHITECTURE, "Known
    // limits"). The rounds measure connections opened once both paths have
    // rows and statistics.
    let warming = pool_of(&options, args.concurrency).await?;
    prepare(&warming).await?;
    for (number, path) in Path::ALL.into_iter().enumerate() {
        run_round(&warming, &door, path, number, args.concurrency, WARM_UP).await?;
    }
    sqlx::raw_sql("ANALYZE").execute(&warming).await?;
    warming.close().await;
    let pool = pool_of(&options, args.concurrency).await?;
    let postmaster = support::postmaster_of(&pool).await?;
    let mut spent = [Spent::default(), Spent::default(), Spent::default()];
    let first = Path::ALL.len();
    for number in first..first + ROUNDS_PER_PATH * Path::ALL.len() {
        let path = Path::ALL[number % Path::ALL.len()];
        let before = (
            support::postgres_seconds(postmaster)?,
            support::own_seconds()?,
            Instant::now(),
        );
        let transactions = run_round(&pool, &door, path, number, args.concurrency, round).await?;
        let total = &mut spent[number % Path::ALL.len()];
        total.transactions += transactions;
        total.wall += before.2.elapsed();
        total.postgres_seconds += support::postgres_seconds(postmaster)? - before.0;
        total.own_seconds += support::own_seconds()? - before.1;
    }
    report(args, &spent);
    Ok(())
}

async fn pool_of(
    options: &PgConnectOptions,
    concurrency: usize,
) -> Result<PgPool, Box<dyn std::error::Error>> {
    let connections = u32::try_from(concurrency)?;
    Ok(PgPoolOptions::new()
        .min_connections(connections)
        .max_connections(connections)
        .connect_with(options.clone())
        .await?)
}

/// The migrated registry, the accounts and the raw path's table.
async fn prepare(pool: &PgPool) -> Result<(), Box<dyn std::error::Error>> {
    store::MIGRATOR.run(pool).await?;
    sqlx::raw_sql(
        "DROP TABLE IF EXISTS bench_accounts, raw_operations;
         DROP SEQUENCE IF EXISTS raw_tokens;
         CREATE TABLE bench_accounts (id bigint PRIMARY KEY, balance bigint NOT NULL);
         INSERT INTO bench_accounts SELECT id, 1000000000 FROM generate_series(0, 999) AS id;
         CREATE SEQUENCE raw_tokens;
         CREATE TABLE raw_operations (
             operation_key text PRIMARY KEY, digest bytea NOT NULL, status text NOT NULL,
             fencing_token bigint NOT NULL, lease_expires_at timestamptz, result bytea);",
    )
    .execute(pool)
    .await?;
    Ok(())
}

async fn run_round(
    pool: &PgPool,
    door: &InTransaction,
    path: Path,
    round: usize,
    concurrency: usize,
    length: Duration,
) -> Result<u64, sqlx::Error> {
    let until = Instant::now() + length;
    // Keys of their own in every run: a database given twice keeps the last run's.
    let run = std::process::id();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..concurrency {
        let (pool, door) = (pool.clone(), door.clone());
        tasks.spawn(async move {
            let mut done = 0u64;
            while Instant::now() < until {
                let key = format!("{run}-{round}-{task}-{done}");
                let account = i64::try_from(done).unwrap_or(0) % ACCOUNTS;
                let mut db = pool.acquire().await?;
                match path {
                    Path::Raw => raw_transaction(&mut db, &key, account).await?,
                    Path::Door => door_transaction(&mut db, &door, &key, account).await?,
                    Path::SqlDoor => sql_door_transaction(&mut db, &key, account).await?,
                }
                done += 1;
            }
            Ok::<u64, sqlx::Error>(done)
        });
    }
    let mut transactions = 0;
    while let Some(finished) = tasks.join_next().await {
        transactions += finished.expect("a round's task panicked")?;
    }
    Ok(transactions)
}

fn parameters(account: i64) -> serde_json::Value {
    serde_json::json!({"account": account, "amount": 1})
}

async fn debit(db: &mut PgConnection, account: i64) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE bench_accounts SET balance = balance - 1 WHERE id = $1")
        .bind(account)
        .execute(db)
        .await
        .map(drop)
}

/// What a team writes by hand: a guarded insert, the debit, a guarded update.
async fn raw_transaction(
    db: &mut PgConnection,
    key: &str,
    account: i64,
) -> Result<(), sqlx::Error> {
    let digest = Fingerprint::from_json(&parameters(account))
        .expect("finite parameters")
        .digest;
    let mut tx = db.begin().await?;
    let token: i64 = sqlx::query_scalar(
        "INSERT INTO raw_operations VALUES ($1, $2, 'in_progress', nextval('raw_tokens'),
             clock_timestamp() + interval '30 seconds', NULL)
         ON CONFLICT DO NOTHING RETURNING fencing_token",
    )
    .bind(key)
    .bind(digest)
    .fetch_one(&mut *tx)
    .await?;
    debit(&mut tx, account).await?;
    sqlx::query(
        "UPDATE raw_operations SET status = 'succeeded', result = 'debited', lease_expires_at = NULL
         WHERE operation_key = $1 AND fencing_token = $2 AND status = 'in_progress'",
    )
    .bind(key)
    .bind(token)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// The same through the door.
async fn door_transaction(
    db: &mut PgConnection,
    door: &InTransaction,
    key: &str,
    account: i64,
) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    let claimed = door
        .claim(
            &mut tx,
            pb::ClaimRequest {
                namespace: "bench".into(),
                operation_key: key.into(),
                fingerprint: Some(pb::claim_request::Fingerprint::Parameters(
                    opreg_proto::parameters::json_to_struct(parameters(account)),
                )),
                owner: "door-vs-raw".into(),
                ..Default::default()
            },
        )
        .await
        .expect("a new key is acquired");
    let token = claimed
        .lease
        .expect("an acquired claim has a lease")
        .fencing_token;
    debit(&mut tx, account).await?;
    door.complete(
        &mut tx,
        pb::CompleteRequest {
            namespace: "bench".into(),
            operation_key: key.into(),
            fencing_token: token,
            outcome: Some(pb::complete_request::Outcome::Success(pb::Success {
                result: b"debited".to_vec(),
                result_ref: String::new(),
            })),
        },
    )
    .await
    .expect("the holder's report is recorded");
    tx.commit().await
}

/// The same through the SQL functions.
async fn sql_door_transaction(
    db: &mut PgConnection,
    key: &str,
    account: i64,
) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    let token: i64 = sqlx::query_scalar(
        "SELECT fencing_token FROM opreg_sql.claim('bench', $1, $2::jsonb, 'door-vs-raw')",
    )
    .bind(key)
    .bind(parameters(account).to_string())
    .fetch_one(&mut *tx)
    .await?;
    debit(&mut tx, account).await?;
    sqlx::query(
        "SELECT 1 FROM opreg_sql.complete('bench', $1, $2, 'SUCCESS', result => 'debited')",
    )
    .bind(key)
    .bind(token)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

fn report(args: &Args, spent: &[Spent; 3]) {
    println!(
        "the doors vs raw SQL: {} in flight, {} rounds of {} s per path (claim + debit + complete, one commit)",
        args.concurrency, ROUNDS_PER_PATH, args.seconds
    );
    println!(
        "{:<20} {:>12} {:>10} {:>16} {:>16} {:>16}",
        "path", "transactions", "per s", "PostgreSQL µs", "this process µs", "sum µs"
    );
    let per = |seconds: f64, spent: &Spent| seconds * 1e6 / spent.transactions.max(1) as f64;
    let mut sums = [0.0; 3];
    for (index, (path, spent)) in Path::ALL.iter().zip(spent).enumerate() {
        let (postgres, own) = (
            per(spent.postgres_seconds, spent),
            per(spent.own_seconds, spent),
        );
        sums[index] = postgres + own;
        println!(
            "{:<20} {:>12} {:>10.0} {:>16.1} {:>16.1} {:>16.1}",
            path.name(),
            spent.transactions,
            spent.transactions as f64 / spent.wall.as_secs_f64(),
            postgres,
            own,
            postgres + own
        );
    }
    for (path, sum) in Path::ALL.iter().zip(sums).skip(1) {
        println!(
            "the {} costs {:.2}x the raw SQL's CPU per transaction",
            path.name(),
            sum / sums[0].max(f64::MIN_POSITIVE)
        );
    }
}
