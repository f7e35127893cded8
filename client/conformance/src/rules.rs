//! A scenario's fault rules and which call each one applies to.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Deserialize;

/// What the proxy does to a call a rule matches.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Answer UNAVAILABLE without forwarding.
    Unavailable,
    /// Forward, then answer UNAVAILABLE instead: the call took effect.
    LoseAnswer,
    /// Answer the status of `reason` without forwarding.
    Refuse,
    /// Let another owner take the operation over, then forward.
    Takeover,
    /// Forward a Claim or Lookup with its `wait` cleared: the server answers
    /// as one that does not wait.
    WithoutWaiting,
}

/// One rule: `action` for the calls numbered `from..=to` of `method` (`*`
/// counts every method together; `to` of -1 has no end).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub method: String,
    #[serde(default = "first_call")]
    pub from: i64,
    #[serde(default)]
    pub to: Option<i64>,
    pub action: Action,
    /// For `refuse`: an `ErrorReason` name without its prefix.
    #[serde(default)]
    pub reason: Option<String>,
}

fn first_call() -> i64 {
    1
}

impl Rule {
    fn covers(&self, call: i64) -> bool {
        let to = self.to.unwrap_or(self.from);
        call >= self.from && (to == -1 || call <= to)
    }
}

/// The rules and the calls counted so far.
#[derive(Debug)]
pub(crate) struct Faults {
    rules: Vec<Rule>,
    counted: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    all: i64,
    by_method: HashMap<&'static str, i64>,
}

impl Faults {
    pub(crate) fn new(rules: Vec<Rule>) -> Self {
        Self {
            rules,
            counted: Mutex::default(),
        }
    }

    /// Counts a call of `method` and returns the first rule that applies to it.
    pub(crate) fn next(&self, method: &'static str) -> Option<Rule> {
        let mut counts = self.counted.lock().unwrap_or_else(|e| e.into_inner());
        counts.all += 1;
        let all = counts.all;
        let this = {
            let n = counts.by_method.entry(method).or_default();
            *n += 1;
            *n
        };
        self.rules
            .iter()
            .find(|rule| match rule.method.as_str() {
                "*" => rule.covers(all),
                named => named == method && rule.covers(this),
            })
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(json: &str) -> Faults {
        Faults::new(serde_json::from_str(json).unwrap())
    }

    #[test]
    fn a_rule_covers_its_calls_of_its_method() {
        let faults = rules(r#"[{"method": "Complete", "from": 2, "action": "lose_answer"}]"#);
        let seen: Vec<_> = ["Claim", "Complete", "Complete", "Complete"]
            .into_iter()
            .map(|method| faults.next(method).map(|rule| rule.action))
            .collect();
        assert_eq!(seen, [None, None, Some(Action::LoseAnswer), None]);
    }

    #[test]
    fn a_star_rule_counts_every_method_and_minus_one_has_no_end() {
        let faults = rules(r#"[{"method": "*", "from": 2, "to": -1, "action": "unavailable"}]"#);
        let hit: Vec<_> = ["Claim", "Renew", "Complete", "Lookup"]
            .into_iter()
            .map(|method| faults.next(method).is_some())
            .collect();
        assert_eq!(hit, [false, true, true, true]);
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(
            serde_json::from_str::<Vec<Rule>>(
                r#"[{"method": "Claim", "action": "unavailable", "nth": 1}]"#
            )
            .is_err()
        );
    }
}
