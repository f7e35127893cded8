//! The operator console on the HTTP port (server/src/console).

use std::collections::HashSet;
use std::time::Duration;

use clap::Args;

/// The operator console.
#[derive(Clone, Debug, Args)]
pub struct Console {
    /// Serve the operator console at /console/ on the HTTP port (OPREG_METRICS_ADDR).
    /// Sign-in is by an API key of the policy; with no policy, loopback peers only.
    #[arg(long, env = "OPREG_CONSOLE", default_value_t = true, action = clap::ArgAction::Set)]
    pub console: bool,

    /// Namespaces whose parameters and results the console does not show, comma-separated.
    #[arg(long, env = "OPREG_CONSOLE_HIDDEN_PAYLOADS", value_delimiter = ',')]
    pub console_hidden_payloads: Vec<String>,

    /// Operations per second one bulk job of the console acts on.
    #[arg(long, env = "OPREG_CONSOLE_BULK_RATE", default_value_t = 50)]
    pub console_bulk_rate: u32,

    /// How long a console sign-in lasts.
    #[arg(long, env = "OPREG_CONSOLE_SESSION_TTL", default_value = "8h", value_parser = humantime::parse_duration)]
    pub console_session_ttl: Duration,
}

/// A console setting that cannot stand.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConsoleSettingsError {
    #[error("OPREG_CONSOLE_BULK_RATE must be between 1 and 10000 operations per second")]
    BulkRate,
    #[error("OPREG_CONSOLE_SESSION_TTL must be between 1 minute and 7 days")]
    SessionTtl,
}

/// What the console needs of its settings.
#[derive(Clone, Debug)]
pub struct ConsoleSettings {
    pub hidden_payloads: HashSet<String>,
    pub bulk_rate: u32,
    pub session_ttl: Duration,
}

impl Console {
    pub fn validate(&self) -> Result<(), ConsoleSettingsError> {
        if !(1..=10_000).contains(&self.console_bulk_rate) {
            return Err(ConsoleSettingsError::BulkRate);
        }
        let ttl = Duration::from_secs(60)..=Duration::from_secs(7 * 24 * 3600);
        if !ttl.contains(&self.console_session_ttl) {
            return Err(ConsoleSettingsError::SessionTtl);
        }
        Ok(())
    }

    /// The console's settings, or `None` when it is turned off.
    pub fn settings(&self) -> Option<ConsoleSettings> {
        self.console.then(|| ConsoleSettings {
            hidden_payloads: self
                .console_hidden_payloads
                .iter()
                .map(|namespace| namespace.trim().to_owned())
                .filter(|namespace| !namespace.is_empty())
                .collect(),
            bulk_rate: self.console_bulk_rate,
            session_ttl: self.console_session_ttl,
        })
    }
}
