//! A lock handed to a waiter of this process by a release (in any process)
//! with `Config::direct_handoff`: the actor's half of the exclusive lock's
//! direct handoff (`kinds/exclusive/handoff.rs` keeps the places).
//!
//! The release script made the waiter's field the holder in Redis with a short
//! lease ([`HAND_LEASE`]) and a new fencing token, and told this process on its
//! handoff channel (`g<token>,<field>`). What the message finds decides:
//! - the waiter queued with nothing out, and no replica confirmation asked: it
//!   is granted now with the message's token, as if its own attempt had
//!   answered, and its lease is made its own right behind (one renewal). The
//!   grant counts its lease from the last call that found its place, which ran
//!   before the release: so it never believes in more than Redis gave it;
//! - its attempt out: that attempt's busy answer ran before the release, so
//!   the message's grant is the answer ([`answered`]); a grant means the
//!   attempt found the hold;
//! - confirmation asked (a `WAIT` must cover the handoff), or the lease left
//!   too short to count on: it asks (again) at once, and that
//!   attempt finds the hold (`lua/acquire.lua` answers a handed hold as a
//!   grant, and sets the waiter's lease: a write, which the `WAIT` behind it
//!   confirms with the release's, one replication stream in order);
//! - the field holds here already: its own attempt found the hold first;
//! - the waiter left (or its caller went away): the hold is given back at
//!   once by one release (which hands the lock to the next place). A message
//!   lost leaves the hold to its short lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tracing::{debug, warn};

use super::holding::Granting;
use super::kinds::{Giveback, HAND_LEASE};
use super::LockActor;
use crate::actors::waiting::engine::Event;
use crate::durations::millis;
use crate::error::LostReason;
use crate::kind::AcquireKind;
use crate::wire::{self, AcquireReply, ScriptConn};

/// How soon a failed extension of a handed lease is tried again.
const EXTEND_AGAIN: Duration = Duration::from_millis(50);

/// Least lease a handoff must have left for its waiter to be granted from the
/// message alone: the renewal behind the grant has this long to land.
const MARGIN: Duration = Duration::from_millis(200);

/// Reads a handoff message's payload, `<token>,<owner field>`.
fn parse(payload: &str) -> Option<(u64, &str)> {
    let (token, field) = payload.split_once(',')?;
    let token = token.parse().ok()?;
    (!field.is_empty()).then_some((token, field))
}

/// A handoff message came (its payload after the `g`); see the module
/// documentation.
pub(super) fn received(act: &mut LockActor, payload: &str, ctx: &mut Context<LockActor>) {
    let Some((token, field)) = parse(payload) else {
        warn!(lock = %act.name, payload, "ignored a malformed handoff message");
        return;
    };
    act.with_kind(|kind, _| kind.handed_off());
    if act.held.holdings.iter().any(|h| &*h.field == field) {
        return; // its own attempt found the hold first
    }
    let (confirms, confirmed) = confirming(act);
    let watchdog = act.shared.config.watchdog_lease;
    let Some(engine) = act.wait.side.engine_mut() else {
        return give_back(act, field, ctx);
    };
    // A waiter whose caller went away is as good as gone: its hold goes back.
    let found = engine.waiters().find(|w| &*w.want.req.field == field);
    let Some(w) = found.filter(|w| !w.is_gone()) else {
        return give_back(act, field, ctx);
    };
    let (id, asking) = (w.id, w.want.asking);
    let lease = w.want.req.lease.unwrap_or(watchdog);
    let sent = counted_from(w.want.placed_at, lease);
    let fast = (!asking && !confirms).then_some(sent).flatten();
    let asked = fast.and_then(|sent| engine.ask_for(id).map(|_| sent));
    let Some(sent) = asked else {
        // It asks (again) at once; its attempt finds the hold. With its
        // attempt out, that attempt's answer is read first (`answered`).
        if let Some(w) = engine.policy_mut().1.get_mut(id) {
            w.want.handed = true;
            w.want.handed_token = asking.then_some(token);
        }
        return act.run(Event::Look, ctx);
    };
    if !confirmed {
        wire::record_unconfirmed("grant", &act.name);
    }
    let reply = Ok(AcquireReply::Acquired {
        token,
        holds: 1,
        confirmed,
    });
    act.run(
        Event::Answered {
            waiter: id,
            reply,
            sent,
        },
        ctx,
    );
    extend(act, field, lease, ctx);
}

/// An attempt's answer, as the engine is to read it, and the lease to extend
/// behind it if it is a handoff's grant.
pub(super) struct Answer {
    pub(super) reply: redis::RedisResult<AcquireReply>,
    pub(super) sent: Instant,
    pub(super) extend: Option<(Arc<str>, Duration)>,
}

/// The answer to the attempt of `waiter` (sent at `sent`), read in the light
/// of a handoff message that came while it was out: a busy answer ran before
/// the release that handed the lock over (a later run would have found the
/// hold), so the message's grant stands and is the answer, as in
/// [`received`], when it may be made from the message alone. Any other
/// answer is as it came.
pub(super) fn answered(
    act: &mut LockActor,
    waiter: u64,
    reply: redis::RedisResult<AcquireReply>,
    sent: Instant,
) -> Answer {
    let as_is = |reply| Answer {
        reply,
        sent,
        extend: None,
    };
    if !matches!(reply, Ok(AcquireReply::Busy { .. })) {
        return as_is(reply);
    }
    // Only a waiter a message came for while its attempt was out: every
    // other busy answer (most of them, on a contended lock) goes on as is.
    let watchdog = act.shared.config.watchdog_lease;
    let Some(w) = act
        .wait
        .side
        .engine_mut()
        .and_then(|e| e.policy_mut().1.get_mut(waiter))
    else {
        return as_is(reply);
    };
    let Some(token) = w.want.handed_token.filter(|_| w.want.placing) else {
        return as_is(reply);
    };
    let lease = w.want.req.lease.unwrap_or(watchdog);
    let field = w.want.req.field.clone();
    let (confirms, confirmed) = confirming(act);
    let from = counted_from(Some(sent), lease).filter(|_| !confirms);
    let Some(from) = from else {
        return as_is(reply);
    };
    if let Some(w) = act
        .wait
        .side
        .engine_mut()
        .and_then(|e| e.policy_mut().1.get_mut(waiter))
    {
        w.want.handed = false;
        w.want.handed_token = None;
    }
    if !confirmed {
        wire::record_unconfirmed("grant", &act.name);
    }
    Answer {
        reply: Ok(AcquireReply::Acquired {
            token,
            holds: 1,
            confirmed,
        }),
        sent: from,
        extend: Some((field, lease)),
    }
}

/// Whether a grant must be confirmed by a replica here (so it cannot be made
/// from the message alone: nothing behind it would confirm it), and, if not,
/// whether it counts as confirmed (as a script's answer would say: yes when
/// nothing is asked, no when confirmation is on but no replica ever attached).
/// Grants that are refused unconfirmed (`Config::refuse_unconfirmed_grants`)
/// are asked for too.
fn confirming(act: &LockActor) -> (bool, bool) {
    let conn = act.shared.node.conn();
    let confirmation = conn.confirmation(Some(&act.name));
    // Where masters fail over, a message may come from a master demoted while
    // it was frozen, whose in-flight release ran when it resumed: the lock's
    // master now (a promoted replica) has no replica yet, so nothing above
    // would ask, and the waiter would hold on the old master's word beside the
    // new master's holder (seen in the chaos suite: an overlap with a lower
    // token, untold). Asking goes to the master that owns the lock now.
    let fails_over = conn.fails_over() && confirmation.as_ref().is_some_and(|c| c.wanted() > 0);
    let confirms = act.shared.config.refuse_unconfirmed
        || fails_over
        || confirmation.as_ref().is_some_and(|c| c.wants_replicas());
    (confirms, confirmation.is_none_or(|c| c.wanted() == 0))
}

/// When a grant from the message counts its `lease` from, so that it ends
/// where the handed one surely does: [`HAND_LEASE`] after the last call that
/// found its place (`placed_at`, before the release). `None` when that leaves
/// less than [`MARGIN`]: the waiter asks instead.
fn counted_from(placed_at: Option<Instant>, lease: Duration) -> Option<Instant> {
    let ends = placed_at? + HAND_LEASE;
    (ends > Instant::now() + MARGIN)
        .then(|| ends.checked_sub(lease))
        .flatten()
}

/// Makes the handed hold of `field` (granted from the message) last the
/// holder's own lease: one renewal, which never takes a lock that is not
/// held. Not held any more: the holding is lost (told to its guards).
pub(super) fn extend(
    act: &mut LockActor,
    field: &str,
    lease: Duration,
    ctx: &mut Context<LockActor>,
) {
    let Some(epoch) = act
        .held
        .holdings
        .iter()
        .find(|h| &*h.field == field)
        .map(|h| h.epoch)
    else {
        return; // released (or lost) already
    };
    let (name, field): (Arc<str>, Arc<str>) = (act.name.clone(), Arc::from(field));
    let mut conn = act.shared.node.conn();
    let sent = Instant::now();
    let held_field = field.clone();
    let renew = async move {
        let locks = [(&*name, &*held_field)];
        let call = wire::RenewHashes {
            locks: &locks,
            lease_ms: millis(lease),
            marked: false,
        };
        wire::call(&mut conn, &call).await
    };
    ctx.spawn(renew.into_actor(act).map(move |res, act, ctx| {
        let extension = Extension { epoch, sent, lease };
        extension.answered(act, res, field, ctx);
    }));
}

/// One extension of a handed lease, sent at `sent`, for holding `epoch`.
struct Extension {
    epoch: u64,
    sent: Instant,
    lease: Duration,
}

impl Extension {
    /// Its answer: the holding is held until `sent` plus its lease, lost, or
    /// (on an error) tried again while the short lease lasts.
    fn answered(
        self,
        act: &mut LockActor,
        res: redis::RedisResult<Vec<bool>>,
        field: Arc<str>,
        ctx: &mut Context<LockActor>,
    ) {
        let Some(left) = act.held.holdings.get(self.epoch).map(|h| h.valid_until) else {
            return; // released (or lost) meanwhile
        };
        match res {
            Ok(held) if held.first() == Some(&true) => {
                let renewal = act
                    .wait
                    .side
                    .kind()
                    .scripts()
                    .renewal(AcquireKind::Exclusive);
                let g = Granting {
                    name: &act.name,
                    shared: &act.shared,
                    renewal,
                    addr: ctx.address(),
                };
                act.held.extended(self.epoch, self.sent, g);
                act.arm_expiry(ctx);
            }
            Ok(_) => {
                warn!(lock = %act.name, "a lock handed over was gone before its lease was extended");
                act.lose(self.epoch, LostReason::OwnerGone, ctx);
                act.look(ctx);
            }
            // Tried again while the short lease lasts (a dropped connection
            // comes back within it); past that the holding is lost, told
            // now rather than at the renewer's next sweep of it.
            Err(e) if left > Instant::now() + EXTEND_AGAIN => {
                debug!(lock = %act.name, error = %e, "extending a handed-over lock's lease failed; trying again");
                let lease = self.lease;
                ctx.run_later(EXTEND_AGAIN, move |act, ctx| {
                    extend(act, &field, lease, ctx)
                });
            }
            Err(e) => {
                warn!(lock = %act.name, error = %e, "extending a handed-over lock's lease failed until its short lease ran out");
                act.lose(self.epoch, LostReason::Unreachable, ctx);
                act.look(ctx);
            }
        }
    }
}

/// A hold handed to a waiter that left: given back at once.
fn give_back(act: &mut LockActor, field: &str, ctx: &mut Context<LockActor>) {
    debug!(lock = %act.name, field, "a lock was handed to a waiter that left: given back");
    let g = Giveback {
        name: act.name.clone(),
        kind: AcquireKind::Exclusive,
        field: Arc::from(field),
        lease_ms: millis(HAND_LEASE),
        request_id: Arc::from(crate::random::request_id()),
        retry: false,
    };
    let release = act.wait.side.kind().scripts().release(&act.shared, g);
    ctx.spawn(release.into_actor(act).map(|res, act, _| {
        if let Err(e) = res {
            warn!(lock = %act.name, error = %e, "giving back a lock handed to a waiter that left failed; its short lease runs out");
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_handoff_message_names_a_token_and_a_field() {
        assert_eq!(parse("17,c1:3"), Some((17, "c1:3")));
        assert_eq!(parse("17,a:b:3"), Some((17, "a:b:3")));
        assert_eq!(parse("x,c1:3"), None);
        assert_eq!(parse("17,"), None);
        assert_eq!(parse("17"), None);
    }
}
