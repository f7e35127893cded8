//! The fault-injecting proxy that every client's run-once conformance
//! scenarios (`client/testdata/run_once_scenarios.json`) run through: it
//! forwards `opreg.v1.OperationRegistry` to a real server, applies a
//! scenario's fault rules, and logs each call as `Method:RESULT` so a scenario
//! can state the calls the server saw, and judges them against the
//! scenario's expectation ([`calls_match`]). The format is in
//! `client/PROTOCOL.md`.

mod log;
mod matching;
mod proxy;
mod rules;

pub use matching::calls_match;
pub use proxy::FaultProxy;
pub use rules::{Action, Rule};
