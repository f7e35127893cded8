//! Configuration from flags and `OPREG_*` environment variables, in typed
//! groups, each validated at load time with an error of its own, so a bad
//! setting stops the server before it serves.

mod console;
mod database;
mod lifecycle;
mod limits;
mod listeners;
mod telemetry;
mod values;

use clap::{Parser, Subcommand};

pub use console::{Console, ConsoleSettings, ConsoleSettingsError};
pub use database::{Database, DatabaseError};
pub use lifecycle::{Lifecycle, LifecycleError};
pub use limits::{Limits, LimitsError};
pub use listeners::{Listeners, ListenersError};
pub use telemetry::{LogFormat, Telemetry, TelemetryError};
pub use values::{Overrides, Retention};

use crate::grpc::RequestLimits;

/// opreg-server: the operation registry.
///
/// With no database URL a build with the `embedded-postgres` feature (the
/// default, for the quick start) runs a PostgreSQL of its own from the locally
/// installed server binaries, in a data directory it owns; a build without it
/// (the image) refuses to start.
#[derive(Clone, Debug, Parser)]
#[command(name = "opreg-server", version, about, long_about)]
pub struct Config {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten, next_help_heading = "Listeners and TLS")]
    pub listeners: Listeners,

    #[command(flatten, next_help_heading = "Database")]
    pub database: Database,

    #[command(flatten, next_help_heading = "Limits")]
    pub limits: Limits,

    #[command(flatten, next_help_heading = "Lifecycle")]
    pub lifecycle: Lifecycle,

    #[command(flatten, next_help_heading = "Telemetry")]
    pub telemetry: Telemetry,

    #[command(flatten, next_help_heading = "Operator console")]
    pub console: Console,
}

/// What the binary does; serving is the default.
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Serve the registry (the default).
    Serve,
    /// Run the database migrations against OPREG_DATABASE_URL and exit.
    Migrate,
    /// After the database was restored from a backup, before traffic: make
    /// every unfinished operation UNKNOWN (its next Claim reconciles), write
    /// an audit row for each, and report the restore point and the tokens.
    Restore(RestoreArgs),
}

/// Who runs `opreg-server restore`, and why, for the audit rows.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct RestoreArgs {
    /// The operator, as the audit rows name them.
    #[arg(long)]
    pub operator: String,
    /// Why, e.g. the incident or the backup restored.
    #[arg(long)]
    pub reason: String,
}

/// A setting that cannot stand, by the group it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Listeners(#[from] ListenersError),
    #[error(transparent)]
    Database(#[from] DatabaseError),
    #[error(transparent)]
    Limits(#[from] LimitsError),
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    #[error(transparent)]
    Console(#[from] ConsoleSettingsError),
}

impl Config {
    /// The defaults, as if started with no flags and no environment.
    pub fn defaults() -> Self {
        Self::parse_from(["opreg-server"])
    }

    /// Reads the settings kept in files (secrets), so no secret needs a flag.
    pub fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        Ok(self.database.read_secret_files()?)
    }

    /// Checks every group's settings, which depend on each other only
    /// within their group.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.listeners.validate()?;
        self.database.validate()?;
        self.limits.validate()?;
        self.lifecycle.validate()?;
        self.telemetry.validate()?;
        self.console.validate()?;
        Ok(())
    }

    /// Limits for requests: the limits' group, with the lifecycle's default
    /// retry policy. Call after [`Config::validate`].
    pub fn request_limits(&self) -> Result<RequestLimits, ConfigError> {
        Ok(RequestLimits {
            lease: self.limits.lease_bounds(),
            parameters: self.limits.parameter_limits(),
            max_result_bytes: self.limits.max_result_bytes,
            default_retry_policy: self.lifecycle.default_retry_policy()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::Pooler;

    /// OPERATIONS.md's configuration reference: the lines between these two
    /// markers are generated from the flags below.
    const REFERENCE_BEGINS: &str = "<!-- configuration reference:";
    const REFERENCE_ENDS: &str = "<!-- end of configuration reference -->";

    /// One table per group of settings, one row per flag: its variable,
    /// flag, default and help text.
    fn configuration_reference() -> String {
        use clap::CommandFactory;
        let mut table = String::new();
        let mut group = None;
        for arg in Config::command().get_arguments() {
            let Some(long) = arg.get_long() else {
                continue;
            };
            if arg.is_hide_set() || matches!(long, "help" | "version") {
                continue;
            }
            if arg.get_help_heading() != group {
                group = arg.get_help_heading();
                let heading = group.expect("every setting is in a group");
                table.push_str(&format!(
                    "\n#### {heading}\n\n| variable | flag | default | meaning |\n|---|---|---|---|\n"
                ));
            }
            let env = arg
                .get_env()
                .map(|env| format!("`{}`", env.to_string_lossy()))
                .unwrap_or_else(|| "—".to_owned());
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|value| value.to_string_lossy().into_owned())
                .collect();
            let default = if defaults.is_empty() {
                "—".to_owned()
            } else {
                format!("`{}`", defaults.join(","))
            };
            let help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|help| help.to_string())
                .unwrap_or_default();
            let meaning = help
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .replace('|', "\\|");
            table.push_str(&format!("| {env} | `--{long}` | {default} | {meaning} |\n"));
        }
        table
    }

    /// Rewritten by `OPREG_BLESS=1 cargo test -p opreg-server --lib
    /// configuration_reference`, so a new or changed flag cannot leave the
    /// operators' reference behind.
    #[test]
    fn configuration_reference_in_operations_md_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../OPERATIONS.md");
        let text = std::fs::read_to_string(path).expect("OPERATIONS.md");
        let begins = text
            .find(REFERENCE_BEGINS)
            .expect("the reference's first marker");
        let table_starts = begins + text[begins..].find('\n').expect("a marker line") + 1;
        let table_ends = text
            .find(REFERENCE_ENDS)
            .expect("the reference's last marker");
        let wanted = configuration_reference();
        if std::env::var_os("OPREG_BLESS").is_some() {
            let blessed = format!("{}{wanted}{}", &text[..table_starts], &text[table_ends..]);
            std::fs::write(path, blessed).expect("OPERATIONS.md written");
            return;
        }
        assert!(
            text[table_starts..table_ends] == wanted,
            "OPERATIONS.md's configuration reference is out of date: run \
             OPREG_BLESS=1 cargo test -p opreg-server --lib configuration_reference"
        );
    }

    #[test]
    fn defaults_are_valid_and_documented_values() {
        let config = Config::defaults();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.listeners.listen_addr.to_string(), "127.0.0.1:50051");
        assert_eq!(config.limits.lease_ttl_default, Duration::from_secs(30));
        assert_eq!(config.limits.max_result_bytes, 1 << 20);
        let policy = config.lifecycle.default_retry_policy().unwrap();
        assert_eq!(policy.max_attempts, 5);
        assert_eq!(policy.max_backoff, Duration::from_secs(300));
        assert_eq!(policy.deadline, Duration::from_secs(86_400));
    }

    #[test]
    fn waiting_is_off_or_at_least_a_second_with_a_waiter() {
        let with = |max_wait: u64, max_waiters: usize| {
            let mut config = Config::defaults();
            config.limits.max_wait = Duration::from_millis(max_wait);
            config.limits.max_waiters = max_waiters;
            config.validate()
        };
        assert_eq!(with(0, 0), Ok(()), "off");
        assert_eq!(with(1_000, 1), Ok(()));
        for (max_wait, max_waiters) in [(5, 10), (1_000, 0)] {
            assert_eq!(
                with(max_wait, max_waiters),
                Err(ConfigError::Limits(LimitsError::WaitBounds))
            );
        }
    }

    #[test]
    fn lifecycle_settings_parse_overrides_and_forever() {
        let config = Config::parse_from([
            "opreg-server",
            "--retention",
            "2s",
            "--namespace-retention",
            "payments=forever, callbacks=3d",
            "--namespace-max-concurrent-retries",
            "payments=10",
        ]);
        let maintenance = config.lifecycle.maintenance_settings();
        assert_eq!(
            *maintenance.retention.get("other"),
            Some(Duration::from_secs(2))
        );
        assert_eq!(*maintenance.retention.get("payments"), None);
        assert_eq!(
            *maintenance.retention.get("callbacks"),
            Some(Duration::from_secs(3 * 86_400))
        );
        assert_eq!(*config.lifecycle.retry_caps().get("payments"), Some(10));
        assert_eq!(*config.lifecycle.retry_caps().get("other"), None);
        let limited = Config::parse_from([
            "opreg-server",
            "--rate-limit",
            "100",
            "--namespace-rate-limits",
            "reports=5",
        ]);
        assert_eq!(*limited.limits.rate_limits().get("reports"), Some(5));
        assert_eq!(*limited.limits.rate_limits().get("payments"), Some(100));
        assert_eq!(
            *Config::defaults().limits.rate_limits().get("payments"),
            None
        );
        assert_eq!(config.lifecycle.short_retentions(), ["OPREG_RETENTION"]);
        assert_eq!(
            Config::defaults().lifecycle.short_retentions(),
            Vec::<String>::new()
        );
        assert!("payments".parse::<Overrides<u32>>().is_err());
        assert!(" =1".parse::<Overrides<u32>>().is_err());
        assert!("soon".parse::<Retention>().is_err());
    }

    #[test]
    fn the_database_url_can_come_from_a_file() {
        let dir = std::env::temp_dir().join(format!("opreg-url-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("url");
        std::fs::write(&file, "postgres://opreg:secret@db/opreg\n").unwrap();
        let mut config = Config::parse_from([
            "opreg-server",
            "--database-url-file",
            file.to_str().unwrap(),
        ]);
        config.database.read_secret_files().unwrap();
        assert_eq!(
            config.database.database_url.as_deref(),
            Some("postgres://opreg:secret@db/opreg")
        );
        std::fs::write(&file, "  ").unwrap();
        assert!(config.database.read_secret_files().is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_public_address_needs_an_explicit_choice_to_serve_unauthenticated() {
        let public = Config::parse_from(["opreg-server", "--listen-addr", "0.0.0.0:50051"]);
        assert!(matches!(
            public.validate(),
            Err(ConfigError::Listeners(ListenersError::Unauthenticated(_)))
        ));
        let refused = public.validate().unwrap_err().to_string();
        assert!(refused.contains("--allow-unauthenticated"), "{refused}");
        let allowed = Config::parse_from([
            "opreg-server",
            "--listen-addr",
            "0.0.0.0:50051",
            "--allow-unauthenticated",
        ]);
        assert_eq!(allowed.validate(), Ok(()));
        let with_policy = Config::parse_from([
            "opreg-server",
            "--listen-addr",
            "0.0.0.0:50051",
            "--auth-file",
            "/etc/opreg/policy.toml",
        ]);
        assert_eq!(with_policy.validate(), Ok(()));
        let loopback = Config::parse_from(["opreg-server", "--listen-addr", "[::1]:50051"]);
        assert_eq!(loopback.validate(), Ok(()));
    }

    #[test]
    fn inconsistent_bounds_are_refused() {
        let mut config = Config::defaults();
        config.limits.lease_ttl_min = Duration::from_secs(60);
        assert!(config.validate().is_err());
        let mut config = Config::defaults();
        config.lifecycle.retry_initial_backoff = Duration::from_secs(600);
        assert!(config.validate().is_err());
    }

    #[test]
    fn each_kind_of_writer_leaves_room_in_the_pool() {
        let small = Config::parse_from(["opreg-server", "--pool-max-connections", "5"]);
        assert_eq!(small.validate(), Ok(()));
        let too_small = Config::parse_from(["opreg-server", "--pool-max-connections", "4"]);
        assert_eq!(
            too_small.validate(),
            Err(ConfigError::Database(DatabaseError::Writers))
        );
        let mut none = Config::defaults();
        none.database.complete_writers = 0;
        assert!(none.validate().is_err());
    }

    #[test]
    fn transaction_pooling_needs_a_session_url() {
        let pooled = Config::parse_from([
            "opreg-server",
            "--database-url=postgres://opreg@pgbouncer:6432/opreg",
            "--database-pooler=transaction",
        ]);
        assert!(
            pooled
                .validate()
                .unwrap_err()
                .to_string()
                .contains("OPREG_SESSION_DATABASE_URL")
        );
        let with_session = Config::parse_from([
            "opreg-server",
            "--database-url=postgres://opreg@pgbouncer:6432/opreg",
            "--database-pooler=transaction",
            "--session-database-url=postgres://opreg@db:5432/opreg",
        ]);
        assert_eq!(with_session.validate(), Ok(()));
        assert_eq!(
            with_session.database.pool_settings().pooler,
            Pooler::Transaction
        );
        let unparsable = Config::parse_from([
            "opreg-server",
            "--database-url=postgres://opreg@db/opreg",
            "--session-database-url=nonsense",
        ]);
        assert!(
            unparsable
                .validate()
                .unwrap_err()
                .to_string()
                .contains("not a valid")
        );
        assert!(Config::try_parse_from(["opreg-server", "--database-pooler=statement"]).is_err());
    }
}
