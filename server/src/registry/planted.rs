//! Deliberate bugs, so the fault suite (`server/tests/fault_suite.rs`) can
//! prove its checker fails when a guarantee breaks. Compiled into debug builds
//! only and off unless `OPREG_PLANTED_BUG` names one; a release build has none.

/// `OPREG_PLANTED_BUG=acknowledge-stale-complete`: a Complete with a superseded
/// token is answered as if recorded, instead of STALE_FENCING_TOKEN.
#[cfg(debug_assertions)]
pub fn acknowledges_stale_completes() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let on = std::env::var("OPREG_PLANTED_BUG").as_deref() == Ok("acknowledge-stale-complete");
        if on {
            tracing::error!("OPREG_PLANTED_BUG: stale Completes are acknowledged; never use this build for real data");
        }
        on
    })
}

#[cfg(not(debug_assertions))]
pub fn acknowledges_stale_completes() -> bool {
    false
}
