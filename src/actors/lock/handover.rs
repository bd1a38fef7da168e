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

use super::kinds::{Attempt, Giveback, Handed, LastRelease, Scripts};
use super::release::with_latch;
use super::LockActor;
use crate::actors::shared::Shared;
use crate::error::LockError;
use crate::guard::ReleaseOutcome;
use crate::wire::{ReleaseReply, TransferReply};

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
        ctx: &mut Context<Self>,
    ) -> Option<ResponseActFuture<Self, Result<ReleaseOutcome, LockError>>> {
        // An attempt, a check or another release in flight would race with it.
        if !self.wait.side.is_quiet() || self.wait.check.is_some() || !self.releases.none() {
            return None;
        }
        let holder = self.held.holdings.get(epoch)?.owner;
        let LastRelease::HandOver { count } = self.wait.side.kind().last_release() else {
            return None;
        };
        let engine = self.wait.side.engine_mut()?;
        let ask = engine.ask_head(|head| head.want.req.owner != holder)?;
        let effects = engine.take_effects();
        self.apply(effects, ctx);
        let (waiter, to) = (ask.waiter, self.attempt_of(&ask.want));
        self.releases.start();
        let sent = Instant::now();
        let fut = transfer(
            self.wait.side.kind().scripts(),
            self.shared.clone(),
            giveback.clone(),
            to,
            count,
            sent,
        );
        Some(Box::pin(fut.into_actor(self).map(
            move |handing, act, ctx| act.on_handed(epoch, waiter, sent, handing, ctx),
        )))
    }

    /// Applies a hand-over's answer: to the holding (as a release), to the
    /// waiter (as an attempt), and to the kind's books.
    fn on_handed(
        &mut self,
        epoch: u64,
        waiter: u64,
        sent: Instant,
        (res, refused): Handing,
        ctx: &mut Context<Self>,
    ) -> Result<ReleaseOutcome, LockError> {
        self.releases.done();
        if let Some(e) = &refused {
            warn!(lock = %self.name, error = %e, "cannot hand the lock over in one call; releasing instead");
            self.with_kind(|kind, _| kind.handed(Handed::Refused));
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
        self.handed_to(waiter, sent, token, unknown, ctx);
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
                let channel = self.channel();
                let own = u32::from(self.listening(&channel));
                let others = listening.map(|l| l.saturating_sub(own));
                self.with_kind(|kind, _| kind.handed(Handed::Over(others)));
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
