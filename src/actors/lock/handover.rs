//! A release that hands the lock to a local waiter: the last hold of a holding is
//! given back and the head waiter granted in one script call, without freeing the
//! lock and without an unlock message.
//!
//! Whether a release hands over is the kind's decision
//! (`LastRelease`; the exclusive lock's turns,
//! `kinds/exclusive/turn.rs`, say when, and its transfer script how); this file
//! carries it out: it checks that nothing in flight would race with it, sends the
//! transfer (retried under the release's latch), and applies the answer to the
//! holding, to the waiter, and to the kind's books.

use std::time::Instant;

use actix::prelude::*;
use tracing::warn;

use super::attempts::InFlight;
use super::kinds::{Attempt, Giveback, Handed, LastRelease, Scripts};
use super::release::with_latch;
use super::LockActor;
use crate::actors::shared::Shared;
use crate::error::LockError;
use crate::guard::ReleaseOutcome;
use crate::wire::{AcquireReply, ReleaseReply, TransferReply};

/// The answer to a hand-over: the transfer's, or a plain release's after Redis
/// refused the transfer (with that refusal).
type Handing = (redis::RedisResult<TransferReply>, Option<redis::RedisError>);

impl LockActor {
    /// The last hold of holding `epoch` is being given back: hands the lock to the
    /// local head waiter in the same call when the kind says so and nothing in
    /// flight would race with it. `None`: a plain release must run.
    pub(super) fn hand_over(
        &mut self,
        epoch: u64,
        giveback: &Giveback,
    ) -> Option<ResponseActFuture<Self, Result<ReleaseOutcome, LockError>>> {
        // An attempt, a check or another release in flight would race with it.
        if !self.wait.attempts.is_quiet() || !self.releases.none() {
            return None;
        }
        let holder = self.held.holdings.get(epoch)?.owner;
        let head = self.wait.queue.front()?;
        if head.want.req.owner == holder || head.is_gone() {
            return None;
        }
        let LastRelease::HandOver { count } = self.kind.last_release() else {
            return None;
        };
        let (attempt, to) = self.start_attempt(head.want.req.id)?;
        self.releases.start();
        let sent = Instant::now();
        let fut = transfer(
            self.kind.scripts(),
            self.shared.clone(),
            giveback.clone(),
            to,
            count,
            sent,
        );
        Some(Box::pin(fut.into_actor(self).map(
            move |handing, act, ctx| act.on_handed(epoch, attempt, sent, handing, ctx),
        )))
    }

    /// Applies a hand-over's answer: to the holding (as a release), to the
    /// waiter (as an attempt), and to the kind's books.
    fn on_handed(
        &mut self,
        epoch: u64,
        attempt: InFlight,
        sent: Instant,
        (res, refused): Handing,
        ctx: &mut Context<Self>,
    ) -> Result<ReleaseOutcome, LockError> {
        self.releases.done();
        if let Some(e) = &refused {
            warn!(lock = %self.name, error = %e, "cannot hand the lock over in one call; releasing instead");
            self.kind.handed(Handed::Refused);
        }
        let (release, token) = self.read_transfer(res);
        // Held elsewhere or still held, or refused and released plainly: the
        // waiter got nothing. Freed by a retry the latch answered, or no
        // answer at all: the waiter may hold it, and its hold count says (as
        // for any attempt whose reply was lost).
        let unknown = token.is_none()
            && refused.is_none()
            && !matches!(
                release,
                Ok(ReleaseReply::StillHeld(_) | ReleaseReply::NotHeld)
            );
        let out = self.on_released(epoch, sent, release, ctx);
        match token {
            Some((token, confirmed)) => {
                let granted = AcquireReply::Acquired {
                    token,
                    holds: 1,
                    confirmed,
                };
                self.on_attempt(attempt, sent, Ok(granted), ctx);
            }
            None => {
                self.wait.attempts.answered();
                if unknown {
                    self.wait.attempts.lost(attempt);
                }
                self.pump(ctx);
            }
        }
        out
    }

    /// What a transfer's answer means: as a release, and as a grant (its
    /// token and confirmation) when the lock went to the waiter.
    fn read_transfer(
        &mut self,
        res: redis::RedisResult<TransferReply>,
    ) -> (redis::RedisResult<ReleaseReply>, Option<(u64, bool)>) {
        match res {
            Ok(TransferReply::HandedOver {
                token,
                listening,
                confirmed,
            }) => {
                let own = u32::from(self.listening(&self.channel()));
                let others = listening.map(|l| l.saturating_sub(own));
                self.kind.handed(Handed::Over(others));
                let freed = ReleaseReply::Released {
                    published: false,
                    heard: 0,
                };
                (Ok(freed), Some((token, confirmed)))
            }
            Ok(TransferReply::Release(reply)) => (Ok(reply), None),
            Err(e) => (Err(e), None),
        }
    }
}

/// Sends the transfer, retried under the release's latch. The script asks for
/// every right before its first write, so a refusal (a user without PUBSUB
/// NUMSUB, docs/operations.md) changed nothing, and a plain release does the
/// job.
async fn transfer(
    scripts: &'static dyn Scripts,
    shared: std::sync::Arc<Shared>,
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
            (plain.map(TransferReply::Release), Some(e))
        }
        handed => (handed, None),
    }
}
