//! The checker: the recorded history and the final database against the
//! guarantees. Each violation names its property and the calls involved.
//! Times are the clients' monotonic clock; "before" means one call's answer
//! arrived before the other call was sent (real-time order), so a call in
//! flight during another is never held against it.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use super::history::{AdminAction, Answer, Call, Event, Report, resolved_result};

/// What the database holds at the end.
#[derive(Debug, Default)]
pub struct Final {
    /// key → (status, result, failure code).
    pub operations: HashMap<String, (String, Vec<u8>, Option<String>)>,
    /// key → its executions in token order: (token, kind, outcome).
    pub executions: HashMap<String, Vec<(u64, String, String)>>,
    /// resource → (fence, value).
    pub resources: HashMap<String, (u64, Vec<u8>)>,
    /// Keys left IN_PROGRESS with a long-expired lease or RETRY_SCHEDULED long overdue.
    pub stranded: Vec<(String, String)>,
    /// Every compensation and what its original was when it registered.
    pub compensations: Vec<Compensation>,
}

/// A compensation, as the database has it at the end.
#[derive(Debug, Default)]
pub struct Compensation {
    pub key: String,
    pub original: String,
    pub original_status: String,
    /// The original had settled (its completion time) before the compensation registered.
    pub original_settled_before: bool,
    /// Executions of the original started after the compensation registered.
    pub original_executions_after: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub property: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.property, self.detail)
    }
}

pub const ONE_HOLDER: &str = "1 one holder: a token accepted only while no higher one was issued";
pub const TOKENS: &str = "2 tokens unique and increasing";
pub const FENCING: &str = "3 no superseded fenced write; final value from the highest token";
pub const REPLAYS: &str = "4 replayed answers equal the recorded outcome";
pub const DURABLE: &str = "5 no acknowledged Complete lost or changed";
pub const UNKNOWN: &str =
    "6 an unknown outcome is reconciled before any re-execution, and never compensated";
pub const SETTLED: &str = "7 every operation ends in an allowed state, none stranded";

fn at(time: Duration) -> String {
    format!("{:.3}s", time.as_secs_f64())
}

pub fn check(events: &[Event], end: &Final) -> Vec<Violation> {
    let mut violations = Vec::new();
    one_holder(events, &mut violations);
    tokens(events, &mut violations);
    fencing(events, end, &mut violations);
    replays_and_durability(events, end, &mut violations);
    unknown_outcomes(end, &mut violations);
    compensations(end, &mut violations);
    settled(end, &mut violations);
    violations
}

/// Every lease handed out: (key, token, when it may have been issued, the
/// time its answer arrived). A Claim's lease may have been issued by an earlier
/// Claim of the same key by the same client whose answer was lost: a repeated
/// Claim by the live holder resumes that lease. So a grant counts as sent at
/// the earliest such Claim in doubt.
fn grants(events: &[Event]) -> Vec<(&str, u64, Duration, Duration)> {
    let mut in_doubt: HashMap<(usize, &str), Vec<Duration>> = HashMap::new();
    for event in events {
        if let Call::Claim { key, .. } = &event.call
            && event.indefinite()
        {
            in_doubt
                .entry((event.client, key.as_str()))
                .or_default()
                .push(event.invoked);
        }
    }
    let issued_from = |event: &Event, key: &str| match &event.call {
        Call::Claim { .. } => in_doubt
            .get(&(event.client, key))
            .into_iter()
            .flatten()
            .copied()
            .filter(|sent| *sent <= event.invoked)
            .min()
            .unwrap_or(event.invoked),
        _ => event.invoked,
    };
    events
        .iter()
        .filter_map(|event| match &event.answer {
            Answer::Leases(granted) => Some(granted.iter().map(move |grant| {
                (
                    grant.key.as_str(),
                    grant.token,
                    issued_from(event, &grant.key),
                    event.completed,
                )
            })),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Each lease as first handed out. A Claim by the live holder resumes its own
/// lease (same token, nothing new issued), so later grants of the same token
/// for the same operation are not issues of their own.
fn issues(events: &[Event]) -> Vec<(&str, u64, Duration, Duration)> {
    let mut grants = grants(events);
    grants.sort_by_key(|&(_, _, sent, _)| sent);
    let mut seen = HashSet::new();
    grants.retain(|&(key, token, _, _)| seen.insert((key, token)));
    grants
}

fn one_holder(events: &[Event], violations: &mut Vec<Violation>) {
    let mut issued: HashMap<&str, Vec<(u64, Duration)>> = HashMap::new();
    for (key, token, _, answered) in grants(events) {
        issued.entry(key).or_default().push((token, answered));
    }
    // A repeated Complete is acknowledged again; what counts is when the
    // first attempt of that report was sent.
    let mut first_sent: HashMap<(&str, u64), Duration> = HashMap::new();
    for event in events {
        if let Call::Complete { key, token, .. } = &event.call {
            let sent = first_sent
                .entry((key.as_str(), *token))
                .or_insert(event.invoked);
            *sent = (*sent).min(event.invoked);
        }
    }
    for event in events {
        if !matches!(event.answer, Answer::Accepted) {
            continue;
        }
        let (rpc, key, token, sent) = match &event.call {
            Call::Complete { key, token, .. } => {
                ("Complete", key, *token, first_sent[&(key.as_str(), *token)])
            }
            Call::FencedWrite { key, token, .. } => ("FencedWrite", key, *token, event.invoked),
            _ => continue,
        };
        let newer = issued
            .get(key.as_str())
            .into_iter()
            .flatten()
            .find(|(issued_token, answered)| *issued_token > token && *answered < sent);
        if let Some((newer, answered)) = newer {
            violations.push(Violation {
                property: ONE_HOLDER,
                detail: format!(
                    "client {} {rpc} of {key} with token {token} sent at {} was accepted, but token {newer} was issued at {}",
                    event.client,
                    at(sent),
                    at(*answered)
                ),
            });
        }
    }
}

fn tokens(events: &[Event], violations: &mut Vec<Violation>) {
    let mut grants = issues(events);
    let mut seen: HashMap<u64, &str> = HashMap::new();
    for &(key, token, _, _) in &grants {
        if let Some(other) = seen.insert(token, key)
            && other != key
        {
            violations.push(Violation {
                property: TOKENS,
                detail: format!("token {token} was handed out for {other} and for {key}"),
            });
        }
    }
    // Sent after another grant's answer arrived: a larger token.
    grants.sort_by_key(|&(_, _, sent, _)| sent);
    let mut by_answer = grants.clone();
    by_answer.sort_by_key(|&(_, _, _, answered)| answered);
    let mut earlier = by_answer.iter().peekable();
    let mut highest: Option<(&str, u64, Duration)> = None;
    for &(key, token, sent, _) in &grants {
        while let Some(&&(earlier_key, earlier_token, _, answered)) = earlier.peek() {
            if answered >= sent {
                break;
            }
            if highest.is_none_or(|(_, best, _)| earlier_token > best) {
                highest = Some((earlier_key, earlier_token, answered));
            }
            earlier.next();
        }
        if let Some((earlier_key, earlier_token, answered)) = highest
            && token <= earlier_token
        {
            violations.push(Violation {
                property: TOKENS,
                detail: format!(
                    "token {token} for {key} (sent {}) is not above token {earlier_token} for {earlier_key} (answered {})",
                    at(sent),
                    at(answered)
                ),
            });
        }
    }
}

fn fencing(events: &[Event], end: &Final, violations: &mut Vec<Violation>) {
    let mut writes: HashMap<&str, Vec<&Event>> = HashMap::new();
    for event in events {
        if let Call::FencedWrite { resource, .. } = &event.call {
            writes.entry(resource.as_str()).or_default().push(event);
        }
    }
    for (resource, attempts) in writes {
        let token_of = |event: &Event| match &event.call {
            Call::FencedWrite { token, value, .. } => (*token, value.clone()),
            _ => unreachable!(),
        };
        let accepted: Vec<&&Event> = attempts
            .iter()
            .filter(|event| matches!(event.answer, Answer::Accepted))
            .collect();
        for later in &accepted {
            let (later_token, _) = token_of(later);
            for earlier in &accepted {
                let (earlier_token, _) = token_of(earlier);
                if earlier.completed < later.invoked && later_token < earlier_token {
                    violations.push(Violation {
                        property: FENCING,
                        detail: format!(
                            "{resource}: write with token {later_token} (sent {}) accepted after token {earlier_token} was (answered {})",
                            at(later.invoked),
                            at(earlier.completed)
                        ),
                    });
                }
            }
        }
        let highest_accepted = accepted.iter().map(|event| token_of(event).0).max();
        let Some((fence, value)) = end.resources.get(resource) else {
            if let Some(highest) = highest_accepted {
                violations.push(Violation {
                    property: FENCING,
                    detail: format!("{resource}: writes up to token {highest} were accepted but the resource is gone"),
                });
            }
            continue;
        };
        let explained = attempts.iter().any(|event| {
            (matches!(event.answer, Answer::Accepted) || event.indefinite())
                && token_of(event) == (*fence, value.clone())
        });
        if !explained || highest_accepted.is_some_and(|highest| *fence < highest) {
            violations.push(Violation {
                property: FENCING,
                detail: format!(
                    "{resource}: final fence {fence} value {:?} is not the last write of the highest token (highest accepted {highest_accepted:?})",
                    String::from_utf8_lossy(value)
                ),
            });
        }
    }
}

fn replays_and_durability(events: &[Event], end: &Final, violations: &mut Vec<Violation>) {
    for event in events {
        let (property, key, expected) = match (&event.call, &event.answer) {
            (
                _,
                Answer::Replayed {
                    key,
                    status,
                    result,
                    failure_code,
                },
            ) => (
                REPLAYS,
                key,
                (status.as_str(), result.clone(), failure_code.clone()),
            ),
            (Call::Complete { key, report, .. }, Answer::Accepted) => match report.settles_as() {
                Some(settled) => (DURABLE, key, settled),
                None => continue,
            },
            (
                Call::Admin {
                    key,
                    action: AdminAction::Resolve,
                },
                Answer::Accepted | Answer::Leases(_),
            ) => (DURABLE, key, ("succeeded", resolved_result(key), None)),
            _ => continue,
        };
        let stored = end.operations.get(key.as_str());
        let matches = stored.is_some_and(|(status, result, code)| {
            status == expected.0
                && (status != "succeeded" || *result == expected.1)
                && (status != "failed" || *code == expected.2)
        });
        if !matches {
            violations.push(Violation {
                property,
                detail: format!(
                    "client {} was told {key} is {} {:?} at {}, the database holds {stored:?}",
                    event.client,
                    expected.0,
                    String::from_utf8_lossy(&expected.1),
                    at(event.completed)
                ),
            });
        }
    }
}

fn unknown_outcomes(end: &Final, violations: &mut Vec<Violation>) {
    for (key, executions) in &end.executions {
        let mut in_doubt = false;
        for (token, kind, outcome) in executions {
            if in_doubt && kind != "reconcile" {
                violations.push(Violation {
                    property: UNKNOWN,
                    detail: format!(
                        "{key}: execution {token} ({kind}) ran while the last outcome was unknown"
                    ),
                });
            }
            if outcome == "unknown" {
                in_doubt = true;
            } else if kind == "reconcile"
                && matches!(outcome.as_str(), "succeeded" | "failed" | "retryable")
            {
                in_doubt = false;
            }
        }
    }
}

/// Only a succeeded original, settled before, may be compensated, and it is
/// never executed again.
fn compensations(end: &Final, violations: &mut Vec<Violation>) {
    for compensation in &end.compensations {
        let Compensation {
            key,
            original,
            original_status,
            ..
        } = compensation;
        if original_status != "succeeded" || !compensation.original_settled_before {
            violations.push(Violation {
                property: UNKNOWN,
                detail: format!(
                    "{key} compensates {original}, which is {original_status} and settled before it: {}",
                    compensation.original_settled_before
                ),
            });
        }
        if compensation.original_executions_after > 0 {
            violations.push(Violation {
                property: UNKNOWN,
                detail: format!(
                    "{original} was executed {} times after {key} compensated it",
                    compensation.original_executions_after
                ),
            });
        }
    }
}

fn settled(end: &Final, violations: &mut Vec<Violation>) {
    let allowed: HashSet<&str> = [
        "in_progress",
        "succeeded",
        "failed",
        "retry_scheduled",
        "unknown",
        "dead",
    ]
    .into();
    for (key, (status, _, _)) in &end.operations {
        if !allowed.contains(status.as_str()) {
            violations.push(Violation {
                property: SETTLED,
                detail: format!("{key} ended as {status}"),
            });
        }
    }
    for (key, why) in &end.stranded {
        violations.push(Violation {
            property: SETTLED,
            detail: format!("{key} is stranded: {why}"),
        });
    }
}

/// Accepted settled Completes: the operations whose outcome callers were told is recorded.
pub fn acknowledged(events: &[Event]) -> usize {
    events
        .iter()
        .filter_map(|event| match (&event.call, &event.answer) {
            (
                Call::Complete {
                    key,
                    report: Report::Success(_) | Report::Failure(_),
                    ..
                },
                Answer::Accepted,
            ) => Some(key.as_str()),
            _ => None,
        })
        .collect::<HashSet<_>>()
        .len()
}
