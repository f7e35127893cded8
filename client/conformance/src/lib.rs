//! The fault-injecting proxy that every client's run-once conformance
//! scenarios (`client/testdata/run_once_scenarios.json`) run through: it
//! forwards `opreg.v1.OperationRegistry` to a real server, applies a
//! scenario's fault rules, and logs each call as `Method:RESULT` so a scenario
//! can state the calls the server saw. The format is in `client/PROTOCOL.md`.

mod log;
mod proxy;
mod rules;

pub use proxy::FaultProxy;
pub use rules::{Action, Rule};
