//! Who a client id is: the entry a lock manager keeps in Redis under its client id
//! (host, process, program, label, start time, version), so that an operator who
//! finds `<client id>:<owner>` in a lock hash can tell which process holds it.
//!
//! Redisson's layout names a holder only by a random client id; the registry sits
//! beside it, under a key of its own (`keys::client_key`), never inside a lock key,
//! so Redisson clients and older lockwarden versions are unaffected. This file is
//! the vocabulary only (what the entry holds, how it is written and read back,
//! how it is shown); the renewer keeps the entry alive and the inspect paths read
//! it. What is read back is untrusted: anything else may have written that key,
//! so a malformed entry reads as "unknown", and every shown field is escaped.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What is shown for a holder whose client id has no (valid) registry entry.
pub const UNKNOWN_CLIENT: &str = "unknown client (not lockwarden, or gone)";

/// Longest field accepted when reading an entry back, in bytes: anything longer
/// was not written by lockwarden (labels are capped at [`MAX_LABEL_LEN`]).
const MAX_FIELD_LEN: usize = 1024;

/// Longest label [`Config::label`](crate::Config::label) accepts, in bytes.
pub(crate) const MAX_LABEL_LEN: usize = 256;

/// The registry entry of one lock manager, as written under its client id and as
/// [`Inspect`](crate::Inspect) and [`Admin`](crate::Admin) read it back.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// The host name of the machine the manager runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The program's file name.
    pub program: String,
    /// The label the application gave ([`Config::label`](crate::Config::label)),
    /// if any. Raw: it may hold control characters; show it with
    /// [`ClientInfo::describe`], which escapes them.
    pub label: Option<String>,
    /// When the manager started (wall clock, to the millisecond).
    pub started: SystemTime,
    /// The lockwarden version it runs.
    pub version: String,
}

impl ClientInfo {
    /// The entry of this process, for a manager started now with `label`.
    pub(crate) fn this_process(label: Option<&str>) -> ClientInfo {
        let program = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "unknown".into());
        ClientInfo {
            host: gethostname::gethostname().to_string_lossy().into_owned(),
            pid: std::process::id(),
            program,
            label: label.map(str::to_string),
            started: SystemTime::now(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// The hash fields it is written as (an empty `label` for none).
    pub(crate) fn to_fields(&self) -> Vec<(&'static str, String)> {
        let started_ms = self
            .started
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        vec![
            ("host", self.host.clone()),
            ("pid", self.pid.to_string()),
            ("program", self.program.clone()),
            ("label", self.label.clone().unwrap_or_default()),
            ("started_ms", started_ms.to_string()),
            ("version", self.version.clone()),
        ]
    }

    /// Reads an entry back from its hash fields; `None` unless every field
    /// lockwarden writes is there, is text, is short, and parses (fields it does
    /// not know are ignored, so a later version may add some).
    pub(crate) fn from_fields(fields: &[(Vec<u8>, Vec<u8>)]) -> Option<ClientInfo> {
        let get = |name: &str| -> Option<&str> {
            let (_, v) = fields.iter().find(|(f, _)| f == name.as_bytes())?;
            let v = std::str::from_utf8(v).ok()?;
            (v.len() <= MAX_FIELD_LEN).then_some(v)
        };
        let host = get("host").filter(|h| !h.is_empty())?;
        let pid = get("pid")?.parse::<u32>().ok().filter(|&p| p > 0)?;
        let started_ms = get("started_ms")?.parse::<u64>().ok()?;
        let version = get("version").filter(|v| !v.is_empty())?;
        let label = get("label")?;
        Some(ClientInfo {
            host: host.to_string(),
            pid,
            program: get("program")?.to_string(),
            label: (!label.is_empty()).then(|| label.to_string()),
            started: UNIX_EPOCH + Duration::from_millis(started_ms),
            version: version.to_string(),
        })
    }

    /// [`ClientInfo::describe`] of `client`, or [`UNKNOWN_CLIENT`] without one:
    /// how a holder or a waiter is named for people.
    pub(crate) fn describe_or_unknown(client: Option<&ClientInfo>) -> String {
        client.map_or_else(|| UNKNOWN_CLIENT.to_string(), ClientInfo::describe)
    }

    /// One line for people: `host web-3 pid 4211 label "billing" (billing-svc,
    /// lockwarden 0.1.0)`, with control characters, quotes and backslashes escaped.
    pub fn describe(&self) -> String {
        let label = match &self.label {
            Some(l) => format!(" label \"{}\"", escape(l)),
            None => String::new(),
        };
        format!(
            "host {} pid {}{label} ({}, lockwarden {})",
            escape(&self.host),
            self.pid,
            escape(&self.program),
            escape(&self.version)
        )
    }
}

/// `text` with control characters (and backslashes and quotes) escaped as Rust
/// does (`\n`, `\u{1b}`), so a label cannot move a terminal's cursor, start a
/// new line in a log or break out of its quotes.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || c == '\\' || c == '"' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The client id of an owner field (`<client id>:<owner>`, `:write` after it for
/// a writer) when it looks like one lockwarden or Redisson makes (a UUID), so
/// nothing is looked up for an owner field of another format.
pub(crate) fn client_id_of(owner_field: &str) -> Option<&str> {
    let (id, _) = owner_field.split_once(':')?;
    let is_uuid = id.len() == 36
        && id.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    is_uuid.then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(fields: &[(String, String)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        fields
            .iter()
            .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn written(info: &ClientInfo) -> Vec<(String, String)> {
        info.to_fields()
            .into_iter()
            .map(|(f, v)| (f.to_string(), v))
            .collect()
    }

    #[test]
    fn an_entry_reads_back_as_written() {
        let mut info = ClientInfo::this_process(Some("billing\n\u{1b}[2J"));
        info.started = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(ClientInfo::from_fields(&raw(&written(&info))), Some(info));
    }

    #[test]
    fn a_malformed_entry_reads_as_unknown() {
        let good = written(&ClientInfo::this_process(None));
        assert!(ClientInfo::from_fields(&raw(&good)).is_some());
        let with = |field: &str, value: &str| {
            let mut f = good.clone();
            f.iter_mut()
                .filter(|(n, _)| n == field)
                .for_each(|(_, v)| *v = value.into());
            raw(&f)
        };
        assert_eq!(ClientInfo::from_fields(&with("pid", "x")), None);
        assert_eq!(ClientInfo::from_fields(&with("pid", "0")), None);
        assert_eq!(ClientInfo::from_fields(&with("started_ms", "-1")), None);
        assert_eq!(ClientInfo::from_fields(&with("host", "")), None);
        assert_eq!(
            ClientInfo::from_fields(&with("label", &"x".repeat(5000))),
            None
        );
        let mut binary = raw(&good);
        binary[0].1 = vec![0xff, 0xfe];
        assert_eq!(ClientInfo::from_fields(&binary), None);
        assert_eq!(ClientInfo::from_fields(&raw(&good[1..])), None);
        assert_eq!(ClientInfo::from_fields(&[]), None);
    }

    #[test]
    fn control_characters_are_escaped_when_shown() {
        let mut info = ClientInfo::this_process(Some("a\nb\u{1b}[31m\"c\\"));
        info.host = "h\tx".into();
        let shown = info.describe();
        assert!(!shown.chars().any(char::is_control), "{shown}");
        assert!(shown.contains(r#"label "a\nb\u{1b}[31m\"c\\""#), "{shown}");
        assert!(shown.contains(r"host h\tx"), "{shown}");
    }

    #[test]
    fn only_uuid_client_ids_are_looked_up() {
        let id = "4f1c7c2e-8d8e-4a53-9a3a-0c2d5c1b9e11";
        assert_eq!(client_id_of(&format!("{id}:7")), Some(id));
        assert_eq!(client_id_of(&format!("{id}:7:write")), Some(id));
        assert_eq!(client_id_of("worker-1:7"), None);
        assert_eq!(client_id_of("plain"), None);
    }
}
