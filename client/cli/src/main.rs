//! `opreg`: inspect and drive an opreg server from a shell, in the style of etcdctl.

mod render;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use opreg_client::proto as pb;
use opreg_client::{Client, ConnectOptions, Error};

use render::Output;

/// Inspect and drive an opreg operation registry.
///
/// opreg makes repeated executions of one business operation converge to one
/// result. An operation is named by a namespace and a stable business key
/// (e.g. settlement:A:W:V); each execution holds a lease with a fencing token.
///
/// Exit codes: 0 success, 1 other error, 2 invalid usage or input, 3 not found, 4 conflict
/// (different parameters, a different outcome already recorded, a refused
/// compensation, or an operator action the status does not allow), 5 stale
/// fencing token or lease held by another owner,
/// 6 unavailable (server or database; retry later), 7 not authenticated or not
/// permitted by the server's policy.
#[derive(Debug, Parser)]
#[command(name = "opreg", version, about, long_about)]
struct Cli {
    /// Server address.
    #[arg(
        long,
        global = true,
        env = "OPREG_ENDPOINT",
        default_value = "http://127.0.0.1:50051"
    )]
    endpoint: String,

    /// PEM CA certificates that sign the server's certificate (for https:// endpoints).
    #[arg(long, global = true, env = "OPREG_CA_CERT")]
    ca_cert: Option<std::path::PathBuf>,

    /// PEM client certificate, for servers that require mutual TLS.
    #[arg(
        long,
        global = true,
        env = "OPREG_CLIENT_CERT",
        requires = "client_key"
    )]
    client_cert: Option<std::path::PathBuf>,

    /// The PEM private key of --client-cert.
    #[arg(
        long,
        global = true,
        env = "OPREG_CLIENT_KEY",
        requires = "client_cert"
    )]
    client_key: Option<std::path::PathBuf>,

    /// API key, sent as `authorization: Bearer <key>`. Set it in the
    /// environment: a flag shows in `ps`.
    #[arg(long, global = true, env = "OPREG_API_KEY", hide_env_values = true)]
    api_key: Option<String>,

    /// Namespace of the operations and resources.
    #[arg(
        long,
        short,
        global = true,
        env = "OPREG_NAMESPACE",
        default_value = "default"
    )]
    namespace: String,

    /// Output format.
    #[arg(long, short, global = true, value_enum, default_value_t = Format::Table)]
    output: Format,

    /// Deadline of the call.
    #[arg(long, global = true, default_value = "10s", value_parser = humantime_duration)]
    timeout: Duration,

    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    Json,
    Table,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show an operation: status, result, lease, and optionally every execution.
    ///
    /// Answers "did my timed-out call commit?": SUCCEEDED with a result means
    /// it did; the executions list each attempt, takeover and reconciliation.
    Lookup {
        key: String,
        /// Include the execution history.
        #[arg(long)]
        executions: bool,
        /// Include the operator actions taken on it.
        #[arg(long)]
        audit: bool,
        /// Include the stored parameters (when they were given as JSON).
        #[arg(long)]
        parameters: bool,
        /// Wait up to this long for the status to change (from the one it has
        /// now, or from --changed-from); --timeout is extended by it.
        #[arg(long, value_parser = humantime_duration)]
        wait: Option<Duration>,
        /// With --wait: the status you know, e.g. IN_PROGRESS.
        #[arg(long, requires = "wait", value_parser = operation_status)]
        changed_from: Option<pb::OperationStatus>,
    },
    /// Register an operation, or learn what to do about an existing one.
    ///
    /// Outcomes:
    ///   ACQUIRED     execute now; you hold the lease and its fencing token.
    ///   REPLAYED     a result (or business failure) is recorded: use it, do not execute.
    ///   IN_PROGRESS  another owner holds a live lease; try again after retry_after.
    ///   RETRY_LATER  a retry is scheduled but not due; try again after retry_after.
    ///   RECONCILE    the last outcome is unknown: check the remote system before
    ///                executing, then complete with what you found.
    ///   DEAD         the retry budget is exhausted; a human must decide.
    ///   HELD         an operator froze it while investigating; wait or ask them.
    /// The same key with different parameters fails with a conflict (exit 4).
    /// With --wait the server holds the call while the answer would be
    /// IN_PROGRESS or RETRY_LATER, and answers as soon as the operation moves.
    #[command(verbatim_doc_comment)]
    Claim(ClaimArgs),
    /// Record the outcome of the execution holding a fencing token.
    ///
    /// Repeating the same Complete returns the same answer; a different
    /// outcome for the same token is refused (exit 4); a superseded token is
    /// refused (exit 5).
    Complete {
        key: String,
        /// The fencing token of the lease.
        #[arg(long)]
        token: u64,
        #[command(subcommand)]
        outcome: CompleteOutcome,
    },
    /// Extend a lease. Fails (exit 5) once another execution took over: stop writing.
    Renew {
        key: String,
        #[arg(long)]
        owner: String,
        #[arg(long)]
        token: u64,
        /// New lease length from now.
        #[arg(long, value_parser = humantime_duration)]
        lease_ttl: Option<Duration>,
    },
    /// Read or write a resource protected by fencing tokens.
    Resource {
        #[command(subcommand)]
        command: ResourceCommand,
    },
    /// Pull due work as a worker would: retries whose time came, expired
    /// leases (ACQUIRED) and unknown outcomes (RECONCILE), now leased to --owner.
    Due {
        #[arg(long)]
        owner: String,
        /// Most operations to take, 1 to 1000.
        #[arg(long, default_value_t = 10)]
        limit: u32,
        #[arg(long, value_parser = humantime_duration)]
        lease_ttl: Option<Duration>,
    },
    /// The manual queue: unfinished operations, oldest registration first.
    List(ListArgs),
    /// Record the real outcome of an UNKNOWN, reconciling or DEAD operation,
    /// after checking the remote system. Any live lease is revoked.
    Resolve {
        key: String,
        #[command(flatten)]
        actor: ActorArgs,
        #[command(subcommand)]
        outcome: ResolveOutcome,
    },
    /// Give a DEAD operation a fresh retry budget, due now, under the same key
    /// and parameters (changed parameters need a new key).
    Requeue {
        key: String,
        #[command(flatten)]
        actor: ActorArgs,
        /// What changed outside opreg, e.g. "account unblocked".
        #[arg(long, default_value = "")]
        revision: String,
        /// Attempts of the fresh budget (server defaults otherwise).
        #[arg(long)]
        max_attempts: Option<u32>,
    },
    /// Freeze an operation while it is investigated: Claim answers HELD, due
    /// work skips it, and a live lease is revoked.
    Hold {
        key: String,
        #[command(flatten)]
        actor: ActorArgs,
    },
    /// End a hold. If it revoked a live lease the outcome is UNKNOWN now.
    Release {
        key: String,
        #[command(flatten)]
        actor: ActorArgs,
    },
}

#[derive(Debug, Args)]
struct ActorArgs {
    /// Who acts (recorded in the audit trail).
    #[arg(long, env = "OPREG_OPERATOR")]
    operator: String,
    /// Why (recorded in the audit trail).
    #[arg(long)]
    reason: String,
}

#[derive(Debug, Args)]
struct ListArgs {
    /// Only these statuses (repeatable): in-progress, retry-scheduled, unknown, dead.
    #[arg(long = "status", value_enum)]
    statuses: Vec<QueueStatus>,
    /// Only IN_PROGRESS operations whose lease expired.
    #[arg(long)]
    expired_leases: bool,
    /// Only held operations.
    #[arg(long)]
    held: bool,
    /// Only operations not updated for this long.
    #[arg(long, value_parser = humantime_duration)]
    older_than: Option<Duration>,
    /// Operations per page, 1 to 1000.
    #[arg(long, default_value_t = 100)]
    page_size: u32,
    /// Continue after a previous page (its next_page_token).
    #[arg(long, default_value = "")]
    page_token: String,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum QueueStatus {
    InProgress,
    RetryScheduled,
    Unknown,
    Dead,
}

impl From<QueueStatus> for pb::OperationStatus {
    fn from(status: QueueStatus) -> Self {
        match status {
            QueueStatus::InProgress => pb::OperationStatus::InProgress,
            QueueStatus::RetryScheduled => pb::OperationStatus::RetryScheduled,
            QueueStatus::Unknown => pb::OperationStatus::Unknown,
            QueueStatus::Dead => pb::OperationStatus::Dead,
        }
    }
}

#[derive(Debug, Subcommand)]
enum ResolveOutcome {
    /// It took effect, with this result.
    Success(SuccessArgs),
    /// It was refused for a business reason.
    Failure(FailureArgs),
}

/// A success, as Complete and ResolveOperation record it.
#[derive(Debug, Args)]
struct SuccessArgs {
    /// The result, as text.
    #[arg(long, default_value = "")]
    result: String,
    /// A reference to the result (ledger entry, file, ...).
    #[arg(long, default_value = "")]
    result_ref: String,
}

impl From<&SuccessArgs> for pb::Success {
    fn from(success: &SuccessArgs) -> Self {
        Self {
            result: success.result.clone().into_bytes(),
            result_ref: success.result_ref.clone(),
        }
    }
}

/// A business failure, as Complete and ResolveOperation record it.
#[derive(Debug, Args)]
struct FailureArgs {
    code: String,
    #[arg(long, default_value = "")]
    message: String,
}

impl From<&FailureArgs> for pb::Failure {
    fn from(failure: &FailureArgs) -> Self {
        Self {
            code: failure.code.clone(),
            message: failure.message.clone(),
        }
    }
}

impl Command {
    /// How long the call may wait on the server, beyond its --timeout.
    fn wait(&self) -> Duration {
        match self {
            Command::Claim(ClaimArgs { wait, .. }) | Command::Lookup { wait, .. } => {
                wait.unwrap_or_default()
            }
            _ => Duration::ZERO,
        }
    }
}

#[derive(Debug, Args)]
struct ClaimArgs {
    /// The operation's stable business key, e.g. settlement:A:W:V.
    key: String,
    /// Names this process; a live holder that claims again resumes its lease.
    #[arg(long)]
    owner: String,
    /// Parameters as a JSON object, canonicalised and hashed by the server.
    #[arg(long, conflicts_with = "digest")]
    params: Option<String>,
    /// A parameters digest you computed, in hex (16 to 64 bytes).
    #[arg(long)]
    digest: Option<String>,
    /// The scheduler's run id, recorded in the history.
    #[arg(long, default_value = "")]
    execution_id: String,
    #[arg(long, value_parser = humantime_duration)]
    lease_ttl: Option<Duration>,
    /// Key of the succeeded operation this one compensates.
    #[arg(long, default_value = "")]
    compensates: String,
    /// Wait up to this long for an answer you can act on instead of
    /// IN_PROGRESS or RETRY_LATER; --timeout is extended by it.
    #[arg(long, value_parser = humantime_duration)]
    wait: Option<Duration>,
    /// What an existing key allows: replay (the default), after-failure (a
    /// FAILED or DEAD operation runs again) or reject-existing (exit 4 when
    /// the key exists).
    #[arg(long, value_enum, default_value_t = Reuse::Replay)]
    reuse: Reuse,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Reuse {
    Replay,
    AfterFailure,
    RejectExisting,
}

impl From<Reuse> for pb::ReusePolicy {
    fn from(reuse: Reuse) -> Self {
        match reuse {
            Reuse::Replay => pb::ReusePolicy::Replay,
            Reuse::AfterFailure => pb::ReusePolicy::AfterFailure,
            Reuse::RejectExisting => pb::ReusePolicy::RejectExisting,
        }
    }
}

/// A status by its name, with or without the `OPERATION_STATUS_` prefix.
fn operation_status(text: &str) -> Result<pb::OperationStatus, String> {
    let name = text.to_ascii_uppercase();
    let name = name.strip_prefix("OPERATION_STATUS_").unwrap_or(&name);
    pb::OperationStatus::from_str_name(&format!("OPERATION_STATUS_{name}"))
        .filter(|status| *status != pb::OperationStatus::Unspecified)
        .ok_or_else(|| format!("{text:?} is not an operation status"))
}

#[derive(Debug, Subcommand)]
enum CompleteOutcome {
    /// The operation took effect.
    Success(SuccessArgs),
    /// A terminal business failure (e.g. insufficient balance), replayed like a success.
    Failure(FailureArgs),
    /// Worth another attempt: scheduled with backoff inside the retry budget.
    Retryable {
        error_class: String,
        #[arg(long, default_value = "")]
        message: String,
        /// Not before this long (downstream pushback).
        #[arg(long, value_parser = humantime_duration)]
        retry_after: Option<Duration>,
    },
    /// The call may or may not have taken effect; it will be reconciled first.
    Unknown {
        remote_ref: String,
        #[arg(long, default_value = "")]
        message: String,
    },
}

#[derive(Debug, Subcommand)]
enum ResourceCommand {
    /// Show a resource's value, fence, version and last writer.
    Get { resource: String },
    /// Write a resource under an operation's current fencing token.
    Write {
        resource: String,
        /// The operation whose lease authorises the write.
        #[arg(long)]
        key: String,
        #[arg(long)]
        token: u64,
        #[arg(long)]
        value: String,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let output = Output::new(matches!(cli.output, Format::Json));
    let options = match connect_options(&cli) {
        Ok(options) => options,
        Err(problem) => {
            eprintln!("opreg: {problem}");
            return ExitCode::from(2);
        }
    };
    let client = match Client::connect_lazy_with(cli.endpoint.clone(), &options) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("opreg: invalid endpoint {}: {error}", cli.endpoint);
            return ExitCode::from(2);
        }
    };
    let within = cli.timeout + cli.command.wait();
    let called = tokio::time::timeout(within, run(&cli, &client, &output)).await;
    match called {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(error)) => {
            eprintln!("opreg: {error}");
            ExitCode::from(exit_code(&error))
        }
        Err(_) => {
            eprintln!("opreg: no answer within {within:?}");
            ExitCode::from(6)
        }
    }
}

/// Hold and Release send the same fields and answer alike: the operation
/// after the action and its audit row.
macro_rules! hold_or_release {
    ($client:expr, $output:expr, $method:ident($request:ident), $namespace:expr, $key:expr, $actor:expr) => {{
        let done = $client
            .admin()
            .$method(pb::$request {
                namespace: $namespace,
                operation_key: $key.clone(),
                operator: $actor.operator.clone(),
                reason: $actor.reason.clone(),
            })
            .await?;
        $output.action(done.operation.as_ref(), done.audit.as_ref());
    }};
}

async fn run(cli: &Cli, client: &Client, output: &Output) -> Result<(), Error> {
    let namespace = cli.namespace.clone();
    match &cli.command {
        Command::Lookup {
            key,
            executions,
            audit,
            parameters,
            wait,
            changed_from,
        } => {
            let found = client
                .lookup(pb::LookupRequest {
                    namespace,
                    operation_key: key.clone(),
                    include_executions: *executions,
                    include_parameters: *parameters,
                    include_audit: *audit,
                    wait: wait.map(proto_duration),
                    changed_from: changed_from.unwrap_or_default().into(),
                })
                .await?;
            output.lookup(&found);
        }
        Command::Claim(args) => {
            let claimed = client.claim(claim_request(namespace, args)?).await?;
            output.claim(&claimed);
        }
        Command::Complete {
            key,
            token,
            outcome,
        } => {
            let completed = client
                .complete(pb::CompleteRequest {
                    namespace,
                    operation_key: key.clone(),
                    fencing_token: *token,
                    outcome: Some(complete_outcome(outcome)),
                })
                .await?;
            output.operation(&completed.operation.unwrap_or_default());
        }
        Command::Renew {
            key,
            owner,
            token,
            lease_ttl,
        } => {
            let renewed = client
                .renew(pb::RenewRequest {
                    namespace,
                    operation_key: key.clone(),
                    owner: owner.clone(),
                    fencing_token: *token,
                    lease_ttl: lease_ttl.map(proto_duration),
                })
                .await?;
            output.lease(&renewed.lease.unwrap_or_default());
        }
        Command::Resource {
            command: ResourceCommand::Get { resource },
        } => {
            let found = client
                .get_resource(pb::GetResourceRequest {
                    namespace,
                    resource: resource.clone(),
                })
                .await?;
            output.resource(&found);
        }
        Command::Resource {
            command:
                ResourceCommand::Write {
                    resource,
                    key,
                    token,
                    value,
                },
        } => {
            let written = client
                .fenced_write(pb::FencedWriteRequest {
                    namespace,
                    resource: resource.clone(),
                    operation_key: key.clone(),
                    fencing_token: *token,
                    value: value.clone().into_bytes(),
                })
                .await?;
            output.written(&written);
        }
        Command::Due {
            owner,
            limit,
            lease_ttl,
        } => {
            let handed = client
                .claim_due(pb::ClaimDueRequest {
                    namespace,
                    owner: owner.clone(),
                    execution_id: String::new(),
                    lease_ttl: lease_ttl.map(proto_duration),
                    limit: *limit,
                })
                .await?;
            output.due(&handed);
        }
        Command::List(args) => {
            let page = client
                .admin()
                .list_operations(pb::ListOperationsRequest {
                    namespace,
                    statuses: args
                        .statuses
                        .iter()
                        .map(|status| pb::OperationStatus::from(*status).into())
                        .collect(),
                    expired_leases_only: args.expired_leases,
                    older_than: args.older_than.map(proto_duration),
                    held_only: args.held,
                    page_size: args.page_size,
                    page_token: args.page_token.clone(),
                })
                .await?;
            output.queue(&page);
        }
        Command::Resolve {
            key,
            actor,
            outcome,
        } => {
            let outcome = match outcome {
                ResolveOutcome::Success(success) => {
                    pb::resolve_operation_request::Outcome::Success(success.into())
                }
                ResolveOutcome::Failure(failure) => {
                    pb::resolve_operation_request::Outcome::Failure(failure.into())
                }
            };
            let done = client
                .admin()
                .resolve(pb::ResolveOperationRequest {
                    namespace,
                    operation_key: key.clone(),
                    operator: actor.operator.clone(),
                    reason: actor.reason.clone(),
                    outcome: Some(outcome),
                })
                .await?;
            output.action(done.operation.as_ref(), done.audit.as_ref());
        }
        Command::Requeue {
            key,
            actor,
            revision,
            max_attempts,
        } => {
            let done = client
                .admin()
                .requeue(pb::RequeueOperationRequest {
                    namespace,
                    operation_key: key.clone(),
                    operator: actor.operator.clone(),
                    reason: actor.reason.clone(),
                    revision: revision.clone(),
                    retry_policy: max_attempts.map(retry_policy),
                })
                .await?;
            output.action(done.operation.as_ref(), done.audit.as_ref());
        }
        Command::Hold { key, actor } => {
            hold_or_release!(
                client,
                output,
                hold(HoldOperationRequest),
                namespace,
                key,
                actor
            );
        }
        Command::Release { key, actor } => {
            hold_or_release!(
                client,
                output,
                release(ReleaseOperationRequest),
                namespace,
                key,
                actor
            );
        }
    }
    Ok(())
}

/// A fresh budget of `max_attempts` with the server's default backoffs and
/// deadline (1 s, 5 m, 24 h): the contract asks for all four fields.
fn retry_policy(max_attempts: u32) -> pb::RetryPolicy {
    pb::RetryPolicy {
        max_attempts,
        initial_backoff: Some(proto_duration(Duration::from_secs(1))),
        max_backoff: Some(proto_duration(Duration::from_secs(300))),
        deadline: Some(proto_duration(Duration::from_secs(86_400))),
    }
}

fn claim_request(namespace: String, args: &ClaimArgs) -> Result<pb::ClaimRequest, Error> {
    use pb::claim_request::Fingerprint;
    let invalid = |field: &str, why: String| Error::InvalidArgument {
        violations: vec![(field.to_owned(), why)],
    };
    let fingerprint = match (&args.params, &args.digest) {
        (_, Some(digest)) => Fingerprint::ParametersDigest(
            hex::decode(digest).map_err(|error| invalid("--digest", error.to_string()))?,
        ),
        (Some(params), None) => {
            let json: serde_json::Value = serde_json::from_str(params)
                .map_err(|error| invalid("--params", error.to_string()))?;
            if !json.is_object() {
                return Err(invalid("--params", "must be a JSON object".into()));
            }
            Fingerprint::Parameters(opreg_client::parameters(json))
        }
        (None, None) => Fingerprint::Parameters(prost_types::Struct::default()),
    };
    Ok(pb::ClaimRequest {
        namespace,
        operation_key: args.key.clone(),
        fingerprint: Some(fingerprint),
        owner: args.owner.clone(),
        execution_id: args.execution_id.clone(),
        lease_ttl: args.lease_ttl.map(proto_duration),
        retry_policy: None,
        compensates: args.compensates.clone(),
        wait: args.wait.map(proto_duration),
        reuse: pb::ReusePolicy::from(args.reuse).into(),
    })
}

fn complete_outcome(outcome: &CompleteOutcome) -> pb::complete_request::Outcome {
    use pb::complete_request::Outcome;
    match outcome {
        CompleteOutcome::Success(success) => Outcome::Success(success.into()),
        CompleteOutcome::Failure(failure) => Outcome::Failure(failure.into()),
        CompleteOutcome::Retryable {
            error_class,
            message,
            retry_after,
        } => Outcome::Retryable(pb::RetryableError {
            error_class: error_class.clone(),
            message: message.clone(),
            retry_after: retry_after.map(proto_duration),
        }),
        CompleteOutcome::Unknown {
            remote_ref,
            message,
        } => Outcome::Unknown(pb::UnknownOutcome {
            remote_ref: remote_ref.clone(),
            message: message.clone(),
        }),
    }
}

/// Exit codes scripts can branch on; see `opreg --help`.
/// The TLS files and the API key, read and checked before any call.
fn connect_options(cli: &Cli) -> Result<ConnectOptions, String> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|error| format!("cannot read {}: {error}", path.display()))
    };
    let mut options = ConnectOptions::default();
    if let Some(path) = &cli.ca_cert {
        options = options.ca_certificate(read(path)?);
    }
    if let (Some(certificate), Some(key)) = (&cli.client_cert, &cli.client_key) {
        options = options.client_identity(read(certificate)?, read(key)?);
    }
    if let Some(key) = &cli.api_key {
        options = options
            .api_key(key)
            .map_err(|_| "the API key holds characters a header cannot carry".to_owned())?;
    }
    Ok(options)
}

fn exit_code(error: &Error) -> u8 {
    match error {
        Error::NotFound { .. } => 3,
        Error::ParameterConflict { .. }
        | Error::OperationExists { .. }
        | Error::AlreadyCompleted
        | Error::Compensation { .. }
        | Error::InvalidTransition { .. } => 4,
        Error::StaleFencingToken { .. } | Error::LeaseNotHeld => 5,
        Error::Unavailable { .. } | Error::RateLimited { .. } | Error::TooManyWaiters { .. } => 6,
        Error::InvalidArgument { .. } | Error::MessageTooLarge { .. } => 2,
        Error::Unauthenticated { .. } | Error::PermissionDenied { .. } => 7,
        Error::Other(_) => 1,
    }
}

fn humantime_duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).ok_or_else(|| format!("{text:?} is not a duration like 500ms, 30s or 5m"))
}

/// Durations as `<number><unit>` with unit ms, s, m or h.
fn parse_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit {
        "ms" => number / 1_000.0,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3_600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

fn proto_duration(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(duration.subsec_nanos()).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1_500)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("5d"), None);
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
