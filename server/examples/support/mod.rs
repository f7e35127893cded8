//! What the examples that compare paths share: an embedded PostgreSQL (or a
//! given one) for the run, and the CPU PostgreSQL and this process spent,
//! read from /proc (the database must be local).

use std::path::PathBuf;

use opreg_embedded::{EmbeddedOptions, EmbeddedPostgres};
use sqlx::postgres::{PgConnectOptions, PgPool};

/// Runs `compare` on a multi-threaded runtime against `database_url`, or an
/// embedded PostgreSQL (durable commits) in a scratch directory that is
/// removed afterwards.
pub fn with_database<F>(
    name: &str,
    database_url: Option<&str>,
    compare: impl FnOnce(PgConnectOptions) -> F,
) -> Result<(), Box<dyn std::error::Error>>
where
    F: Future<Output = Result<(), Box<dyn std::error::Error>>>,
{
    // The embedded cluster stops with the thread that started it: this one.
    let scratch = std::env::temp_dir().join(format!("opreg-{name}-{}", std::process::id()));
    let embedded = match database_url {
        Some(_) => None,
        None => Some(EmbeddedPostgres::start(&EmbeddedOptions {
            root: scratch.clone(),
            bin_dir: None,
            ephemeral: false,
        })?),
    };
    let options: PgConnectOptions = match (database_url, &embedded) {
        (Some(url), _) => url.parse()?,
        (None, Some(cluster)) => cluster.connect_options("postgres"),
        (None, None) => unreachable!("a cluster was started without a URL"),
    };
    let outcome = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(compare(options));
    drop(embedded);
    let _ = std::fs::remove_dir_all(&scratch);
    outcome
}

/// The postmaster: the parent of this pool's backends.
pub async fn postmaster_of(pool: &PgPool) -> Result<u32, Box<dyn std::error::Error>> {
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(pool)
        .await?;
    let fields = stat_fields(u32::try_from(backend)?)?;
    Ok(fields[1].parse()?)
}

/// Linux's USER_HZ: the unit of the times in /proc/PID/stat.
const TICKS_PER_SECOND: f64 = 100.0;

/// The fields of /proc/PID/stat after the command name (state first).
fn stat_fields(pid: u32) -> std::io::Result<Vec<String>> {
    let text = std::fs::read_to_string(PathBuf::from(format!("/proc/{pid}/stat")))?;
    let after_name = text.rfind(')').map_or(0, |end| end + 2);
    Ok(text[after_name..]
        .split_whitespace()
        .map(str::to_owned)
        .collect())
}

fn seconds_of(fields: &[String], at: usize) -> f64 {
    fields
        .get(at)
        .and_then(|f| f.parse::<f64>().ok())
        .unwrap_or(0.0)
        / TICKS_PER_SECOND
}

/// User plus system time of a process from its stat fields (utime, stime).
fn own_of(fields: &[String]) -> f64 {
    seconds_of(fields, 11) + seconds_of(fields, 12)
}

pub fn own_seconds() -> std::io::Result<f64> {
    Ok(own_of(&stat_fields(std::process::id())?))
}

/// The postmaster, its reaped children and every live child.
pub fn postgres_seconds(postmaster: u32) -> std::io::Result<f64> {
    let fields = stat_fields(postmaster)?;
    let mut total = own_of(&fields) + seconds_of(&fields, 13) + seconds_of(&fields, 14);
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(child) = stat_fields(pid)
            && child.get(1).map(String::as_str) == Some(postmaster.to_string().as_str())
        {
            total += own_of(&child);
        }
    }
    Ok(total)
}
