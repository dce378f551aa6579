//! The cluster's travelling list entries as a node reads them back from Redis
//! ([`read_list_entries`], over the lists module's `parse_state` and `parse_field`): the hash's
//! fields and values are written by any node, or by anyone who can write to that Redis.
//!
//! The input is text, one reply per line: the first line is the version (`$TEXT` for a
//! version, anything else for none, as `GET` of a missing key), then a field and its value
//! per two lines (the field names are made unique, first one kept, as a hash holds them).

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tollgate::cluster::read_list_entries;
use tollgate_filter::{Cidr, ListKind, RuntimeLists};
use tollgate_sketch::Tick;

/// A read's replies: the version, and the hash's fields with their values.
type Replies = (Option<String>, Vec<(String, String)>);

/// The replies `data` stands for.
fn replies(data: &[u8]) -> Option<Replies> {
    let text = std::str::from_utf8(data).ok()?;
    let mut lines = text.split('\n');
    let version = lines
        .next()
        .and_then(|line| line.strip_prefix('$'))
        .map(str::to_owned);
    let mut fields: Vec<(String, String)> = Vec::new();
    while let (Some(name), Some(value)) = (lines.next(), lines.next()) {
        if fields.iter().all(|(held, _)| held != name) {
            fields.push((name.to_owned(), value.to_owned()));
        }
    }
    Some((version, fields))
}

/// Bytes of the replies as Redis sends them (RESP): the version's bulk string (or nil), then
/// the hash as one array of bulk strings, field and value in turn.
fn resp_bytes(version: Option<&str>, fields: &[(String, String)]) -> u64 {
    let bulk = |text: &str| format!("${}\r\n{text}\r\n", text.len());
    let mut resp = version.map_or_else(|| "$-1\r\n".to_owned(), bulk);
    resp.push_str(&format!("*{}\r\n", 2 * fields.len()));
    for (name, value) in fields {
        resp.push_str(&bulk(name));
        resp.push_str(&bulk(value));
    }
    resp.len() as u64
}

/// The field a node writes for `cidr` in list `kind`: the network as its lists hold it (host
/// bits cleared, an IPv4-mapped address folded), which is what a later removal names.
fn written_field(kind: ListKind, cidr: Cidr) -> String {
    let lists = RuntimeLists::default();
    let held = lists
        .add(
            cidr,
            kind,
            Duration::from_secs(1),
            String::new(),
            Tick::ZERO,
        )
        .map_or(cidr, |(entry, _)| entry.cidr);
    format!("{} {held}", kind.as_str())
}

/// The parts of an entry's JSON a node reads, each as JSON (other members are ignored, as
/// a node ignores them; a number past `f64`'s range among them is not a `Value`).
#[derive(Debug, PartialEq, Deserialize)]
struct Read {
    until_ms: Value,
    node: Value,
    reason: Value,
}

/// `json` read as [`Read`]; `None` if it is not an object with those three members.
fn travelled(json: &str) -> Option<Read> {
    serde_json::from_str(json).ok()
}

/// Reads `data`'s replies as a node does.
///
/// # Panics
/// When an invariant breaks: the read panics or loses the version; the reply bytes it counts
/// differ from the RESP encoding of what it read; an entry it takes comes from no field of
/// the reply, names its network otherwise than a node writes it (so that a removal, which
/// names the written field, would leave it in Redis), differs from the JSON it was read
/// from, or does not read back the same once written as a node writes it.
pub fn check(data: &[u8]) {
    let Some((version, fields)) = replies(data) else {
        return;
    };
    let (read_version, entries, received) = read_list_entries(version.clone(), fields.clone());
    assert_eq!(read_version, version, "the version read");
    assert_eq!(
        received,
        resp_bytes(version.as_deref(), &fields),
        "reply bytes counted"
    );
    assert!(entries.len() <= fields.len(), "more entries than fields");
    let sent: HashMap<&str, &str> = fields
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    for (field, json) in &entries {
        let value = sent
            .get(field.as_str())
            .unwrap_or_else(|| panic!("entry {field:?} comes from no field of {fields:?}"));
        let (kind, cidr) = field.split_once(' ').expect("a field is `LIST NETWORK`");
        let kind = match kind {
            "allow" => ListKind::Allow,
            "deny" => ListKind::Deny,
            other => panic!("entry {field:?} of a list {other:?}"),
        };
        let cidr = Cidr::parse(cidr).expect("an entry's network parses");
        assert_eq!(
            field,
            &written_field(kind, cidr),
            "an entry's field as a node writes it"
        );
        let read = travelled(value).expect("an entry read from a JSON object");
        assert_eq!(
            travelled(json),
            Some(read),
            "entry {field:?}: read from {value:?}, written as {json:?}"
        );
        let again = read_list_entries(None, vec![(field.clone(), json.clone())]).1;
        assert_eq!(again, [(field.clone(), json.clone())], "written, read back");
    }
}
