//! The overview: per namespace, the backlog as this replica's gauges last
//! read it, and the hit rate and retry amplification from its counters, with
//! a chart of the last hour from samples this replica keeps. It reads the
//! server's own metrics (what `/metrics` serves), so the page costs no query
//! however many operations are stored.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::html::{Section, age, column_heads, page, query};
use super::identity::Reading;
use super::{Console, ConsoleError};
use crate::access::Role;
use crate::telemetry::metrics;

/// Samples kept: one a minute for the last hour.
const SAMPLES: usize = 60;
const SAMPLE_INTERVAL: Duration = Duration::from_secs(60);

/// One namespace's figures at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    /// `opreg_operations` by state: the unfinished statuses, `held`, `expired_lease`.
    pub backlog: BTreeMap<String, f64>,
    pub unknown: f64,
    pub oldest_unknown_seconds: f64,
    pub oldest_due_seconds: f64,
    pub claims: f64,
    pub registered: f64,
    /// Executions started, resumed leases excepted.
    pub executions: f64,
}

impl Figures {
    /// Claims that did not register a new key, of all claims.
    fn hit_rate(&self) -> Option<f64> {
        (self.claims > 0.0).then(|| 1.0 - self.registered / self.claims)
    }

    /// Executions started per operation registered.
    fn amplification(&self) -> Option<f64> {
        (self.registered > 0.0).then(|| self.executions / self.registered)
    }

    fn state(&self, state: &str) -> f64 {
        self.backlog.get(state).copied().unwrap_or(0.0)
    }
}

/// Every namespace's figures, from the Prometheus text this server renders.
pub fn read_figures(text: &str) -> BTreeMap<String, Figures> {
    let mut all: BTreeMap<String, Figures> = BTreeMap::new();
    for Series {
        name,
        labels,
        value,
    } in text.lines().filter_map(series)
    {
        let label = |wanted: &str| {
            labels
                .iter()
                .find(|(key, _)| key == wanted)
                .map(|(_, value)| value.as_str())
        };
        let Some(namespace) = label("namespace") else {
            continue;
        };
        let figures = all.entry(namespace.to_owned()).or_default();
        match name {
            metrics::OPERATIONS => {
                if let Some(state) = label("status") {
                    figures.backlog.insert(state.to_owned(), value);
                }
            }
            metrics::OPERATIONS_UNKNOWN => figures.unknown = value,
            metrics::UNKNOWN_OLDEST_AGE => figures.oldest_unknown_seconds = value,
            metrics::DUE_OLDEST_AGE => figures.oldest_due_seconds = value,
            metrics::CLAIMS => figures.claims += value,
            metrics::REGISTERED => figures.registered += value,
            metrics::EXECUTIONS if label("kind") != Some("resume") => {
                figures.executions += value;
            }
            _ => {}
        }
    }
    all
}

/// One line of the exposition text: `name{labels} value`.
struct Series<'a> {
    name: &'a str,
    /// Names and values, the values unescaped.
    labels: Vec<(String, String)>,
    value: f64,
}

/// The series of one exposition line; comments, blanks and anything
/// malformed are none.
fn series(line: &str) -> Option<Series<'_>> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let (head, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let Some((name, mut rest)) = head.split_once('{') else {
        return Some(Series {
            name: head,
            labels: Vec::new(),
            value,
        });
    };
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start_matches(',');
        if rest == "}" {
            return Some(Series {
                name,
                labels,
                value,
            });
        }
        let (key, after) = rest.split_once("=\"")?;
        let mut label = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (at, '"') => break at,
                (_, '\\') => match chars.next()?.1 {
                    'n' => label.push('\n'),
                    escaped => label.push(escaped),
                },
                (_, other) => label.push(other),
            }
        };
        labels.push((key.to_owned(), label));
        rest = &after[end + 1..];
    }
}

/// Every namespace's figures at one moment.
type Sample = (DateTime<Utc>, BTreeMap<String, Figures>);

/// The last hour of samples, per replica.
#[derive(Clone, Debug, Default)]
pub struct History(Arc<Mutex<VecDeque<Sample>>>);

impl History {
    fn record(&self, at: DateTime<Utc>, figures: BTreeMap<String, Figures>) {
        let mut samples = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if samples.len() == SAMPLES {
            samples.pop_front();
        }
        samples.push_back((at, figures));
    }

    fn samples(&self) -> Vec<Sample> {
        let samples = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        samples.iter().cloned().collect()
    }
}

/// Samples the figures once a minute for the chart, until aborted.
pub async fn sample_forever(console: Console) {
    let mut ticks = tokio::time::interval(SAMPLE_INTERVAL);
    loop {
        ticks.tick().await;
        let figures = read_figures(&console.metrics.render());
        console.history.record(Utc::now(), figures);
    }
}

pub async fn show(
    State(console): State<Console>,
    Reading(viewer): Reading,
) -> Result<Response, ConsoleError> {
    let now = Utc::now();
    let figures: BTreeMap<String, Figures> = read_figures(&console.metrics.render())
        .into_iter()
        .filter(|(namespace, _)| viewer.may(Role::Reader, namespace))
        .collect();
    let visible = |all: &BTreeMap<String, Figures>| -> Figures {
        let mut sum = Figures::default();
        for (namespace, figures) in all {
            if viewer.may(Role::Reader, namespace) {
                sum.claims += figures.claims;
                sum.unknown += figures.unknown;
                *sum.backlog.entry("dead".into()).or_default() += figures.state("dead");
            }
        }
        sum
    };
    let mut samples: Vec<(DateTime<Utc>, Figures)> = console
        .history
        .samples()
        .iter()
        .map(|(at, all)| (*at, visible(all)))
        .collect();
    samples.push((now, visible(&figures)));
    let cell = |name: &str, text: String| html! { td data-cell=(name) { (text) } };
    let count = |value: f64| format!("{value:.0}");
    let body = html! {
        h1 { "Overview" }
        p.hint { "From this replica's gauges (refreshed every OPREG_GAUGE_REFRESH_INTERVAL) and counters (since it started). Times in UTC; now " (now.format("%Y-%m-%d %H:%M:%S UTC")) "." }
        @if figures.is_empty() {
            p { "No namespace has reported yet." }
        } @else {
            div.scroll {
                table #overview {
                    caption { "The backlog by namespace" }
                    (column_heads(&["Namespace", "In progress", "Retry scheduled", "Unknown outcome", "Dead", "Held", "Expired leases", "Oldest unknown", "Oldest due", "Hit rate", "Retry amplification"]))
                    tbody {
                        @for (namespace, f) in &figures {
                            @let link = |status: &str| format!("/console/operations?{}", query(&[("namespace", namespace), ("status", status)]));
                            tr data-namespace=(namespace) {
                                th scope="row" { a href=(link("unfinished")) { (namespace) } }
                                td data-cell="in_progress" { a href=(link("in_progress")) { (count(f.state("in_progress"))) } }
                                td data-cell="retry_scheduled" { a href=(link("retry_scheduled")) { (count(f.state("retry_scheduled"))) } }
                                td data-cell="unknown" { a href=(link("unknown")) { (count(f.unknown)) } }
                                td data-cell="dead" { a href=(link("dead")) { (count(f.state("dead"))) } }
                                (cell("held", count(f.state("held"))))
                                (cell("expired_lease", count(f.state("expired_lease"))))
                                (cell("oldest_unknown", if f.unknown > 0.0 { age(f.oldest_unknown_seconds) } else { "—".into() }))
                                (cell("oldest_due", if f.oldest_due_seconds > 0.0 { age(f.oldest_due_seconds) } else { "—".into() }))
                                (cell("hit_rate", f.hit_rate().map_or("—".into(), |rate| format!("{:.1} %", rate * 100.0))))
                                (cell("amplification", f.amplification().map_or("—".into(), |ratio| format!("{ratio:.2}×"))))
                            }
                        }
                    }
                }
            }
        }
        h2 #chart-title { "The last hour" }
        (chart(&samples))
    };
    Ok(viewer.finish(page(Some(&viewer), Section::Overview, "Overview", body).into_response()))
}

/// Claims per minute (bars) and unresolved unknown outcomes plus DEAD
/// operations (line), one point per sample, as an SVG with a text summary.
fn chart(samples: &[(DateTime<Utc>, Figures)]) -> Markup {
    const WIDTH: f64 = 600.0;
    const HEIGHT: f64 = 160.0;
    let rates: Vec<f64> = samples
        .windows(2)
        .map(|pair| {
            let minutes = ((pair[1].0 - pair[0].0).num_milliseconds() as f64 / 60_000.0).max(1e-3);
            ((pair[1].1.claims - pair[0].1.claims) / minutes).max(0.0)
        })
        .collect();
    let stuck: Vec<f64> = samples
        .iter()
        .map(|(_, figures)| figures.unknown + figures.state("dead"))
        .collect();
    let top_rate = rates.iter().copied().fold(1.0, f64::max);
    let top_stuck = stuck.iter().copied().fold(1.0, f64::max);
    let step = WIDTH / SAMPLES as f64;
    let line: Vec<String> = stuck
        .iter()
        .enumerate()
        .map(|(index, value)| {
            format!(
                "{:.1},{:.1}",
                WIDTH - step * (stuck.len() - 1 - index) as f64,
                HEIGHT - value / top_stuck * (HEIGHT - 10.0)
            )
        })
        .collect();
    let summary = format!(
        "Claims per minute, latest {:.0} (highest {:.0}); unknown outcomes and dead operations, now {:.0} (highest {:.0}); {} samples.",
        rates.last().copied().unwrap_or(0.0),
        top_rate,
        stuck.last().copied().unwrap_or(0.0),
        top_stuck,
        samples.len()
    );
    html! {
        figure {
            svg #chart role="img" aria-labelledby="chart-title chart-summary" viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) width="100%" height="160" {
                @for (index, rate) in rates.iter().enumerate() {
                    @let height = rate / top_rate * (HEIGHT - 10.0);
                    rect.bar x=(format!("{:.1}", WIDTH - step * (rates.len() - index) as f64)) y=(format!("{:.1}", HEIGHT - height))
                        width=(format!("{:.1}", step * 0.8)) height=(format!("{height:.1}")) {}
                }
                polyline.stuck points=(line.join(" ")) fill="none" {}
                text.axis x="4" y="14" { "an hour ago" }
                text.axis x=(WIDTH - 4.0) y="14" text-anchor="end" { "now" }
            }
            figcaption #chart-summary { (summary) " Bars: claims per minute. Line: unknown outcomes and dead operations." }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_come_from_the_exposition_text() {
        let text = "\
# HELP opreg_operations Operations by status.
opreg_operations{namespace=\"payments\",status=\"unknown\"} 3
opreg_operations{namespace=\"payments\",status=\"dead\"} 2
opreg_operations_unknown{namespace=\"payments\"} 4
opreg_unknown_oldest_age_seconds{namespace=\"payments\"} 120.5
opreg_claims_total{namespace=\"payments\",outcome=\"acquired\"} 10
opreg_claims_total{namespace=\"payments\",outcome=\"replayed\"} 30
opreg_operations_registered_total{namespace=\"payments\"} 10
opreg_executions_total{namespace=\"payments\",kind=\"first\"} 10
opreg_executions_total{namespace=\"payments\",kind=\"retry\"} 5
opreg_executions_total{namespace=\"payments\",kind=\"resume\"} 7
opreg_claims_total{namespace=\"other\",outcome=\"acquired\"} 1
opreg_claims_total{namespace=\"a,b\\\"c\",outcome=\"acquired\"} 2
";
        let figures = read_figures(text);
        let payments = &figures["payments"];
        assert_eq!(payments.state("unknown"), 3.0);
        assert_eq!(payments.state("dead"), 2.0);
        assert_eq!(payments.unknown, 4.0);
        assert_eq!(payments.oldest_unknown_seconds, 120.5);
        assert_eq!(payments.hit_rate(), Some(0.75));
        assert_eq!(
            payments.amplification(),
            Some(1.5),
            "resumed leases are not executions"
        );
        assert_eq!(figures["other"].amplification(), None);
        assert_eq!(
            figures["a,b\"c"].claims, 2.0,
            "a quoted comma or quote stays in its label"
        );
        assert!(!figures.contains_key("a"));
    }
}
