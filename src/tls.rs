//! TLS for `rediss://` URLs, which managed Redis services require.
//!
//! redis-rs speaks TLS through rustls, which needs a process-wide crypto provider.
//! rustls picks one by itself only when exactly one provider is compiled in; in a
//! build where another crate turns on redis-rs's TLS features (a dev-dependency
//! such as rslock does), none is, and the first TLS connection panicked ("Could not
//! automatically determine the process-level CryptoProvider"). So with the `tls`
//! feature the ring provider is installed here, before any connection, and
//! without it a `rediss://` URL is refused when the configuration is made: never a
//! panic, whatever else the build turned on.

use crate::error::LockError;

/// Whether `url` asks for TLS (`rediss://`, or `valkeys://` as redis-rs also reads).
pub(crate) fn wants_tls(url: &str) -> bool {
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
}

/// Makes TLS connections possible: installs the ring provider unless the
/// application installed one of its own first (then that one is used).
#[cfg(feature = "tls")]
pub(crate) fn prepare() -> Result<(), LockError> {
    // Err means a provider is installed already, which is all we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(())
}

/// This build has no TLS: say so instead of letting redis-rs fail (or panic) later.
#[cfg(not(feature = "tls"))]
pub(crate) fn prepare() -> Result<(), LockError> {
    Err(LockError::InvalidConfig(
        "rediss:// (TLS) needs lockwarden built with its `tls` feature".into(),
    ))
}
