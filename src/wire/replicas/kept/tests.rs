//! The keeper's bookkeeping and the releases each lock kind keeps, without
//! Redis: what is kept, what a move settles, when the task ends.

use super::*;
use crate::wire::ScriptCall;

fn release(name: &str) -> Arc<Invocation> {
    let call = crate::wire::Release {
        name,
        field: "owner:1",
        lease_ms: 30_000,
        request_id: "r",
        latch_ttl_ms: 10_000,
        retry: false,
        hand_lease_ms: 0,
        token_ttl_ms: 60_000,
    }
    .invocation();
    let again = call.redo.as_ref().expect("a release is kept").again(&call);
    assert_eq!(again.args[4], "1", "resent as a retry");
    again
}

#[test]
fn every_kind_of_release_is_kept_and_a_hand_over_only_for_its_release() {
    use crate::wire::{FairRelease, ReadRelease, Transfer, WriteRelease};
    let (name, field, request_id) = ("l", "owner:1", "r");
    let fair = FairRelease {
        name,
        field,
        lease_ms: 3_000,
        request_id,
        latch_ttl_ms: 10_000,
    }
    .invocation();
    let redo = fair.redo.clone().expect("kept");
    // The fair script reads its latch on every call: resent as it was.
    assert_eq!(
        (redo.again(&fair).args.clone(), redo.for_ms),
        (fair.args.clone(), 3_000)
    );
    let read = ReadRelease {
        name,
        field,
        request_id,
        latch_ttl_ms: 10_000,
    }
    .invocation();
    assert_eq!(read.redo.expect("kept").for_ms, 5_000, "half the latch");
    let write = WriteRelease {
        name,
        field,
        lease_ms: 30_000,
        request_id,
        latch_ttl_ms: 10_000,
    };
    assert!(write.invocation().redo.is_some());
    let released = crate::wire::Release {
        name,
        field,
        lease_ms: 30_000,
        request_id,
        latch_ttl_ms: 10_000,
        retry: false,
        hand_lease_ms: 0,
        token_ttl_ms: 60_000,
    };
    let handed = Transfer {
        release: released,
        to: "owner:2",
        lease_ms: 30_000,
        token_ttl_ms: 60_000,
        count: false,
        delay_ms: 0,
        place_ms: 0,
    }
    .invocation();
    let again = handed.redo.as_ref().expect("kept").again(&handed);
    assert!(std::ptr::eq(again.script, released.invocation().script));
    assert_eq!(again.args[4], "1", "its release, as a retry");
}

#[test]
fn a_release_kept_before_a_followed_move_counts_as_moved_and_ends_when_settled() {
    let keeper = Keeper::default();
    let look = Arc::new(AtomicUsize::new(0));
    let (a, b) = (release("a"), release("b"));
    let until = Instant::now() + Duration::from_secs(5);
    assert!(
        keeper.push(Arc::clone(&a), until, Arc::clone(&look)),
        "the first starts the task"
    );
    // A move the connection did not follow (a cluster's) settles nothing.
    keeper.new_master(false);
    keeper.new_master(true);
    assert!(
        !keeper.push(Arc::clone(&b), until, Arc::clone(&look)),
        "one task per keeper"
    );
    let (left, _, _) = keeper.left(&[]).expect("both kept");
    let moved: Vec<bool> = left.iter().map(|r| r.moved).collect();
    assert_eq!(moved, [true, false], "only `a` was kept before the move");
    let (left, _, _) = keeper.left(&[a]).expect("b kept");
    assert!(left.len() == 1 && Arc::ptr_eq(&left[0].call, &b));
    assert_eq!(look.load(Ordering::Acquire), 1, "what Settle waits for");
    assert!(keeper.left(&[b]).is_none(), "nothing left: the task ends");
    assert_eq!(look.load(Ordering::Acquire), 0);
    assert!(
        keeper.push(release("c"), Instant::now(), Arc::clone(&look)),
        "a new task starts"
    );
    assert!(keeper.left(&[]).is_none(), "past its window");
}

#[test]
fn only_a_change_a_replica_confirmed_is_let_go() {
    assert!(!unconfirmed(true, &Confirmed::Enough));
    assert!(unconfirmed(true, &Confirmed::NotAsked));
    let none = Confirmed::NoReplica {
        refuse: false,
        wanted: 1,
    };
    assert!(unconfirmed(true, &none));
    assert!(!unconfirmed(
        true,
        &Confirmed::Short {
            acked: 0,
            wanted: 1
        }
    ));
    assert!(!unconfirmed(false, &Confirmed::NotAsked));
}
