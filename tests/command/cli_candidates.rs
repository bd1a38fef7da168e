//! Election candidates as `status` and `top` show them (issue 47): a
//! `Leader` candidate waits on its leader lock for as long as it runs, by
//! design, so it is counted apart ("1 election candidate") with when it began
//! campaigning, never listed as a waiter whose wait grows, and not counted as
//! waiting; a plain waiter on the same lock is still shown as one.
#![cfg(feature = "cli")]

use crate::support;

use std::time::Duration;

use crate::cli_who::output;
use actix::prelude::*;
use lockwarden::{Acquire, Deposed, Elected, Leader, LockManager};
use serde_json::Value;
use support::{eventually, manager, raw, RedisServer};

/// The leader lock of the scene.
const NAME: &str = "lead:jobs";

/// An application actor that ignores what its candidate hears.
struct Quiet;

impl Actor for Quiet {
    type Context = Context<Self>;
}

impl Handler<Elected> for Quiet {
    type Result = ();
    fn handle(&mut self, _: Elected, _: &mut Context<Self>) {}
}

impl Handler<Deposed> for Quiet {
    type Result = ();
    fn handle(&mut self, _: Deposed, _: &mut Context<Self>) {}
}

/// A candidate for `NAME` through `manager`.
async fn campaign(manager: &Addr<LockManager>) -> Addr<Leader> {
    let app = Quiet.start();
    Leader::campaign(
        manager.clone(),
        NAME,
        app.clone().recipient(),
        app.recipient(),
    )
    .await
    .expect("campaign")
}

/// The members of `NAME`'s waiting records.
fn records(server: &RedisServer) -> Vec<String> {
    raw(
        server,
        &[
            "ZRANGE",
            &format!("lockwarden_waiters:{{{NAME}}}"),
            "0",
            "-1",
        ],
    )
}

/// Two candidates of two managers (the first leads) and a plain waiter of a
/// third: `status` lists the waiter with its wait and the other candidate
/// under "1 election candidate" with when it began campaigning; `--json`
/// marks it `candidate`; a piped `top` counts one waiting and names the
/// candidate in a field of its own, and on a terminal after the waiter.
#[actix_rt::test]
async fn a_candidate_is_shown_apart_from_waiters() {
    let server = RedisServer::start();
    let (a, b, c) = (
        manager(&server, |c| c).await,
        manager(&server, |c| c).await,
        manager(&server, |c| c).await,
    );
    let _leader = campaign(&a).await;
    assert!(
        eventually(Duration::from_secs(10), || support::exists(&server, NAME)).await,
        "the first candidate was not elected"
    );
    let _candidate = campaign(&b).await;
    let waiter = actix_rt::spawn(async move {
        let _ = c
            .send(Acquire::new(NAME).wait(Duration::from_secs(60)))
            .await;
    });
    // Both waits are recorded after a second of waiting: a candidate's with
    // its own letter.
    let recorded = eventually(Duration::from_secs(10), || {
        let members = records(&server);
        members.iter().any(|m| m.ends_with("|c")) && members.iter().any(|m| m.ends_with("|x"))
    })
    .await;
    assert!(recorded, "records: {:?}", records(&server));
    let members = records(&server);
    let owner_of = |letter: &str| {
        let m = members
            .iter()
            .find(|m| m.ends_with(letter))
            .expect("member");
        m.split('|').next().expect("owner field").to_string()
    };
    let (candidate, plain) = (owner_of("|c"), owner_of("|x"));

    let text = output(&server, &["status", NAME]).await;
    eprintln!("status {NAME}:\n{text}");
    let line_of = |owner: &str| {
        text.lines()
            .find(|l| l.contains(owner))
            .unwrap_or_else(|| panic!("no line for {owner}:\n{text}"))
    };
    assert!(
        text.contains("  1 election candidate (Leader::campaign: each waits its turn"),
        "{text}"
    );
    assert!(line_of(&candidate).contains(" campaigns since "), "{text}");
    assert!(!line_of(&candidate).contains(" waits"), "{text}");
    assert!(line_of(&plain).contains(" waits, "), "{text}");
    assert!(line_of(&plain).contains(" so far "), "{text}");

    let json: Value =
        serde_json::from_str(&output(&server, &["status", NAME, "--json"]).await).expect("JSON");
    let waiters = json["waiters"].as_array().expect("waiters");
    let flag = |owner: &str| {
        waiters
            .iter()
            .find(|w| w["owner"] == owner)
            .map(|w| w["candidate"].clone())
    };
    assert_eq!(flag(&candidate), Some(Value::Bool(true)), "{json}");
    assert_eq!(flag(&plain), Some(Value::Bool(false)), "{json}");

    let text = output(&server, &["top", "--iterations", "1"]).await;
    let row = text
        .lines()
        .find(|l| l.starts_with(&format!("{NAME}\t")))
        .unwrap_or_else(|| panic!("no row for {NAME}:\n{text}"));
    eprintln!("top, piped:\n{row}");
    assert!(row.contains("\twaiting=1\t"), "{row}");
    assert!(
        row.contains("\tcandidates=1 election candidate: host "),
        "{row}"
    );
    let waiters_field = row
        .split('\t')
        .find(|f| f.starts_with("waiters="))
        .expect("a waiters field");
    assert!(
        waiters_field.starts_with("waiters=host ") && !waiters_field.contains(';'),
        "one waiter listed, the candidate apart: {row}"
    );

    // On a terminal: the candidate is named after the waiter on the lock's
    // row, with no time, and WAITING counts the waiter alone.
    let command = format!(
        "{} --redis {} top --iterations 1",
        env!("CARGO_BIN_EXE_lockwarden"),
        server.url()
    );
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::process::Command::new("script")
            .args(["-qfec", &command, "/dev/null"])
            .env_remove("REDIS_URL")
            .stdin(std::process::Stdio::null())
            .output(),
    )
    .await
    .expect("top within 20 s")
    .expect("script(1) from util-linux");
    let screen = String::from_utf8_lossy(&out.stdout);
    let row = screen
        .lines()
        .find(|l| l.starts_with(&format!("{NAME} ")))
        .unwrap_or_else(|| panic!("no row for {NAME}: {screen:?}"));
    eprintln!("top, on a terminal:\n{row}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let me = format!("{}/{}", host.trim(), std::process::id());
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(columns.get(2), Some(&"1"), "WAITING: {row}");
    assert!(row.contains(" waits: "), "{row}");
    assert!(
        row.trim_end()
            .ends_with(&format!("s; 1 election candidate: {me}")),
        "{row}"
    );
    waiter.abort();
}
