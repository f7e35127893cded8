//! Whether the calls a proxy saw match a scenario's `expect.calls`
//! (client/PROTOCOL.md, "Matching `calls`"): the one matcher every client's
//! runner relies on, through the proxy's exit status.

/// Whether the proxy's log `lines` match `patterns`: an entry matches one
/// line, an entry ending in `*` zero or more; Renew lines and a worker's empty
/// polls (`ClaimDue:EMPTY`) count only when a pattern names them (their number
/// depends on timing), and `#` lines never.
pub fn calls_match(patterns: &[&str], lines: &[String]) -> bool {
    let renewals = patterns.iter().any(|pattern| method(pattern) == "Renew");
    let empty_polls = patterns
        .iter()
        .any(|pattern| pattern.starts_with(EMPTY_POLL));
    let calls: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|line| !line.starts_with('#'))
        .filter(|line| renewals || method(line) != "Renew")
        .filter(|line| empty_polls || *line != EMPTY_POLL)
        .collect();
    matches_from(patterns, &calls)
}

/// A ClaimDue that handed out nothing.
const EMPTY_POLL: &str = "ClaimDue:EMPTY";

/// The method of a log line or pattern (`Renew:OK` is `Renew`).
fn method(call: &str) -> &str {
    call.split_once(':').map_or(call, |(method, _)| method)
}

fn matches_from(patterns: &[&str], calls: &[&str]) -> bool {
    match patterns.split_first() {
        None => calls.is_empty(),
        Some((pattern, rest)) => match pattern.strip_suffix('*') {
            Some(repeated) => {
                matches_from(rest, calls)
                    || (calls.first() == Some(&repeated) && matches_from(patterns, &calls[1..]))
            }
            None => calls.first() == Some(pattern) && matches_from(rest, &calls[1..]),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matcher_catches_a_missing_an_extra_and_a_reordered_call() {
        let lines = |calls: &[&str]| calls.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>();
        let expected = ["Claim:ACQUIRED", "Complete:LOST*", "Lookup:OK"];
        assert!(calls_match(
            &expected,
            &lines(&["Claim:ACQUIRED", "Renew:OK", "Lookup:OK"])
        ));
        assert!(calls_match(
            &expected,
            &lines(&[
                "Claim:ACQUIRED",
                "Complete:LOST",
                "Complete:LOST",
                "Lookup:OK"
            ])
        ));
        assert!(!calls_match(&expected, &lines(&["Claim:ACQUIRED"])));
        assert!(!calls_match(
            &expected,
            &lines(&["Claim:ACQUIRED", "Lookup:OK", "Complete:SUCCEEDED"])
        ));
        assert!(!calls_match(
            &expected,
            &lines(&["Lookup:OK", "Claim:ACQUIRED"])
        ));
        assert!(!calls_match(
            &["Claim:ACQUIRED", "Renew:OK"],
            &lines(&["Claim:ACQUIRED"])
        ));
    }

    #[test]
    fn empty_polls_count_only_when_named() {
        let lines = |calls: &[&str]| calls.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>();
        let polled = lines(&[
            "ClaimDue:EMPTY",
            "ClaimDue:ACQUIRED",
            "ClaimDue:EMPTY",
            "Complete:SUCCEEDED",
        ]);
        assert!(calls_match(
            &["ClaimDue:ACQUIRED", "Complete:SUCCEEDED"],
            &polled
        ));
        assert!(!calls_match(
            &["ClaimDue:EMPTY", "ClaimDue:ACQUIRED", "Complete:SUCCEEDED"],
            &polled
        ));
        assert!(!calls_match(
            &["ClaimDue:ACQUIRED", "Complete:SUCCEEDED"],
            &lines(&[
                "ClaimDue:ACQUIRED",
                "ClaimDue:ACQUIRED",
                "Complete:SUCCEEDED"
            ])
        ));
    }
}
