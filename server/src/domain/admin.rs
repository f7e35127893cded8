//! What an operator may do to an operation, decided from its stored state at
//! database time: the manual queue's transitions, free of SQL.

use std::fmt;

use chrono::{DateTime, Utc};

use super::error::RegistryError;
use super::ids::FencingToken;
use super::operation::{Operation, Status};

/// An operator action. Stored as lowercase text in the audit trail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdminAction {
    Resolve,
    Requeue,
    Hold,
    Release,
    /// Not an operator's: a Claim whose reuse policy allowed it started a
    /// FAILED or DEAD operation again; recorded here so the trail shows every
    /// change to a finished operation.
    Reuse,
    /// Not an operator's call either: `opreg-server restore` made an
    /// unfinished operation UNKNOWN after the database was restored.
    Restore,
}

impl AdminAction {
    pub fn as_str(self) -> &'static str {
        match self {
            AdminAction::Resolve => "resolve",
            AdminAction::Requeue => "requeue",
            AdminAction::Hold => "hold",
            AdminAction::Release => "release",
            AdminAction::Reuse => "reuse",
            AdminAction::Restore => "restore",
        }
    }
}

impl TryFrom<String> for AdminAction {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        [
            AdminAction::Resolve,
            AdminAction::Requeue,
            AdminAction::Hold,
            AdminAction::Release,
            AdminAction::Reuse,
            AdminAction::Restore,
        ]
        .into_iter()
        .find(|action| action.as_str() == value)
        .ok_or_else(|| format!("unknown AdminAction {value:?}"))
    }
}

impl fmt::Display for AdminAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who acted and why, as the audit row records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Actor {
    pub operator: String,
    pub reason: String,
    /// The authenticated caller; empty until identities exist.
    pub principal: String,
}

/// One operator action, as the audit trail keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    pub action: AdminAction,
    pub operator: String,
    pub reason: String,
    pub revision: String,
    pub principal: String,
    pub status_before: Status,
    pub status_after: Status,
    pub held_before: bool,
    pub held_after: bool,
    pub token_before: FencingToken,
    pub token_after: FencingToken,
    pub at: DateTime<Utc>,
}

/// The real outcome an operator found in the remote system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    Success { result: Vec<u8>, result_ref: String },
    Failure { code: String, message: String },
}

impl Resolution {
    pub fn status(&self) -> Status {
        match self {
            Resolution::Success { .. } => Status::Succeeded,
            Resolution::Failure { .. } => Status::Failed,
        }
    }
}

/// How a hold treats the operation's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    /// A live lease is revoked: its token superseded, its execution ended,
    /// and the outcome unknown once the hold is released.
    pub revoke_live_lease: bool,
}

/// What an operator saw before acting: the action applies only while the
/// operation still looks so, checked under its row lock. The console's
/// confirmation page sees one operation (its status, hold and token); a bulk
/// job sees what its filter matched (statuses, held, lease owner). The API's
/// actions see nothing ([`Seen::default`]) and decide by the rules alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// One of these statuses; empty: any.
    pub statuses: Vec<Status>,
    pub held: Option<bool>,
    pub token: Option<FencingToken>,
    pub lease_owner: Option<String>,
}

impl Seen {
    /// A refusal, as the status would refuse the action, unless the
    /// operation still looks as seen.
    pub fn check(&self, operation: &Operation) -> Result<(), RegistryError> {
        let still = (self.statuses.is_empty() || self.statuses.contains(&operation.status))
            && self.held.is_none_or(|held| held == operation.is_held())
            && self
                .token
                .is_none_or(|token| token == operation.fencing_token)
            && self
                .lease_owner
                .as_ref()
                .is_none_or(|owner| operation.lease_owner.as_ref() == Some(owner));
        if still {
            Ok(())
        } else {
            Err(refuse(operation))
        }
    }
}

fn refuse(operation: &Operation) -> RegistryError {
    RegistryError::InvalidTransition {
        current: operation.status,
        held: operation.is_held(),
    }
}

/// Only an outcome that may have happened can be resolved: an unknown one
/// (reported, being reconciled, or left by a hold that revoked a live lease)
/// or a dead one.
pub fn resolve(operation: &Operation) -> Result<(), RegistryError> {
    let unknown = operation.status == Status::Unknown
        || operation.reconciling
        || operation.hold_revoked_lease;
    if unknown || operation.status == Status::Dead {
        Ok(())
    } else {
        Err(refuse(operation))
    }
}

/// Only a DEAD operation, not under investigation, can be requeued.
pub fn requeue(operation: &Operation) -> Result<(), RegistryError> {
    if operation.status == Status::Dead && !operation.is_held() {
        Ok(())
    } else {
        Err(refuse(operation))
    }
}

/// Any unfinished operation not held yet can be held.
pub fn hold(operation: &Operation, now: DateTime<Utc>) -> Result<Hold, RegistryError> {
    match operation.status {
        _ if operation.is_held() => Err(refuse(operation)),
        Status::Succeeded | Status::Failed => Err(refuse(operation)),
        Status::InProgress | Status::RetryScheduled | Status::Unknown | Status::Dead => Ok(Hold {
            revoke_live_lease: operation.lease_live_at(now),
        }),
    }
}

/// Only a held operation can be released. The status it returns to.
pub fn release(operation: &Operation) -> Result<Status, RegistryError> {
    if !operation.is_held() {
        return Err(refuse(operation));
    }
    Ok(if operation.hold_revoked_lease {
        Status::Unknown
    } else {
        operation.status
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::claim::tests::operation;
    use chrono::TimeDelta;

    #[test]
    fn finished_operations_refuse_every_action_but_none_is_silent() {
        let now = Utc::now();
        for status in [Status::Succeeded, Status::Failed] {
            let op = operation(status, now);
            assert!(
                matches!(resolve(&op), Err(RegistryError::InvalidTransition { current, held: false }) if current == status)
            );
            assert!(requeue(&op).is_err());
            assert!(hold(&op, now).is_err());
            assert!(release(&op).is_err());
        }
    }

    #[test]
    fn an_action_applies_only_to_what_was_seen() {
        let now = Utc::now();
        let op = operation(Status::InProgress, now);
        assert_eq!(Seen::default().check(&op), Ok(()), "the API sees nothing");
        let seen = Seen {
            statuses: vec![Status::InProgress, Status::Dead],
            held: Some(false),
            token: Some(op.fencing_token),
            lease_owner: op.lease_owner.clone(),
        };
        assert_eq!(seen.check(&op), Ok(()));
        let mut moved = op.clone();
        moved.status = Status::Unknown;
        assert!(seen.check(&moved).is_err(), "another status");
        let mut held = op.clone();
        held.held_at = Some(now);
        assert!(seen.check(&held).is_err(), "held since");
        let mut taken = op.clone();
        taken.fencing_token = FencingToken::from_stored(op.fencing_token.as_i64() + 1);
        assert!(seen.check(&taken).is_err(), "a newer lease");
        let mut other = op.clone();
        other.lease_owner = Some("someone-else".into());
        assert!(seen.check(&other).is_err(), "another owner");
    }

    #[test]
    fn a_hold_revokes_only_a_live_lease() {
        let now = Utc::now();
        let mut op = operation(Status::InProgress, now);
        assert_eq!(
            hold(&op, now),
            Ok(Hold {
                revoke_live_lease: true
            })
        );
        op.lease_expires_at = Some(now - TimeDelta::seconds(1));
        assert_eq!(
            hold(&op, now),
            Ok(Hold {
                revoke_live_lease: false
            })
        );
        let dead = operation(Status::Dead, now);
        assert_eq!(
            hold(&dead, now),
            Ok(Hold {
                revoke_live_lease: false
            })
        );
    }

    #[test]
    fn release_after_a_revoked_lease_is_unknown_otherwise_unchanged() {
        let now = Utc::now();
        let mut op = operation(Status::InProgress, now);
        assert!(release(&op).is_err());
        op.held_at = Some(now);
        assert_eq!(release(&op), Ok(Status::InProgress));
        op.hold_revoked_lease = true;
        assert_eq!(release(&op), Ok(Status::Unknown));
        assert!(hold(&op, now).is_err(), "already held");
        assert_eq!(
            resolve(&op),
            Ok(()),
            "a revoked lease leaves an unknown outcome"
        );
    }

    #[test]
    fn resolve_takes_unknown_reconciling_and_dead_requeue_only_dead() {
        let now = Utc::now();
        assert!(resolve(&operation(Status::Unknown, now)).is_ok());
        assert!(resolve(&operation(Status::Dead, now)).is_ok());
        assert!(resolve(&operation(Status::InProgress, now)).is_err());
        assert!(resolve(&operation(Status::RetryScheduled, now)).is_err());
        let mut reconciling = operation(Status::InProgress, now);
        reconciling.reconciling = true;
        assert!(resolve(&reconciling).is_ok());
        assert!(requeue(&operation(Status::Dead, now)).is_ok());
        assert!(requeue(&operation(Status::Unknown, now)).is_err());
        let mut held_dead = operation(Status::Dead, now);
        held_dead.held_at = Some(now);
        assert!(requeue(&held_dead).is_err());
    }
}
