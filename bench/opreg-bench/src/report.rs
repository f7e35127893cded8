//! The figures a run prints, as text or as one JSON object.

use std::fmt::Write as _;

use serde_json::json;

use crate::Args;
use crate::drive::Tally;
use crate::scenario::{HOT_KEY_RACE, Scenario, Target};

pub struct Summary<'a> {
    args: &'a Args,
    scenario: Scenario,
    tally: &'a Tally,
}

/// The percentiles printed, as (label, quantile).
const PERCENTILES: [(&str, f64); 4] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)];

impl<'a> Summary<'a> {
    pub fn new(args: &'a Args, target: &Target, tally: &'a Tally) -> Self {
        Self {
            args,
            scenario: target.scenario,
            tally,
        }
    }

    fn seconds(&self) -> f64 {
        self.tally.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// RPCs sent: a lifecycle call is a Claim and a Complete, a claim-due
    /// call a ClaimDue and a Complete per operation it handed out.
    fn rpcs(&self) -> u64 {
        match self.scenario {
            Scenario::Lifecycle => 2 * self.tally.calls,
            Scenario::ClaimDue => self.tally.calls + self.tally.operations(),
            Scenario::BatchLifecycle => 2 * self.tally.calls,
            _ => self.tally.calls,
        }
    }

    fn mode(&self) -> String {
        match self.args.rate {
            Some(rate) => format!(
                "open loop at {rate}/s, at most {} in flight",
                self.args.concurrency
            ),
            None => format!("closed loop, {} in flight", self.args.concurrency),
        }
    }

    fn millis(&self, quantile: f64) -> f64 {
        self.tally.latency.value_at_quantile(quantile) as f64 / 1_000.0
    }

    pub fn text(&self) -> String {
        let tally = self.tally;
        let mut text = String::new();
        let _ = writeln!(
            text,
            "{}: {} calls, {} operations in {:.2} s = {:.0} operations/s ({:.0} RPCs/s); {}",
            self.scenario.name(),
            tally.calls,
            tally.operations(),
            self.seconds(),
            tally.operations() as f64 / self.seconds(),
            self.rpcs() as f64 / self.seconds(),
            self.mode()
        );
        let mut latency = String::from("  latency ms:");
        for (label, quantile) in PERCENTILES {
            let _ = write!(latency, " {label} {:.2}", self.millis(quantile));
        }
        let _ = writeln!(
            text,
            "{latency} max {:.2} mean {:.2}",
            tally.latency.max() as f64 / 1_000.0,
            tally.latency.mean() / 1_000.0
        );
        let answers: Vec<String> = tally
            .answers
            .iter()
            .map(|(answer, count)| format!("{answer} {count}"))
            .collect();
        let _ = writeln!(text, "  answers: {}", answers.join(", "));
        if self.scenario == Scenario::HotKey {
            let rounds = tally.calls.div_ceil(HOT_KEY_RACE);
            let acquired = tally.answers.get("ACQUIRED").copied().unwrap_or(0);
            let _ = writeln!(
                text,
                "  hot key: {acquired} ACQUIRED over {rounds} rounds of {HOT_KEY_RACE} racing claims (one per round expected)"
            );
        }
        text
    }

    pub fn json(&self) -> serde_json::Value {
        let tally = self.tally;
        let mut latency = serde_json::Map::new();
        for (label, quantile) in PERCENTILES {
            latency.insert(label.to_owned(), json!(self.millis(quantile)));
        }
        latency.insert("max".into(), json!(tally.latency.max() as f64 / 1_000.0));
        latency.insert("mean".into(), json!(tally.latency.mean() / 1_000.0));
        json!({
            "scenario": self.scenario.name(),
            "mode": if self.args.rate.is_some() { "open" } else { "closed" },
            "rate": self.args.rate,
            "concurrency": self.args.concurrency,
            "connections": self.args.connections,
            "calls": tally.calls,
            "operations": tally.operations(),
            "seconds": self.seconds(),
            "operations_per_second": tally.operations() as f64 / self.seconds(),
            "rpcs_per_second": self.rpcs() as f64 / self.seconds(),
            "latency_ms": latency,
            "answers": tally.answers,
        })
    }
}
