//! An embedded PostgreSQL for running opreg with no configuration: a cluster
//! in a data directory opreg owns, started from the locally installed server
//! binaries, reachable only through a Unix socket, stopped on shutdown.
//!
//! PostgreSQL refuses to run as root; as root the cluster runs as the
//! `postgres` system user when there is one, else as `nobody`.

mod binaries;
mod process;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use std::{fs, io};

use sqlx::postgres::PgConnectOptions;

pub use binaries::find_bin_dir;
pub use process::is_root;
use process::{RunAs, Supervised};

/// The role created by `initdb`, the cluster's superuser.
pub const SUPERUSER: &str = "opreg";
/// Only names the socket file; nothing listens on TCP.
const PORT: u16 = 5432;
const READY_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "PostgreSQL server binaries (initdb, postgres) were not found in PATH, OPREG_PG_BIN_DIR or the usual \
         install locations; install them (Debian/Ubuntu: `apt-get install postgresql`, Fedora: \
         `dnf install postgresql-server`, macOS: `brew install postgresql`), set OPREG_PG_BIN_DIR to their \
         directory, or set OPREG_DATABASE_URL to use an existing database"
    )]
    BinariesNotFound,
    #[error("the data directory path {0} is too long for a Unix socket; choose a shorter one")]
    PathTooLong(PathBuf),
    #[error("{step} failed: {detail}")]
    Failed { step: &'static str, detail: String },
    #[error("{step}: {source}")]
    Io {
        step: &'static str,
        #[source]
        source: io::Error,
    },
}

fn io_error(step: &'static str) -> impl FnOnce(io::Error) -> EmbeddedError {
    move |source| EmbeddedError::Io { step, source }
}

/// Where and how to run the cluster.
#[derive(Clone, Debug)]
pub struct EmbeddedOptions {
    /// Holds `pgdata/` (the cluster), `run/` (the socket) and `postgres.log`.
    pub root: PathBuf,
    /// Where `initdb` and `postgres` live; searched for when absent.
    pub bin_dir: Option<PathBuf>,
    /// Skip fsync: for throwaway clusters (tests), never for real data.
    pub ephemeral: bool,
}

/// A running cluster. Dropping it stops PostgreSQL (fast shutdown); if this
/// process dies first, the kernel signals PostgreSQL to stop as well.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    postmaster: Supervised,
    socket_dir: PathBuf,
    log_file: PathBuf,
}

impl EmbeddedPostgres {
    /// Initialises the cluster if needed, starts it and waits until it accepts
    /// connections. Blocking. Call it from a thread that outlives the server:
    /// PostgreSQL is told to stop when that thread exits.
    pub fn start(options: &EmbeddedOptions) -> Result<Self, EmbeddedError> {
        let bin_dir = match &options.bin_dir {
            Some(dir) => dir.clone(),
            None => find_bin_dir().ok_or(EmbeddedError::BinariesNotFound)?,
        };
        let run_as = RunAs::for_postgres();
        let data_dir = options.root.join("pgdata");
        let socket_dir = options.root.join("run");
        let log_file = options.root.join("postgres.log");
        // sun_path holds 108 bytes, including the socket's file name.
        if socket_dir.as_os_str().len() > 90 {
            return Err(EmbeddedError::PathTooLong(socket_dir));
        }
        for dir in [&options.root, &socket_dir] {
            fs::create_dir_all(dir)
                .map_err(io_error("creating the embedded PostgreSQL directories"))?;
        }
        run_as.own(&options.root)?;
        run_as.own(&socket_dir)?;

        if !data_dir.join("PG_VERSION").exists() {
            initdb(&bin_dir, &data_dir, &run_as, options.ephemeral)?;
        }
        let postmaster = spawn_postgres(
            &bin_dir,
            &data_dir,
            &socket_dir,
            &log_file,
            &run_as,
            options.ephemeral,
        )?;
        let mut started = Self {
            postmaster,
            socket_dir,
            log_file,
        };
        started.wait_until_ready(&data_dir)?;
        Ok(started)
    }

    /// Connection options for `database` over the cluster's socket.
    pub fn connect_options(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new()
            .socket(&self.socket_dir)
            .port(PORT)
            .username(SUPERUSER)
            .database(database)
    }

    /// Stops PostgreSQL as a crash would: immediate shutdown, no checkpoint;
    /// the next start recovers from the WAL. For fault tests.
    pub fn stop_immediately(mut self) {
        self.postmaster.quit_now();
    }

    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    pub fn log_file(&self) -> &Path {
        &self.log_file
    }

    /// Creates `database` unless it exists.
    pub async fn ensure_database(&self, database: &str) -> Result<(), sqlx::Error> {
        use sqlx::Connection;
        let mut admin = sqlx::PgConnection::connect_with(&self.connect_options("postgres")).await?;
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
                .bind(database)
                .fetch_one(&mut admin)
                .await?;
        if !exists {
            // Identifiers cannot be bound; quote it as PostgreSQL's quote_ident does.
            let quoted = format!("\"{}\"", database.replace('"', "\"\""));
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {quoted}")))
                .execute(&mut admin)
                .await?;
        }
        admin.close().await
    }

    /// PostgreSQL writes "ready" into its pid file once it accepts connections.
    fn wait_until_ready(&mut self, data_dir: &Path) -> Result<(), EmbeddedError> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.postmaster.exit_status() {
                return Err(EmbeddedError::Failed {
                    step: "starting postgres",
                    detail: format!("it exited with {status}; see {}", self.log_file.display()),
                });
            }
            let pid_file = fs::read_to_string(data_dir.join("postmaster.pid")).unwrap_or_default();
            if pid_file
                .lines()
                .nth(7)
                .is_some_and(|line| line.trim() == "ready")
            {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(EmbeddedError::Failed {
                    step: "starting postgres",
                    detail: format!(
                        "not ready after {READY_TIMEOUT:?}; see {}",
                        self.log_file.display()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `initdb` of a cluster as this crate makes them (the superuser, trust over
/// the socket, UTF-8, the C locale), for a caller to add its own options to:
/// a test that needs the WAL elsewhere initialises the cluster itself, and
/// [`EmbeddedPostgres::start`] then only starts it.
pub fn initdb_command(bin_dir: &Path, data_dir: &Path) -> Command {
    let mut command = Command::new(bin_dir.join("initdb"));
    command.arg("--pgdata").arg(data_dir).args([
        "--username",
        SUPERUSER,
        "--auth",
        "trust",
        "--encoding",
        "UTF8",
        "--locale",
        "C",
    ]);
    command
}

fn initdb(
    bin_dir: &Path,
    data_dir: &Path,
    run_as: &RunAs,
    ephemeral: bool,
) -> Result<(), EmbeddedError> {
    let mut command = initdb_command(bin_dir, data_dir);
    if ephemeral {
        command.arg("--no-sync");
    }
    let output = run_as
        .prepare(&mut command)
        .output()
        .map_err(io_error("running initdb"))?;
    if !output.status.success() {
        let mut detail = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        if let Some(user) = run_as.user_name() {
            detail.push_str(&format!(
                " (PostgreSQL runs as {user} because opreg runs as root; {user} must be able to \
                 traverse every parent directory of {})",
                data_dir.display()
            ));
        }
        return Err(EmbeddedError::Failed {
            step: "initdb",
            detail,
        });
    }
    Ok(())
}

fn spawn_postgres(
    bin_dir: &Path,
    data_dir: &Path,
    socket_dir: &Path,
    log_file: &Path,
    run_as: &RunAs,
    ephemeral: bool,
) -> Result<Supervised, EmbeddedError> {
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_file)
        .map_err(io_error("opening the PostgreSQL log"))?;
    run_as.own(log_file)?;
    let mut command = Command::new(bin_dir.join("postgres"));
    command
        .arg("-D")
        .arg(data_dir)
        .arg("-k")
        .arg(socket_dir)
        .args([
            "-p",
            &PORT.to_string(),
            "-c",
            "listen_addresses=",
            "-c",
            "max_connections=300",
        ]);
    if ephemeral {
        command.args([
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
        ]);
    }
    command
        .stdin(std::process::Stdio::null())
        .stdout(
            log.try_clone()
                .map_err(io_error("opening the PostgreSQL log"))?,
        )
        .stderr(log);
    Supervised::spawn(run_as.prepare(&mut command)).map_err(io_error("starting postgres"))
}
