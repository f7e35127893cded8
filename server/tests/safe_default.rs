//! The safe default: without authentication the server will not serve a
//! non-loopback address unless told to, and says why.

use std::process::Command;

#[test]
fn a_public_address_without_the_explicit_flag_is_refused_at_start() {
    let output = Command::new(env!("CARGO_BIN_EXE_opreg-server"))
        .env_clear()
        .env("OPREG_LISTEN_ADDR", "0.0.0.0:0")
        .env("OPREG_METRICS_ADDR", "127.0.0.1:0")
        .env("OPREG_DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--allow-unauthenticated"), "{stderr}");
    assert!(stderr.contains("0.0.0.0"), "{stderr}");
}
