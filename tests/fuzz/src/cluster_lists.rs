//! The cluster's travelling list entries as a node reads them back from Redis
//! ([`read_list_entries`], over the lists module's `parse_state` and `parse_field`): the hash's
//! fields and values are written by any node, or by anyone who can write to that Redis.
//!
//! The input is bytes, one reply per line (any bytes but `\n`, UTF-8 or not, as Redis holds
//! them): the first line is the version (`$BYTES` for a version, anything else for none, as
//! `GET` of a missing key), then a field and its value per two lines (the field names are
//! made unique, first one kept, as a hash holds them).

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tollgate::cluster::read_list_entries;
use tollgate_filter::{Cidr, ListKind, RuntimeLists};
use tollgate_sketch::Tick;

/// A read's replies: the version, and the hash's fields with their values.
type Replies = (Option<Vec<u8>>, Vec<(Vec<u8>, Vec<u8>)>);

/// The replies `data` stands for.
fn replies(data: &[u8]) -> Replies {
    let mut lines = data.split(|&byte| byte == b'\n');
    let version = lines
        .next()
        .and_then(|line| line.strip_prefix(b"$"))
        .map(<[u8]>::to_vec);
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    while let (Some(name), Some(value)) = (lines.next(), lines.next()) {
        if fields.iter().all(|(held, _)| held != name) {
            fields.push((name.to_vec(), value.to_vec()));
        }
    }
    (version, fields)
}

/// Bytes of the replies as Redis sends them (RESP): the version's bulk string (or nil), then
/// the hash as one array of bulk strings, field and value in turn.
fn resp_bytes(version: Option<&[u8]>, fields: &[(Vec<u8>, Vec<u8>)]) -> u64 {
    let bulk = |bytes: &[u8]| [format!("${}\r\n", bytes.len()).as_bytes(), bytes, b"\r\n"].concat();
    let mut resp = version.map_or_else(|| b"$-1\r\n".to_vec(), bulk);
    resp.extend_from_slice(format!("*{}\r\n", 2 * fields.len()).as_bytes());
    for (name, value) in fields {
        resp.extend(bulk(name));
        resp.extend(bulk(value));
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
    let (version, fields) = replies(data);
    let (read_version, entries, received) = read_list_entries(version.clone(), fields.clone());
    assert_eq!(
        read_version,
        version.as_deref().map(|v| v.escape_ascii().to_string()),
        "the version read"
    );
    assert_eq!(
        received,
        resp_bytes(version.as_deref(), &fields),
        "reply bytes counted"
    );
    assert!(entries.len() <= fields.len(), "more entries than fields");
    let sent: HashMap<&[u8], &[u8]> = fields
        .iter()
        .map(|(name, value)| (name.as_slice(), value.as_slice()))
        .collect();
    for (field, json) in &entries {
        let value = sent
            .get(field.as_bytes())
            .unwrap_or_else(|| panic!("entry {field:?} comes from no field of {fields:?}"));
        let value = std::str::from_utf8(value).expect("an entry's value is UTF-8");
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
        let again = read_list_entries(
            None,
            vec![(field.clone().into_bytes(), json.clone().into_bytes())],
        )
        .1;
        assert_eq!(again, [(field.clone(), json.clone())], "written, read back");
    }
}
