//! The parameter rule on any JSON: canonicalising never panics, is
//! idempotent (the canonical text canonicalises to itself), and JSON sent as a
//! Struct has the same digest as the same JSON digested by a client.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opreg_proto::parameters::{Fingerprint, differing_fields, json_to_struct};

fuzz_target!(|data: &[u8]| {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(fingerprint) = Fingerprint::from_json(&json) else {
        return;
    };
    let canonical = fingerprint.canonical.clone().unwrap();
    let reparsed: serde_json::Value =
        serde_json::from_str(&canonical).expect("canonical text is JSON");
    let again = Fingerprint::from_json(&reparsed).expect("canonical text has finite numbers");
    assert_eq!(again, fingerprint, "canonicalisation is not idempotent");
    if json.is_object() {
        let from_struct =
            Fingerprint::from_struct(&json_to_struct(json)).expect("finite numbers stay finite");
        assert_eq!(
            from_struct.digest, fingerprint.digest,
            "Struct and JSON digests differ"
        );
    }
    let _ = differing_fields(&canonical, "{}");
});
