//! The text validators on any string: they never panic, and whatever they
//! accept obeys the documented rules.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opreg_server::domain::ids::{Namespace, OperationKey};
use opreg_server::domain::text::{check_required_text, check_text};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let accepted = [
        Namespace::parse("namespace", text.to_owned()).map(|namespace| namespace.len()),
        OperationKey::parse("operation_key", text.to_owned()).map(|key| key.len()),
    ];
    for (accepted, max) in accepted
        .into_iter()
        .zip([Namespace::MAX_BYTES, OperationKey::MAX_BYTES])
    {
        if accepted.is_ok() {
            assert!(!text.is_empty() && text.len() <= max);
            assert!(!text.starts_with(char::is_whitespace) && !text.ends_with(char::is_whitespace));
            assert!(!text.chars().any(char::is_control));
        }
    }
    if check_text("message", text, 4096).is_ok() {
        assert!(text.len() <= 4096 && !text.contains('\0'));
    }
    if check_required_text("operator", text, 1024).is_ok() {
        assert!(!text.is_empty());
    }
});
