//! [`LockError`] as an actix-web [`ResponseError`] (the `actix-web` feature), so
//! that a handler writes `?` on every lockwarden call and needs no wrapper type:
//! orphan rules forbid an application to implement actix-web's trait for
//! lockwarden's error, so every team would write the same newtype.
//!
//! Each variant's status, `Retry-After` and body are chosen in `answer`, one
//! exhaustive match; the table and the reasons are on the `ResponseError` impl
//! (below), where a user reads them with [`LockError`]'s documentation.

use std::time::Duration;

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use tracing::{debug, error};

use crate::error::LockError;

/// The `Retry-After` of every 503: no error that answers it knows when the lock
/// or Redis will be free (the impl's documentation says why 1 s).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// How a [`LockError`] answers a request: its status, the line of its body, and
/// whether the client is told when to try again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Answer {
    /// The HTTP status.
    status: StatusCode,
    /// The body, one line.
    body: &'static str,
    /// The `Retry-After`, for a 503.
    retry_after: Option<Duration>,
}

impl Answer {
    /// 503: the same request may pass later.
    fn unavailable(body: &'static str) -> Answer {
        Answer {
            status: StatusCode::SERVICE_UNAVAILABLE,
            body,
            retry_after: Some(RETRY_AFTER),
        }
    }

    /// 409: the lock passed to someone else, or this owner holds it already.
    fn conflict(body: &'static str) -> Answer {
        Answer {
            status: StatusCode::CONFLICT,
            body,
            retry_after: None,
        }
    }

    /// 500: a bug or a deployment that needs an operator; a retry repeats it.
    fn internal() -> Answer {
        Answer {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            body: "internal error: a lock call failed (the server log has the cause)",
            retry_after: None,
        }
    }
}

/// The answer to `e`. Every variant is named, with no catch-all arm: a variant
/// added to [`LockError`] does not compile until it is given a status here.
fn answer(e: &LockError) -> Answer {
    match e {
        LockError::Timeout { .. } => {
            Answer::unavailable("busy: the lock or permits are taken elsewhere; try again later")
        }
        LockError::Deadlock(_) => Answer::unavailable(
            "busy: the request waited for a lock in a deadlock and gave way; try again",
        ),
        LockError::NotReplicated { .. } => {
            Answer::unavailable("unavailable: the lock could not be confirmed; try again later")
        }
        LockError::InFlight { .. } => Answer::unavailable(
            "unavailable: the lock service did not hear back from Redis; try again later",
        ),
        LockError::Redis(_) if e.is_retryable() || e.is_failover_in_progress() => {
            Answer::unavailable("unavailable: the lock service cannot reach Redis; try again later")
        }
        LockError::Stopped | LockError::ShuttingDown => {
            Answer::unavailable("unavailable: the lock service is not running; try again later")
        }
        LockError::Lost(_) => Answer::unavailable(
            "unavailable: the lock was lost before the request finished; try again later",
        ),
        LockError::StaleToken { .. } | LockError::NotHeld => Answer::conflict(
            "conflict: another holder of the lock took over before this request finished",
        ),
        LockError::ReentryRefused => {
            Answer::conflict("conflict: this owner holds the lock already (a request in progress)")
        }
        LockError::InvalidName(_)
        | LockError::InvalidLease { .. }
        | LockError::InvalidConfig(_)
        | LockError::InvalidRequest(_)
        | LockError::InvalidAmount { .. }
        | LockError::ReservedKey { .. }
        | LockError::UpgradeRefused
        | LockError::TokenTooHigh { .. }
        | LockError::NoPermission { .. }
        | LockError::NotANumber { .. }
        | LockError::DamagedFence { .. }
        | LockError::Redis(_) => Answer::internal(),
    }
}

/// With the `actix-web` feature: a handler that returns `Result<_, LockError>` (or
/// `actix_web::Error`) answers a lock error with a status that tells a client, or
/// the load balancer in front of it, what to do next, a one-line plain-text body
/// and, for a 503, `Retry-After`. The table of statuses, with why each, is in
/// [`LockError`]'s documentation, so that a build without this feature shows it
/// too.
///
/// The body is one short plain-text line per kind of answer ("busy: the lock or
/// permits are taken elsewhere; try again later"), never the error's `Display`: that one names
/// keys, tokens, Redis users, a key's content and, in a `Redis` error, addresses,
/// which an outside client has no use for. The whole error stays on the response
/// (`HttpResponse::error()`, which actix-web's `Logger` prints at debug level and
/// a middleware can read), and every 500 is logged at error level with it
/// (tracing), since it needs someone to act. A service whose clients should see
/// the message maps the error itself, keeping the status:
/// `map_err(|e| InternalError::new(e.to_string(), e.status_code()))`.
impl ResponseError for LockError {
    fn status_code(&self) -> StatusCode {
        answer(self).status
    }

    fn error_response(&self) -> HttpResponse {
        let answer = answer(self);
        if answer.status.is_server_error() && answer.retry_after.is_none() {
            // A bug or a deployment fault: someone must act, so it is logged
            // whether or not the application logs its responses.
            error!(status = answer.status.as_u16(), error = %self, "a lock call failed in a request");
        } else {
            debug!(status = answer.status.as_u16(), error = %self, "a lock call refused a request");
        }
        let mut response = HttpResponse::build(answer.status);
        response.content_type(mime_text());
        if let Some(after) = answer.retry_after {
            response.insert_header((header::RETRY_AFTER, after.as_secs().max(1)));
        }
        response.body(format!("{}\n", answer.body))
    }
}

/// `text/plain; charset=utf-8`, as actix-web's own error bodies.
fn mime_text() -> HeaderValue {
    HeaderValue::from_static("text/plain; charset=utf-8")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use actix_web::body::MessageBody;
    use actix_web::http::header;
    use actix_web::http::StatusCode;
    use actix_web::ResponseError;

    use crate::error::{LockError, LostReason, NameError};

    /// The variant's name. No catch-all arm: a new variant fails to compile here
    /// until it has a row in `every_variant_answers_its_status` below.
    fn variant(e: &LockError) -> &'static str {
        match e {
            LockError::InvalidName(_) => "InvalidName",
            LockError::InvalidLease { .. } => "InvalidLease",
            LockError::InvalidConfig(_) => "InvalidConfig",
            LockError::Timeout { .. } => "Timeout",
            LockError::Deadlock(_) => "Deadlock",
            LockError::NotHeld => "NotHeld",
            LockError::Lost(_) => "Lost",
            LockError::Redis(_) => "Redis",
            LockError::NoPermission { .. } => "NoPermission",
            LockError::Stopped => "Stopped",
            LockError::ShuttingDown => "ShuttingDown",
            LockError::UpgradeRefused => "UpgradeRefused",
            LockError::ReentryRefused => "ReentryRefused",
            LockError::InvalidRequest(_) => "InvalidRequest",
            LockError::StaleToken { .. } => "StaleToken",
            LockError::NotReplicated { .. } => "NotReplicated",
            LockError::InFlight { .. } => "InFlight",
            LockError::InvalidAmount { .. } => "InvalidAmount",
            LockError::NotANumber { .. } => "NotANumber",
            LockError::ReservedKey { .. } => "ReservedKey",
            LockError::TokenTooHigh { .. } => "TokenTooHigh",
            LockError::DamagedFence { .. } => "DamagedFence",
        }
    }

    /// A Redis error that passes (a refused connection) and one that repeats (a
    /// reply of the wrong shape).
    fn redis_errors() -> (redis::RedisError, redis::RedisError) {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let shape = redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "a reply of an unexpected shape",
        ));
        (redis::RedisError::from(refused), shape)
    }

    /// The table of the module's documentation, row by row: one value of every
    /// variant, its status, and `Retry-After: 1` on every 503 and nowhere else.
    #[test]
    fn every_variant_answers_its_status() {
        let (transient, shape) = redis_errors();
        let rows: Vec<(LockError, u16)> = vec![
            (
                LockError::Timeout {
                    waited: Duration::from_secs(10),
                    holder: None,
                },
                503,
            ),
            (
                LockError::NotReplicated {
                    acked: 0,
                    wanted: 1,
                },
                503,
            ),
            (
                LockError::Deadlock(Box::new(crate::deadlock::Deadlock { links: Vec::new() })),
                503,
            ),
            (LockError::Redis(transient), 503),
            (
                LockError::InFlight {
                    what: "giving back 1 permit".to_owned(),
                    waited: Duration::from_secs(5),
                },
                503,
            ),
            (LockError::Stopped, 503),
            (LockError::ShuttingDown, 503),
            (LockError::Lost(LostReason::ShutDown), 503),
            (LockError::Lost(LostReason::OwnerGone), 503),
            (LockError::Lost(LostReason::LeaseExpired), 503),
            (LockError::Lost(LostReason::Unreachable), 503),
            (LockError::Lost(LostReason::ManagerStopped), 503),
            (
                LockError::Lost(LostReason::Paused {
                    stalled: Duration::from_secs(3),
                }),
                503,
            ),
            (
                LockError::StaleToken {
                    token: 1,
                    newest: 2,
                },
                409,
            ),
            (LockError::NotHeld, 409),
            (LockError::ReentryRefused, 409),
            (LockError::InvalidName(NameError::Empty), 500),
            (
                LockError::InvalidLease {
                    lease: Duration::ZERO,
                    reason: "must be at least 1 ms",
                },
                500,
            ),
            (LockError::InvalidConfig("renewal".into()), 500),
            (LockError::InvalidRequest("non-reentrant read lock"), 500),
            (
                LockError::InvalidAmount {
                    what: "permits",
                    amount: 0,
                    reason: "zero",
                },
                500,
            ),
            (
                LockError::ReservedKey {
                    key: "k".into(),
                    what: "a fence",
                },
                500,
            ),
            (LockError::UpgradeRefused, 500),
            (
                LockError::TokenTooHigh {
                    token: u64::MAX,
                    server_clock: 1,
                },
                500,
            ),
            (
                LockError::NoPermission {
                    command: "EVALSHA".into(),
                    detail: "acl".into(),
                },
                500,
            ),
            (
                LockError::NotANumber {
                    key: "k".into(),
                    value: "secret".into(),
                },
                500,
            ),
            (
                LockError::DamagedFence {
                    key: "k".into(),
                    fence: "f".into(),
                    holds: "text".into(),
                },
                500,
            ),
            (LockError::Redis(shape), 500),
        ];
        let mut seen: Vec<&str> = rows.iter().map(|(e, _)| variant(e)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 22, "a row for every variant: {seen:?}");
        for (e, status) in &rows {
            let response = e.error_response();
            assert_eq!(response.status().as_u16(), *status, "{e:?}");
            assert_eq!(e.status_code(), response.status(), "{e:?}");
            let retry = response.headers().get(header::RETRY_AFTER);
            if response.status() == StatusCode::SERVICE_UNAVAILABLE {
                assert_eq!(retry.and_then(|v| v.to_str().ok()), Some("1"), "{e:?}");
            } else {
                assert!(retry.is_none(), "{e:?}");
            }
            let body = response.into_body().try_into_bytes().unwrap_or_default();
            let body = String::from_utf8_lossy(&body);
            assert!(
                body.ends_with('\n') && body.lines().count() == 1,
                "{body:?}"
            );
        }
    }

    /// A wait that ran out does not say "lock" alone (a semaphore's wait answers
    /// it too), and a deadlock's body says it was a deadlock.
    #[test]
    fn bodies_name_what_was_waited_for() {
        let body = |e: LockError| {
            let bytes = e.error_response().into_body().try_into_bytes();
            String::from_utf8_lossy(&bytes.unwrap_or_default()).into_owned()
        };
        let timeout = body(LockError::Timeout {
            waited: Duration::from_secs(1),
            holder: None,
        });
        assert!(timeout.contains("lock or permits"), "{timeout}");
        let cycle = crate::deadlock::Deadlock { links: Vec::new() };
        let deadlock = body(LockError::Deadlock(Box::new(cycle)));
        assert!(deadlock.contains("deadlock"), "{deadlock}");
    }

    /// The body never carries what the error's `Display` would show: key names,
    /// a key's content, a Redis user's words.
    #[test]
    fn bodies_leak_nothing_of_the_error() {
        for e in [
            LockError::NotANumber {
                key: "acct:7".into(),
                value: "s3cr3t".into(),
            },
            LockError::NoPermission {
                command: "EVALSHA".into(),
                detail: "user bob".into(),
            },
            LockError::StaleToken {
                token: 41,
                newest: 42,
            },
        ] {
            let body = e
                .error_response()
                .into_body()
                .try_into_bytes()
                .unwrap_or_default();
            let body = String::from_utf8_lossy(&body);
            for secret in ["acct:7", "s3cr3t", "bob", "41", "42"] {
                assert!(!body.contains(secret), "{body:?} shows {secret}");
            }
        }
    }
}
