//! A release that hands the lock to a local waiter: the last hold of a holding is
//! given back and the head waiter granted in one script call, without freeing the
//! lock and without an unlock message.
//!
//! Whether a release hands over is the kind's decision (`LastRelease`; the
//! exclusive lock's turns, `kinds/exclusive/turn.rs`, say when, and its
//! transfer script how). The lock actor's glue in `mod.rs` checks that nothing
//! in flight would race with it and picks the waiter; this file sends the
//! transfer ([`transfer`], retried under the release's latch) and reads its
//! answer ([`Handing::read`]) as a release, as the waiter's grant, and as
//! what the kind's books learn.

use std::sync::Arc;
use std::time::Instant;

use tracing::warn;

use super::kinds::{Attempt, Giveback, Handed, Scripts};
use super::release::with_latch;
use crate::actors::shared::Shared;
use crate::wire::{ReleaseReply, TransferReply};

/// The answer to a hand-over: the transfer's, or a plain release's after
/// Redis refused the transfer (with that refusal).
pub(super) struct Handing {
    res: redis::RedisResult<TransferReply>,
    refused: Option<redis::RedisError>,
}

/// A hand-over's answer, read.
pub(super) struct Read {
    /// As the holder's release.
    pub(super) release: redis::RedisResult<ReleaseReply>,
    /// As the waiter's grant: its token and confirmation, when it got the lock.
    pub(super) granted: Option<(u64, bool)>,
    /// The waiter may hold the lock without knowing it: its hold count says.
    pub(super) unknown: bool,
    /// What the kind's books learn, if anything.
    pub(super) books: Option<Handed>,
}

impl Handing {
    /// Reads the answer; `listening`: this process listens on the lock's
    /// channel (it is not one of the other listeners a transfer counts).
    pub(super) fn read(self, listening: bool, name: &str) -> Read {
        let Handing { res, refused } = self;
        let (release, granted, mut books) = match res {
            Ok(TransferReply::HandedOver {
                token,
                listening: counted,
                confirmed,
            }) => {
                let others = counted.map(|l| l.saturating_sub(u32::from(listening)));
                let freed = ReleaseReply::Released {
                    published: false,
                    heard: 0,
                };
                (
                    Ok(freed),
                    Some((token, confirmed)),
                    Some(Handed::Over(others)),
                )
            }
            Ok(TransferReply::Release(reply)) => (Ok(reply), None, None),
            Err(e) => (Err(e), None, None),
        };
        if let Some(e) = &refused {
            books = Some(Handed::Refused);
            warn!(lock = %name, error = %e, "cannot hand the lock over in one call; releasing instead");
        }
        // Held elsewhere or still held, or refused and released plainly: the
        // waiter got nothing. Freed by a retry the latch answered, or no
        // answer at all: the waiter may hold it, and its hold count says (as
        // for any attempt whose reply was lost).
        let unknown = granted.is_none()
            && refused.is_none()
            && !matches!(
                release,
                Ok(ReleaseReply::StillHeld(_) | ReleaseReply::NotHeld)
            );
        Read {
            release,
            granted,
            unknown,
            books,
        }
    }
}

/// Sends the transfer, retried under the release's latch. The script asks for
/// every right before its first write, so a refusal (a user without PUBSUB
/// NUMSUB, docs/operations.md) changed nothing, and a plain release does the
/// job.
pub(super) async fn transfer(
    scripts: &'static dyn Scripts,
    shared: Arc<Shared>,
    giveback: Giveback,
    to: Attempt,
    count: bool,
    sent: Instant,
) -> Handing {
    let config = shared.config.clone();
    // A handover grants too: it never outlives its latch (`None`).
    let (handed, _) = with_latch(config.clone(), sent, None, |retry| {
        let giveback = Giveback {
            retry,
            ..giveback.clone()
        };
        scripts.transfer(&shared, giveback, to.clone(), count)
    })
    .await;
    match handed {
        Err(e) if e.code() == Some("NOPERM") => {
            let (plain, _) = with_latch(config, sent, None, |retry| {
                let giveback = Giveback {
                    retry,
                    ..giveback.clone()
                };
                scripts.release(&shared, giveback)
            })
            .await;
            Handing {
                res: plain.map(TransferReply::Release),
                refused: Some(e),
            }
        }
        handed => Handing {
            res: handed,
            refused: None,
        },
    }
}
