//! Who holds a lock: every manager registers host, pid, program, label, start time
//! and version under its client id (`lockwarden:client:{<client id>}`), kept alive
//! with a TTL of one watchdog lease; `Inspect` and `Admin` name each holder by it,
//! and show a Redisson holder, a gone manager or a malformed entry as unknown;
//! a wait that runs out names the holder the same way (`LockError::Timeout`).

use crate::support;

use std::time::Duration;

use lockwarden::{Acquire, Admin, ClientInfo, Inspect, LockError, LockInfo, UNKNOWN_CLIENT};
use support::{config, eventually, exists, hold, manager, raw, Captured, RedisServer};

/// The registry key of the manager that holds `info`'s only holder.
fn key_of(info: &LockInfo) -> String {
    let id = info.holders[0].client_id().expect("a uuid client id");
    format!("lockwarden:client:{{{id}}}")
}

/// The registry keys on the server.
fn registry_keys(server: &RedisServer) -> Vec<String> {
    raw(server, &["KEYS", "lockwarden:client:*"])
}

/// A holder is named by this process's host, pid, program and label, through
/// `Inspect` and through `Admin` (describe and list); the label is kept raw and
/// escaped when shown.
#[actix_rt::test]
async fn a_holder_is_named_by_host_pid_and_label() {
    let server = RedisServer::start();
    let label = "billing\nworker \u{1b}[31m";
    let m = manager(&server, |c| c.label(label)).await;
    let _g = hold(&m, "who:1", |a| a).await;

    let info = m
        .send(Inspect::new("who:1"))
        .await
        .expect("running")
        .expect("inspect");
    let client: &ClientInfo = info.holders[0].client.as_ref().expect("registered");
    assert_eq!(client.pid, std::process::id());
    assert_eq!(client.label.as_deref(), Some(label));
    assert_eq!(client.version, env!("CARGO_PKG_VERSION"));
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        assert_eq!(client.host, host.trim());
    }
    // The test binary's file: `<target>-<hash>`, the target being this group's.
    assert!(
        client.program.starts_with(env!("CARGO_CRATE_NAME")),
        "{}",
        client.program
    );
    let shown = info.holders[0].who();
    assert!(
        shown.contains(r#"label "billing\nworker \u{1b}[31m""#),
        "{shown}"
    );
    assert!(!shown.chars().any(char::is_control), "{shown:?}");

    let admin = Admin::connect(&config(&server)).await.expect("admin");
    let described = admin
        .describe("who:1")
        .await
        .expect("describe")
        .expect("held");
    assert_eq!(described.holders[0].client.as_ref(), Some(client));
    let listed = admin.list("who:*").await.expect("list");
    assert_eq!(listed[0].holders[0].client.as_ref(), Some(client));
    // The registry entry itself is not a lock.
    let all = admin.list("*").await.expect("list all");
    assert_eq!(all.len(), 1, "{all:?}");
}

/// A holder written by another client (a Redisson-style owner field with no
/// entry), one whose entry is a string, and one whose entry holds garbage all
/// read as unknown, and reading them fails nothing.
#[actix_rt::test]
async fn foreign_and_malformed_entries_read_as_unknown() {
    let server = RedisServer::start();
    let ids = [
        "11111111-2222-4333-8444-555555555555",
        "21111111-2222-4333-8444-555555555555",
        "31111111-2222-4333-8444-555555555555",
    ];
    for (i, id) in ids.iter().enumerate() {
        let _: i64 = raw(
            &server,
            &["HSET", &format!("odd:{i}"), &format!("{id}:1"), "1"],
        );
    }
    let _: () = raw(
        &server,
        &["SET", &format!("lockwarden:client:{{{}}}", ids[1]), "x"],
    );
    let _: i64 = raw(
        &server,
        &[
            "HSET",
            &format!("lockwarden:client:{{{}}}", ids[2]),
            "host",
            "h",
            "pid",
            "not a number",
            "started_ms",
            "yesterday",
        ],
    );
    let m = manager(&server, |c| c).await;
    for i in 0..ids.len() {
        let info = m
            .send(Inspect::new(format!("odd:{i}")))
            .await
            .expect("running")
            .expect("inspect does not fail on a bad entry");
        assert_eq!(info.holders[0].client, None, "odd:{i}");
        assert_eq!(info.holders[0].who(), UNKNOWN_CLIENT);
    }
    let admin = Admin::connect(&config(&server)).await.expect("admin");
    let listed = admin.list("odd:*").await.expect("list");
    assert_eq!(listed.len(), 3);
    assert!(listed.iter().all(|l| l.holders[0].client.is_none()));
}

/// The entry lives with a TTL of at most one watchdog lease, is rewritten while
/// the manager runs (it outlives several leases), and is gone within a lease once
/// the manager and its locks are gone.
#[actix_rt::test]
async fn the_entry_is_kept_alive_and_expires_after_the_manager() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    let m = manager(&server, |c| {
        c.watchdog_lease(lease)
            .idle_timeout(Duration::from_millis(100))
    })
    .await;
    let g = hold(&m, "alive:1", |a| a).await;
    let info = m
        .send(Inspect::new("alive:1"))
        .await
        .expect("running")
        .expect("inspect");
    let key = key_of(&info);
    assert!(exists(&server, &key));
    // Four leases: the entry must have been rewritten to still be there.
    let until = std::time::Instant::now() + lease * 4;
    while std::time::Instant::now() < until {
        let ttl: i64 = raw(&server, &["PTTL", &key]);
        assert!(ttl > 0 && ttl <= 600, "PTTL {ttl} ms");
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    g.release().await.expect("released");
    drop(m);
    let gone = eventually(Duration::from_secs(10), || !exists(&server, &key)).await;
    assert!(gone, "the entry outlived its manager");
}

/// Memory per manager (not per lock): one small hash, measured with MEMORY
/// USAGE; holding 200 locks adds no registry entry.
#[actix_rt::test]
async fn the_registry_costs_one_small_hash_per_manager() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c.label("orders-worker")).await;
    let mut guards = Vec::new();
    for i in 0..200 {
        guards.push(hold(&m, &format!("mem:{i}"), |a| a).await);
    }
    let keys = registry_keys(&server);
    assert_eq!(keys.len(), 1, "{keys:?}");
    let bytes: i64 = raw(&server, &["MEMORY", "USAGE", &keys[0]]);
    eprintln!("client registry entry: {bytes} bytes of Redis memory per manager");
    assert!(bytes > 0 && bytes < 512, "{bytes} bytes");
    for g in guards {
        g.release().await.expect("released");
    }
}

/// A manager started as a user with every right on the test's lock keys and
/// channels but none on the registry keys, plus `extra` ACL rules; answers it and
/// the user's URL.
async fn locker_without_registry(
    server: &RedisServer,
    extra: &[&str],
) -> (actix::Addr<lockwarden::LockManager>, String) {
    let mut rules = vec![
        "ACL",
        "SETUSER",
        "locker",
        "on",
        ">pw",
        "~reg:*",
        "~redisson_*",
        "&*",
        "+@all",
    ];
    rules.extend_from_slice(extra);
    let _: () = raw(server, &rules);
    let url = format!("redis://locker:pw@127.0.0.1:{}", server.port());
    let m = lockwarden::LockManager::start(lockwarden::Config::from_url(&url).expect("url"))
        .await
        .expect("a manager starts without the registry");
    (m, url)
}

/// A user whose ACL leaves out the registry keys still takes and releases locks;
/// the refused write is logged as one warning naming the ACL, and its holders
/// show as unknown.
#[actix_rt::test]
async fn an_acl_without_the_registry_fails_no_lock() {
    let (log, _logging) = Captured::install();
    let server = RedisServer::start();
    let (m, _) = locker_without_registry(&server, &[]).await;
    let g = m
        .send(Acquire::new("reg:1").wait(Duration::from_secs(5)))
        .await
        .expect("running")
        .expect("the lock is granted");
    let info = m
        .send(Inspect::new("reg:1"))
        .await
        .expect("running")
        .expect("inspect");
    assert_eq!(info.holders[0].client, None);
    assert!(registry_keys(&server).is_empty());
    g.release().await.expect("released");
    // The entry is written in the background after the manager starts: on a busy
    // machine that may come after all of the above.
    let denied = |l: &&str| l.contains("WARN") && l.contains("does not allow the client registry");
    let warned = eventually(Duration::from_secs(10), || {
        log.text().lines().any(|l| denied(&l))
    })
    .await;
    let text = log.text();
    assert!(warned, "no warning about the registry: {text}");
    let warnings: Vec<&str> = text.lines().filter(denied).collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(warnings[0].contains("ACL"), "{text}");
}

/// A user that may HSET the registry entry but not PEXPIRE it (a selector grants
/// only HSET on `lockwarden:client:*`) writes nothing there: the right the write
/// needs after its first command is asked for before it, so no entry is left
/// without its TTL (it would outlive the process for ever). Locks still work.
#[actix_rt::test]
async fn a_registry_entry_is_never_left_without_its_ttl() {
    let server = RedisServer::start();
    let (m, url) = locker_without_registry(&server, &["(+hset ~lockwarden:client:*)"]).await;
    let g = m
        .send(Acquire::new("reg:2").wait(Duration::from_secs(5)))
        .await
        .expect("running")
        .expect("the lock is granted");
    g.release().await.expect("released");
    // The manager's first write was made (and refused) before the lock was taken.
    assert!(registry_keys(&server).is_empty());
    // The same user, asked directly, may write the entry's fields.
    let mut conn = redis::Client::open(url.as_str())
        .expect("url")
        .get_connection()
        .expect("connect");
    let _: i64 = redis::cmd("HSET")
        .arg("lockwarden:client:{probe}")
        .arg("host")
        .arg("x")
        .query(&mut conn)
        .expect("HSET is allowed on the entry");
}

/// The registry line of docs/operations.md's least-privilege ACL (`+hset +pexpire
/// ~lockwarden:client:*`) beside the exclusive lock's rights is
/// enough to register; an operator with `+hgetall` on it names the holder.
#[actix_rt::test]
async fn the_documented_registry_acl_is_enough() {
    let server = RedisServer::start();
    let _: () = raw(
        &server,
        &[
            "ACL",
            "SETUSER",
            "locks",
            "on",
            ">pw",
            "resetkeys",
            "resetchannels",
            "-@all",
            "+evalsha",
            "+script|load",
            "+hexists",
            "+hget",
            "+hincrby",
            "+pexpire",
            "+pttl",
            "+time",
            "+set",
            "+get",
            "+del",
            "+publish",
            "+pubsub|numsub",
            "+subscribe",
            "+unsubscribe",
            "+ping",
            "+info",
            "+hset",
            "~acl:*",
            "~redisson_lock_token:{acl:*",
            "~redisson_unlock_latch:{acl:*",
            "~redisson_lock__channel:{acl:*",
            "&redisson_lock__channel:{acl:*",
            "~lockwarden:client:*",
        ],
    );
    let url = format!("redis://locks:pw@127.0.0.1:{}", server.port());
    let m = lockwarden::LockManager::start(lockwarden::Config::from_url(&url).expect("url"))
        .await
        .expect("manager starts");
    let g = hold(&m, "acl:1", |a| a).await;
    let keys = registry_keys(&server);
    assert_eq!(keys.len(), 1, "{keys:?}");
    let ttl: i64 = raw(&server, &["PTTL", &keys[0]]);
    assert!(ttl > 0 && ttl <= 30_000, "PTTL {ttl}");
    let admin = Admin::connect(&config(&server)).await.expect("admin");
    let seen = admin
        .describe("acl:1")
        .await
        .expect("describe")
        .expect("held");
    assert_eq!(
        seen.holders[0].client.as_ref().map(|c| c.pid),
        Some(std::process::id())
    );
    g.release().await.expect("released");
}

/// A label over 256 bytes is refused with a clear error before anything
/// connects; 256 bytes are accepted.
#[actix_rt::test]
async fn an_overlong_label_is_refused() {
    let server = RedisServer::start();
    let long = config(&server).label("x".repeat(257));
    assert!(matches!(
        long.validate(),
        Err(lockwarden::LockError::InvalidConfig(why)) if why.contains("label")
    ));
    let refused = lockwarden::LockManager::start(config(&server).label("x".repeat(257))).await;
    assert!(matches!(
        refused,
        Err(lockwarden::LockError::InvalidConfig(_))
    ));
    assert!(registry_keys(&server).is_empty());
    assert!(config(&server).label("x".repeat(256)).validate().is_ok());
}

/// A wait that runs out names who holds the lock (issue 38): the error carries
/// the holder with its host, pid and label, its text says them as the command
/// does, and reading them delays the answer by a round trip at most (bounded at
/// 100 ms); a zero wait (one attempt) reads nothing.
#[actix_rt::test]
async fn a_timeout_names_the_holder() {
    let server = RedisServer::start();
    let holder = manager(&server, |c| c.label("nightly-report")).await;
    let waiter = manager(&server, |c| c).await;
    let _g = hold(&holder, "named", |a| a).await;

    let asked = std::time::Instant::now();
    let err = waiter
        .send(Acquire::new("named").wait(Duration::from_millis(300)))
        .await
        .expect("running")
        .expect_err("held elsewhere");
    let answered = asked.elapsed();
    let LockError::Timeout {
        waited,
        holder: Some(named),
    } = &err
    else {
        panic!("a timeout naming the holder: {err:?}");
    };
    assert!(*waited >= Duration::from_millis(300), "{waited:?}");
    assert!(
        answered < Duration::from_millis(300 + 250),
        "answered after {answered:?}"
    );
    let client = named.client.as_ref().expect("the holder's registry entry");
    assert_eq!(client.label.as_deref(), Some("nightly-report"));
    assert_eq!(client.pid, std::process::id());
    assert!(!named.this_manager);
    let text = err.to_string();
    assert!(text.contains("label \"nightly-report\""), "{text}");
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    assert!(text.contains(&named.owner_field), "{text}");

    let tried = waiter
        .send(Acquire::new("named").wait(Duration::ZERO))
        .await
        .expect("running");
    assert!(
        matches!(tried, Err(LockError::Timeout { holder: None, .. })),
        "{tried:?}"
    );
}
