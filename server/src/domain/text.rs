//! Validation of the strings callers send. Every check names the proto field,
//! so a refusal carries a precise `google.rpc.BadRequest`.

use super::error::FieldViolation;

pub const NAMESPACE_MAX_BYTES: usize = 128;
pub const KEY_MAX_BYTES: usize = 512;
/// Owners, execution ids, codes, error classes and remote references.
pub const LABEL_MAX_BYTES: usize = 1024;
/// Human-readable messages.
pub const MESSAGE_MAX_BYTES: usize = 64 * 1024;

/// Rules for identifiers (namespace, operation key, compensates, resource):
/// non-empty, within `max_bytes`, no leading or trailing Unicode White_Space,
/// no Unicode Cc control characters.
pub fn check_identifier(
    field: &'static str,
    value: &str,
    max_bytes: usize,
) -> Result<(), FieldViolation> {
    if value.is_empty() {
        return Err(FieldViolation::new(field, "must not be empty"));
    }
    if value.len() > max_bytes {
        return Err(FieldViolation::new(
            field,
            format!("must be at most {max_bytes} bytes"),
        ));
    }
    if value.starts_with(char::is_whitespace) || value.ends_with(char::is_whitespace) {
        return Err(FieldViolation::new(
            field,
            "must not start or end with white space",
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(FieldViolation::new(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

/// Rules for free text stored verbatim: within `max_bytes` and free of NUL,
/// which PostgreSQL text cannot hold.
pub fn check_text(
    field: &'static str,
    value: &str,
    max_bytes: usize,
) -> Result<(), FieldViolation> {
    if value.len() > max_bytes {
        return Err(FieldViolation::new(
            field,
            format!("must be at most {max_bytes} bytes"),
        ));
    }
    if value.contains('\0') {
        return Err(FieldViolation::new(
            field,
            "must not contain NUL characters",
        ));
    }
    Ok(())
}

/// Like [`check_text`], and required.
pub fn check_required_text(
    field: &'static str,
    value: &str,
    max_bytes: usize,
) -> Result<(), FieldViolation> {
    if value.is_empty() {
        return Err(FieldViolation::new(field, "is required"));
    }
    check_text(field, value, max_bytes)
}

/// `value` cut to at most `max_bytes` at a character boundary, for echoing a
/// caller's text back in an error without echoing all of it.
pub fn truncated(value: &str, max_bytes: usize) -> String {
    value[..value.floor_char_boundary(max_bytes.min(value.len()))].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_refuse_edges_controls_and_length() {
        assert!(check_identifier("k", "settlement:A:W:V", 512).is_ok());
        assert!(check_identifier("k", "inner space ok", 512).is_ok());
        for bad in ["", " lead", "trail\u{3000}", "a\u{7}b", "nul\0", "\u{85}x"] {
            assert!(check_identifier("k", bad, 512).is_err(), "{bad:?}");
        }
        assert!(check_identifier("k", &"é".repeat(64), 128).is_ok());
        assert!(check_identifier("k", &"é".repeat(65), 128).is_err());
    }

    #[test]
    fn text_refuses_nul_and_length() {
        assert!(check_text("m", "", 4).is_ok());
        assert!(check_text("m", "a\0", 4).is_err());
        assert!(check_text("m", "abcde", 4).is_err());
        assert!(check_required_text("o", "", 4).is_err());
    }

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncated("ééé", 3), "é");
        assert_eq!(truncated("ab", 128), "ab");
    }
}
