//! The bodies of `tests/one_server/fenced.rs`'s tests (`FencedWrite`: a write on a data key in
//! Redis that a stale fencing token cannot make), written against [`Target`] so
//! that `tests/topologies/on_cluster.rs` runs them on a cluster too, where the lock and the
//! data key live in different slots. Each scenario's doc is on its body here;
//! `each!` at the end lists them once for both runs.

use std::time::Duration;

use lockwarden::{FencedWrite, LockError, FENCE_TOKEN_MARGIN};
use redis::Value;

use crate::support::{eventually, hold, Target};

/// The classic counter-example, 20 times over: holder A's lease runs out while it
/// is paused, B takes the lock and writes, then A wakes and writes. A's write is
/// refused with `StaleToken` naming both tokens, and the data is B's.
pub async fn a_paused_holder_cannot_write_after_a_later_holder(t: &Target) {
    let a = t.manager(|c| c).await;
    let b = t.manager(|c| c).await;
    let (lock, data) = ("fenced:acct", "fenced:acct:balance");
    let mut refused = 0;
    for round in 0..20 {
        // A's explicit lease is never renewed: its "pause" outlives it.
        let first = hold(&a, lock, |r| r.lease(Duration::from_millis(150))).await;
        let lapsed = eventually(Duration::from_secs(5), || !t.exists(lock)).await;
        assert!(lapsed, "round {round}: A's lease never ran out");
        let second = hold(&b, lock, |r| r).await;
        assert!(second.fencing_token() > first.fencing_token());
        let wrote = b
            .send(FencedWrite::new(&second, data, "SET").arg(format!("B{round}")))
            .await
            .expect("running");
        assert_eq!(wrote.expect("B's write"), Value::Okay);

        let stale = a
            .send(FencedWrite::new(&first, data, "SET").arg(format!("A{round}")))
            .await
            .expect("running");
        match stale {
            Err(LockError::StaleToken { token, newest }) => {
                assert_eq!(token, first.fencing_token());
                assert_eq!(newest, second.fencing_token());
                let why = LockError::StaleToken { token, newest }.to_string();
                assert!(why.contains("nothing was written"), "{why}");
                refused += 1;
            }
            other => panic!("round {round}: A's stale write got {other:?}"),
        }
        let value: String = t.raw(&["GET", data]);
        assert_eq!(value, format!("B{round}"), "round {round}");
        drop(first);
        second.release().await.expect("released");
    }
    assert_eq!(refused, 20);
}

/// `while_held` also refuses a holder whose lock has ended even when nobody wrote
/// since (its token is still the newest): the hold is checked in the lock's hash.
/// The lock and the data share a hash tag. On a cluster, a lock and a key without
/// one are refused up front; on one server they are fine.
pub async fn while_held_refuses_a_holder_whose_lock_ended(t: &Target) {
    let m = t.manager(|c| c).await;
    let (lock, data) = ("fw:job", "{fw:job}:result");
    let guard = hold(&m, lock, |r| r.lease(Duration::from_millis(300))).await;
    let wrote = m
        .send(
            FencedWrite::new(&guard, data, "HSET")
                .arg("state")
                .arg("running")
                .while_held(),
        )
        .await
        .expect("running");
    assert_eq!(wrote.expect("written while held"), Value::Int(1));
    let lapsed = eventually(Duration::from_secs(5), || !t.exists(lock)).await;
    assert!(lapsed, "the lease never ran out");
    let late = m
        .send(
            FencedWrite::new(&guard, data, "HSET")
                .arg("state")
                .arg("late")
                .while_held(),
        )
        .await
        .expect("running");
    assert!(matches!(late, Err(LockError::NotHeld)), "{late:?}");
    let state: String = t.raw(&["HGET", data, "state"]);
    assert_eq!(state, "running", "nothing written after the lock ended");

    let guard = hold(&m, "fw:other", |r| r).await;
    let apart = m
        .send(
            FencedWrite::new(&guard, "fw:elsewhere", "SET")
                .arg(1)
                .while_held(),
        )
        .await
        .expect("running");
    if t.is_cluster() {
        assert!(
            matches!(apart, Err(LockError::InvalidRequest(_))),
            "{apart:?}"
        );
        assert!(!t.exists("fw:elsewhere"));
    } else {
        assert_eq!(apart.expect("one server: any two keys"), Value::Okay);
    }
    guard.release().await.expect("released");
}

/// A fenced write hands back the command's own reply (an integer, nil, an
/// array), and a command Redis refuses (INCRBY on text) is its error, with the
/// fence left as it was: the next write with the same token still goes.
pub async fn the_commands_reply_and_errors_come_back(t: &Target) {
    let m = t.manager(|c| c).await;
    let guard = hold(&m, "fw:counter", |r| r).await;
    let send = |w: FencedWrite| {
        let m = m.clone();
        async move { m.send(w).await.expect("running") }
    };
    let n = send(FencedWrite::new(&guard, "fw:count", "INCRBY").arg(5)).await;
    assert_eq!(n.expect("incremented"), Value::Int(5));
    let nothing = send(FencedWrite::new(&guard, "fw:absent", "GETDEL")).await;
    assert_eq!(nothing.expect("a nil reply"), Value::Nil);
    let _: () = t.raw(&["SET", "fw:text", "abc"]);
    let refused = send(FencedWrite::new(&guard, "fw:text", "INCRBY").arg(1)).await;
    assert!(matches!(refused, Err(LockError::Redis(_))), "{refused:?}");
    let text: String = t.raw(&["GET", "fw:text"]);
    assert_eq!(text, "abc");
    assert!(
        !t.exists("lockwarden_fence:{fw:text}:fw:text"),
        "a failed write set no fence"
    );
    let list = send(
        FencedWrite::new(&guard, "fw:list", "RPUSH")
            .arg("a")
            .arg("b"),
    )
    .await;
    assert_eq!(list.expect("pushed"), Value::Int(2));
    guard.release().await.expect("released");
}

/// Requests that cannot be right are refused before anything is sent, and Redis
/// is left as it was: an empty key, no command, a command with a space in it, a
/// zero token, and `while_held` on a write made from a bare token.
pub async fn bad_fenced_writes_change_nothing(t: &Target) {
    let m = t.manager(|c| c).await;
    let guard = hold(&m, "fw:bad", |r| r).await;
    let cases = [
        FencedWrite::new(&guard, "", "SET").arg(1),
        FencedWrite::new(&guard, "fw:x", ""),
        FencedWrite::new(&guard, "fw:x", "SET fw:x 1"),
        FencedWrite::with_token(0, "fw:x", "SET").arg(1),
        FencedWrite::with_token(7, "fw:x", "SET")
            .arg(1)
            .while_held(),
    ];
    for (i, case) in cases.into_iter().enumerate() {
        let got = m.send(case).await.expect("running");
        assert!(
            matches!(
                got,
                Err(LockError::InvalidRequest(_) | LockError::InvalidName(_))
            ),
            "case {i}: {got:?}"
        );
    }
    // What a wrongly accepted case would have written (a count of all keys would
    // also see an earlier scenario's keys expire on a shared cluster).
    for key in ["fw:x", "lockwarden_fence:{fw:x}:fw:x"] {
        assert!(!t.exists(key), "a refused write wrote {key}");
    }
    guard.release().await.expect("released");
}

/// Two data keys with one hash tag (`fw:t` and `{fw:t}`) have a fence each, in
/// the data key's slot: a later holder's write to one leaves an earlier token's
/// write to the other accepted. (They shared `lockwarden_fence:{fw:t}`, and the
/// second write was refused as stale.)
pub async fn keys_with_one_tag_have_a_fence_each(t: &Target) {
    let m = t.manager(|c| c).await;
    let first = hold(&m, "fw:tag", |r| r).await;
    let earlier = first.fencing_token();
    first.release().await.expect("released");
    let later = hold(&m, "fw:tag", |r| r).await;
    assert!(later.fencing_token() > earlier);
    let wrote = m
        .send(FencedWrite::new(&later, "{fw:t}", "SET").arg("later"))
        .await
        .expect("running");
    assert_eq!(wrote.expect("the later holder's write"), Value::Okay);
    let wrote = m
        .send(FencedWrite::with_token(earlier, "fw:t", "SET").arg("earlier"))
        .await
        .expect("running");
    assert_eq!(wrote.expect("a write to another key"), Value::Okay);

    for (data, fence, token) in [
        (
            "{fw:t}",
            "lockwarden_fence:{fw:t}:{fw:t}",
            later.fencing_token(),
        ),
        ("fw:t", "lockwarden_fence:{fw:t}:fw:t", earlier),
    ] {
        let newest: u64 = t.raw(&["GET", fence]);
        assert_eq!(newest, token, "{fence}");
        let pair = [data.to_string(), fence.to_string()];
        assert_eq!(t.slots(&pair), 1, "{fence} is not in {data}'s slot");
    }
    later.release().await.expect("released");
}

/// A fenced write may not touch the keys lockwarden and Redisson keep beside a
/// lock: the guard's own lock (a SET would turn its hash into a string), a fence
/// (a write would lower it), the fencing counter, and every other family of
/// `keys.rs`. Each is refused with `ReservedKey` before anything is sent: the
/// lock is still held and released, the fence and counter keep their values, and
/// no other key appears.
pub async fn lockwardens_own_keys_are_refused(t: &Target) {
    let m = t.manager(|c| c).await;
    let guard = hold(&m, "fw:own", |r| r).await;
    let wrote = m
        .send(FencedWrite::new(&guard, "fw:own:data", "SET").arg(1))
        .await
        .expect("running");
    assert_eq!(wrote.expect("a data key"), Value::Okay);
    let fence = "lockwarden_fence:{fw:own:data}:fw:own:data";
    let counter = "redisson_lock_token:{fw:own}";
    let fence_before: String = t.raw(&["GET", fence]);
    let counter_before: String = t.raw(&["GET", counter]);

    let absent = [
        "redisson_unlock_latch:{fw:own}:r1",
        "redisson_lock__channel:{fw:own}",
        "redisson_lock_queue:{fw:own}",
        "redisson_lock_timeout:{fw:own}",
        "redisson_rwlock:{fw:own}",
        "{fw:own}:id:7:rwlock_timeout:1",
        "redisson_sc:{fw:sem}",
        "{fw:sem}:timeout",
        "redisson_countdownlatch__channel__{fw:latch}",
        "lockwarden_kind:{fw:sem}",
        "lockwarden:client:{fw:someone}",
        "lockwarden_fence:{fw:own}:fw:own",
    ];
    let mut cases = vec![
        FencedWrite::new(&guard, "fw:own", "SET").arg("x"),
        FencedWrite::new(&guard, fence, "SET").arg(1),
        FencedWrite::new(&guard, fence, "DEL"),
        FencedWrite::with_token(guard.fencing_token(), counter, "SET").arg(1),
    ];
    for key in absent {
        cases.push(FencedWrite::new(&guard, key, "SET").arg(1));
    }
    for (i, case) in cases.into_iter().enumerate() {
        let got = m.send(case).await.expect("running");
        match got {
            Err(e @ LockError::ReservedKey { .. }) => {
                let why = e.to_string();
                assert!(why.contains("nothing was sent to Redis"), "{why}");
            }
            other => panic!("case {i}: {other:?}"),
        }
    }

    let kind: String = t.raw(&["TYPE", "fw:own"]);
    assert_eq!(kind, "hash", "the lock is still a hash");
    let fence_after: String = t.raw(&["GET", fence]);
    assert_eq!(fence_after, fence_before);
    let counter_after: String = t.raw(&["GET", counter]);
    assert_eq!(counter_after, counter_before);
    for key in absent {
        assert!(!t.exists(key), "a refused write wrote {key}");
    }
    guard.release().await.expect("still held, and released");
}

/// The data's server clock in microseconds (TIME).
fn server_clock(t: &Target) -> u64 {
    let (secs, micros): (u64, u64) = t.raw(&["TIME"]);
    secs * 1_000_000 + micros
}

/// A token no lock can have issued yet (more than `FENCE_TOKEN_MARGIN` ahead of
/// the server clock, which tokens follow) is refused with `TokenTooHigh` and
/// writes neither the data nor the fence, so a real holder writes next. One
/// within the margin (clock skew between two servers) goes. (9x10^15 used to be
/// accepted and refuse every real holder after it.)
pub async fn a_token_no_lock_issued_is_refused(t: &Target) {
    let m = t.manager(|c| c).await;
    let guard = hold(&m, "fw:far", |r| r).await;
    let margin = u64::try_from(FENCE_TOKEN_MARGIN.as_micros()).expect("fits");
    let minute = 60_000_000;
    let before = server_clock(t);
    let data = "fw:far:data";
    for token in [9_000_000_000_000_000, u64::MAX, before + margin + minute] {
        let got = m
            .send(FencedWrite::with_token(token, data, "SET").arg("made up"))
            .await
            .expect("running");
        let Err(e) = got else {
            panic!("token {token} was accepted: {got:?}")
        };
        let LockError::TokenTooHigh {
            token: refused,
            server_clock: clock,
        } = e
        else {
            panic!("token {token}: {e:?}")
        };
        assert_eq!(refused, token);
        assert!(
            clock >= before && clock < before + minute,
            "server clock {clock}, read {before} just before"
        );
        let why = e.to_string();
        assert!(why.contains("nothing was written"), "{why}");
    }
    assert!(!t.exists(data), "a refused write wrote the data");
    assert!(
        !t.exists("lockwarden_fence:{fw:far:data}:fw:far:data"),
        "a refused write wrote the fence"
    );
    let wrote = m
        .send(FencedWrite::new(&guard, data, "SET").arg("real"))
        .await
        .expect("running");
    assert_eq!(wrote.expect("the real holder writes"), Value::Okay);

    let near = before + margin - minute;
    let wrote = m
        .send(FencedWrite::with_token(near, "fw:far:skewed", "SET").arg(1))
        .await
        .expect("running");
    assert_eq!(wrote.expect("a token within the margin"), Value::Okay);
    guard.release().await.expect("released");
}

/// A fence that holds what no fenced write leaves there (text, a hash, a token
/// far ahead of the server clock, say from before tokens were checked) is
/// refused with `DamagedFence`, which names the key, the fence and how to start
/// over; the data and the fence stay as they were. (Text failed inside the
/// script, a hash with WRONGTYPE, and the far token refused every holder as
/// stale.)
pub async fn a_damaged_fence_is_named(t: &Target) {
    let m = t.manager(|c| c).await;
    let guard = hold(&m, "fw:dmg", |r| r).await;
    for (data, damage, holds) in [
        ("fw:dmg:text", &["SET", "abc"][..], "the text \"abc\""),
        ("fw:dmg:hash", &["HSET", "f", "v"], "a hash"),
        (
            "fw:dmg:far",
            &["SET", "9000000000000000"],
            "the token 9000000000000000",
        ),
    ] {
        let fence = format!("lockwarden_fence:{{{data}}}:{data}");
        let mut write = vec![damage[0], &fence];
        write.extend(&damage[1..]);
        let _: () = t.raw(&write);
        let dump_before: Vec<u8> = t.raw(&["DUMP", &fence]);
        let got = m
            .send(FencedWrite::new(&guard, data, "SET").arg(1))
            .await
            .expect("running");
        let Err(e) = got else {
            panic!("{data}: written over a damaged fence: {got:?}")
        };
        let LockError::DamagedFence {
            key,
            fence: named,
            holds: what,
        } = &e
        else {
            panic!("{data}: {e:?}")
        };
        assert_eq!((key.as_str(), named.as_str()), (data, fence.as_str()));
        assert!(what.starts_with(holds), "{what}");
        let why = e.to_string();
        assert!(why.contains(&format!("DEL {data:?} {fence:?}")), "{why}");
        assert!(why.contains("nothing was written"), "{why}");
        assert!(!t.exists(data), "a refused write wrote {data}");
        let dump_after: Vec<u8> = t.raw(&["DUMP", &fence]);
        assert_eq!(dump_after, dump_before, "{fence} changed");
    }
    guard.release().await.expect("released");
}

/// The scenarios of this file that hold on any deployment, in the order the
/// cluster run takes them: the one list both runs come from. `tests/one_server/fenced.rs`
/// makes a standalone test of each (`each!(standalone!(scenarios))`), and
/// `tests/topologies/on_cluster.rs` runs them in turn on one cluster (`each!(run!(..))`).
macro_rules! each {
    ($apply:ident!($($args:tt)*)) => {
        $apply! {
            $($args)*;
            a_paused_holder_cannot_write_after_a_later_holder,
            while_held_refuses_a_holder_whose_lock_ended,
            the_commands_reply_and_errors_come_back,
            bad_fenced_writes_change_nothing,
            keys_with_one_tag_have_a_fence_each,
            lockwardens_own_keys_are_refused,
            a_token_no_lock_issued_is_refused,
            a_damaged_fence_is_named,
        }
    };
}
pub(crate) use each;
