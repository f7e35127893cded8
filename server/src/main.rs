//! `opreg-server`: serve the registry until SIGTERM or SIGINT.

use std::process::ExitCode;
use std::str::FromStr;

use clap::Parser;
#[cfg(feature = "embedded-postgres")]
use opreg_embedded::{EmbeddedOptions, EmbeddedPostgres};
use opreg_server::app::Application;
use opreg_server::config::{Command, Config, RestoreArgs};
use opreg_server::domain::admin::Actor;
use opreg_server::domain::text::{LABEL_MAX_BYTES, MESSAGE_MAX_BYTES, check_required_text};
use opreg_server::registry::{self, RestoreReport};
use opreg_server::{shutdown, store, telemetry};
use sqlx::postgres::PgConnectOptions;

#[cfg(feature = "embedded-postgres")]
const EMBEDDED_DATABASE: &str = "opreg";
const POOL_CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Small allocations on every call are the server's largest cost outside the
/// kernel: mimalloc's thread-local free lists serve them cheaper than glibc's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let mut config = Config::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("opreg: cannot start the Tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // Inside the runtime: the span exporter's channel lives there.
    let traces = {
        let _inside = runtime.enter();
        telemetry::logging::init(config.telemetry.log_format)
    };
    let code = run(&mut config, &runtime);
    traces.shutdown();
    code
}

fn run(config: &mut Config, runtime: &tokio::runtime::Runtime) -> ExitCode {
    if let Err(problem) = config.read_secret_files().and_then(|()| config.validate()) {
        tracing::error!("invalid configuration: {problem}");
        return ExitCode::from(2);
    }
    match &config.command {
        Some(Command::Migrate) => return migrate(config, runtime),
        Some(Command::Restore(args)) => return restore(config, args, runtime),
        Some(Command::Serve) | None => {}
    }
    // Started on the main thread, which lives as long as the process:
    // PostgreSQL is signalled to stop when the thread that started it exits,
    // and is stopped when `own` drops, once serving has ended.
    let own = match own_database(config) {
        Ok(own) => own,
        Err(error) => {
            tracing::error!("cannot start the embedded PostgreSQL: {error}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(serve(config, &own));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// `opreg-server migrate`: for deployments that migrate in a separate step.
fn migrate(config: &Config, runtime: &tokio::runtime::Runtime) -> ExitCode {
    let Some(url) = &config.database.database_url else {
        tracing::error!("migrate needs OPREG_DATABASE_URL");
        return ExitCode::from(2);
    };
    let migrated: Result<(), BoxError> = runtime.block_on(async {
        let options = parse_url(url)?;
        let pool = store::connect(options, &config.database.pool_settings()).await?;
        store::migrate(&pool, config.database.session_database()?.as_ref()).await?;
        pool.close().await;
        Ok(())
    });
    match migrated {
        Ok(()) => {
            tracing::info!("migrations applied");
            ExitCode::SUCCESS
        }
        Err(error) => {
            tracing::error!("migration failed: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `opreg-server restore`: after a restore from a backup, before traffic.
fn restore(config: &Config, args: &RestoreArgs, runtime: &tokio::runtime::Runtime) -> ExitCode {
    let Some(url) = &config.database.database_url else {
        tracing::error!("restore needs OPREG_DATABASE_URL");
        return ExitCode::from(2);
    };
    let (operator, reason) = (args.operator.trim(), args.reason.trim());
    // The bounds and characters an OperationAdmin request's operator and reason have.
    if let Err(violation) = check_required_text("operator", operator, LABEL_MAX_BYTES)
        .and_then(|()| check_required_text("reason", reason, MESSAGE_MAX_BYTES))
    {
        tracing::error!("restore: --{} {}", violation.field, violation.description);
        return ExitCode::from(2);
    }
    let actor = Actor {
        operator: operator.to_owned(),
        reason: reason.to_owned(),
        principal: operator.to_owned(),
    };
    let restored: Result<RestoreReport, BoxError> = runtime.block_on(async {
        use sqlx::Connection;
        let options = store::session_options(parse_url(url)?);
        let mut connection = sqlx::PgConnection::connect_with(&options).await?;
        let report = registry::restore_after_backup(&mut connection, &actor).await?;
        connection.close().await?;
        Ok(report)
    });
    match restored {
        Ok(report) => {
            tracing::info!(
                made_unknown = report.total(),
                tokens_above = report.floor.floor,
                "restore: unfinished operations made unknown"
            );
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            tracing::error!("restore failed, no operation changed: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The URL may hold a password: it is parsed, never logged.
fn parse_url(url: &str) -> Result<PgConnectOptions, BoxError> {
    PgConnectOptions::from_str(url)
        .map_err(|_| "OPREG_DATABASE_URL is not a valid PostgreSQL URL".into())
}

/// The PostgreSQL the server started for itself, if it did; stopped when dropped.
#[cfg(feature = "embedded-postgres")]
type OwnDatabase = Option<EmbeddedPostgres>;
/// A build without the embedded PostgreSQL never has one of its own.
#[cfg(not(feature = "embedded-postgres"))]
struct OwnDatabase;

#[cfg(feature = "embedded-postgres")]
fn own_database(config: &Config) -> Result<OwnDatabase, BoxError> {
    match &config.database.database_url {
        Some(_) => Ok(None),
        None => start_embedded(config).map(Some),
    }
}

#[cfg(not(feature = "embedded-postgres"))]
fn own_database(_config: &Config) -> Result<OwnDatabase, BoxError> {
    Ok(OwnDatabase)
}

#[cfg(feature = "embedded-postgres")]
async fn database_options(
    config: &Config,
    own: &OwnDatabase,
) -> Result<PgConnectOptions, BoxError> {
    match own {
        Some(embedded) => {
            embedded.ensure_database(EMBEDDED_DATABASE).await?;
            Ok(embedded.connect_options(EMBEDDED_DATABASE))
        }
        None => configured_options(config),
    }
}

#[cfg(not(feature = "embedded-postgres"))]
async fn database_options(
    config: &Config,
    _own: &OwnDatabase,
) -> Result<PgConnectOptions, BoxError> {
    configured_options(config)
}

fn configured_options(config: &Config) -> Result<PgConnectOptions, BoxError> {
    parse_url(
        config
            .database
            .database_url
            .as_deref()
            .ok_or("no database configured")?,
    )
}

#[cfg(feature = "embedded-postgres")]
fn start_embedded(config: &Config) -> Result<EmbeddedPostgres, BoxError> {
    let options = EmbeddedOptions {
        root: config.database.embedded_root(),
        bin_dir: config.database.pg_bin_dir.clone(),
        ephemeral: false,
    };
    tracing::info!(root = %options.root.display(), "starting embedded PostgreSQL");
    let embedded = EmbeddedPostgres::start(&options)?;
    tracing::info!(
        socket_dir = %embedded.socket_dir().display(),
        log = %embedded.log_file().display(),
        "embedded PostgreSQL ready (psql -h <socket_dir> -U opreg opreg)"
    );
    Ok(embedded)
}

async fn serve(config: &Config, own: &OwnDatabase) -> Result<(), BoxError> {
    let options = database_options(config, own).await?;
    let pool = store::connect(options, &config.database.pool_settings()).await?;
    store::migrate(&pool, config.database.session_database()?.as_ref()).await?;

    let app = Application::build(config, pool.clone()).await?;
    tracing::info!(address = %app.local_addr()?, metrics = %app.metrics_addr()?, "opreg serving");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.serve(async {
        let _ = stopped.await;
    }));
    shutdown::signal().await;
    tracing::info!(grace = ?config.listeners.shutdown_grace, "draining in-flight calls");
    let _ = stop.send(());
    match tokio::time::timeout(config.listeners.shutdown_grace, server).await {
        Ok(served) => served??,
        Err(_) => tracing::warn!("drain timed out; abandoning in-flight calls"),
    }
    // Calls abandoned by a timed-out drain may still hold connections.
    if tokio::time::timeout(POOL_CLOSE_TIMEOUT, pool.close())
        .await
        .is_err()
    {
        tracing::warn!("database connections still busy; closing anyway");
    }
    tracing::info!("stopped");
    Ok(())
}
