//! Run-time list entries that travel: an entry added to or removed from one node's run-time
//! allow/deny lists (the admin's `/lists`) reaches every node of the cluster through Redis.
//!
//! In Redis, per cluster:
//!
//! - a hash `tollgate:NAME:lists`: field the list and network (`deny 192.0.2.0/24`), value
//!   a JSON object with the Redis-time millisecond the entry ends, the node that wrote it and
//!   the reason;
//! - a sorted set `tollgate:NAME:lists:ends`: the same fields scored by their end, so that
//!   every write takes out the entries that ended;
//! - a version `tollgate:NAME:lists:version`: a token the writer sets anew with every write.
//!
//! A node's changes since its last round are written by one small script in its next round
//! (sent as text with `EVAL`: changes are rare, the script is 600 bytes), which also takes
//! out the ended entries and sets a new version; all three keys expire 8 days after the last
//! write (longer than the longest time to live an entry may have). Every round ends with
//! `GET` of the version (one command, ~60 bytes); when it differs from the one this node last
//! read, a second round trip reads the version and the whole hash atomically (`MULTI`), and
//! the node lays the difference over its lists ([`tollgate_filter::RuntimeLists::merge`],
//! which keeps its cap of entries, its longest time to live and its longest reason whatever
//! the others send; what it leaves out is counted).
//!
//! Reading the whole state rather than a log of changes is what makes a node that was away
//! (Redis down for it, or restarted) catch up: the version differs when it returns, and the
//! hash holds every entry added meanwhile and lacks every one removed. A Redis that lost the
//! hash (its dataset id changed: restarted without persistence, flushed, another server; see
//! the module docs of `cluster`) gets it back: each node writes again the entries it added
//! itself and still holds, and forgets what it knew of the others' (so that a read before
//! they have written theirs again removes nothing); the entries of a node that is gone as
//! well stay where they are held until they end. A replica promoted or a restart from
//! persistence keeps the hash, and nothing is written again.

use std::collections::HashMap;

use redis::{Pipeline, Value};
use serde::{Deserialize, Serialize};
use tollgate_filter::{Cidr, ListKind, Source};

use super::redis::{Cost, digits, resp_array};

/// A run-time list entry's identity: its list and its network.
pub(crate) type ListKey = (ListKind, Cidr);

/// Changes one node may make between two rounds; more are counted in
/// `tollgate_cluster_list_entries_dropped_total` and stay local.
pub(crate) const LISTS_OUT: usize = 4096;

/// How long the keys live after the last write: longer than any entry may.
const KEYS_TTL_MS: u64 = 8 * 24 * 3600 * 1000;

/// An entry as it travels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Travelled {
    /// When it ends, in Redis-time milliseconds.
    pub(crate) until_ms: u64,
    /// The node that added it.
    pub(crate) node: String,
    /// Why (as the operator wrote it).
    pub(crate) reason: String,
}

/// One change a node made to its run-time lists, to be written by its next round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// Added or replaced.
    Put(ListKey, Travelled),
    /// Removed.
    Remove(ListKey),
}

impl Change {
    pub(crate) fn key(&self) -> ListKey {
        match self {
            Change::Put(key, _) | Change::Remove(key) => *key,
        }
    }
}

/// The hash field of `key`: `deny 192.0.2.0/24`.
pub(crate) fn field((kind, cidr): ListKey) -> String {
    format!("{} {cidr}", kind.as_str())
}

/// The key a hash field names, if the field is [`field`] of it: the one spelling a node
/// writes, of a network as the lists hold it (host bits cleared, no IPv4-mapped address).
///
/// Any other spelling (`deny 192.0.2.1/24`, `deny  192.0.2.0/24`, `deny 192.0.2.7`,
/// `allow 2001:DB8::/32`), which only something else writing to Redis makes, is skipped:
/// the lists would hold it under the written spelling, whose `HDEL` (what a removal on any
/// node sends) leaves it in the hash, so every read would put it back until it ended.
pub(crate) fn parse_field(name: &str) -> Option<ListKey> {
    let (kind, cidr) = name.split_once(' ')?;
    let kind = match kind {
        "allow" => ListKind::Allow,
        "deny" => ListKind::Deny,
        _ => return None,
    };
    let cidr = Cidr::parse(cidr).ok()?;
    let as_held = Source::new(cidr.addr).masked(cidr.prefix) == cidr.addr;
    let key = (kind, cidr);
    (as_held && field(key) == name).then_some(key)
}

/// The Redis keys of one cluster's travelling entries.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    hash: Vec<u8>,
    ends: Vec<u8>,
    version: Vec<u8>,
}

impl Keys {
    /// `tollgate:NAME:lists`, `...:lists:ends`, `...:lists:version` (a suspect's key has a
    /// fixed-length binary suffix after the name's `:`, never these texts).
    pub(crate) fn new(cluster: &str) -> Keys {
        Keys {
            hash: format!("tollgate:{cluster}:lists").into_bytes(),
            ends: format!("tollgate:{cluster}:lists:ends").into_bytes(),
            version: format!("tollgate:{cluster}:lists:version").into_bytes(),
        }
    }
}

/// KEYS: the hash, the ends, the version. ARGV: now (ms), the new version, the keys' TTL, then
/// per change four: `put` or `del`, the field, its end (ms), its value.
const WRITE: &str = r"
local now = tonumber(ARGV[1])
for _, f in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  redis.call('HDEL', KEYS[1], f)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
for i = 4, #ARGV, 4 do
  if ARGV[i] == 'put' then
    redis.call('HSET', KEYS[1], ARGV[i + 1], ARGV[i + 3])
    redis.call('ZADD', KEYS[2], ARGV[i + 2], ARGV[i + 1])
  else
    redis.call('HDEL', KEYS[1], ARGV[i + 1])
    redis.call('ZREM', KEYS[2], ARGV[i + 1])
  end
end
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
";

/// A round's part in the travelling entries.
#[derive(Debug)]
pub(crate) struct Outgoing<'a> {
    pub(crate) keys: &'a Keys,
    /// This node's changes since its last round.
    pub(crate) changes: &'a [Change],
    /// Redis time now, in ms.
    pub(crate) now_ms: u64,
    /// The version the write sets (unique to this node and write).
    pub(crate) token: &'a str,
}

impl Outgoing<'_> {
    /// Appends the write (if there are changes) and the version's `GET` to `pipe`; only the
    /// `GET` replies, so the round finds it last.
    pub(crate) fn append(&self, pipe: &mut Pipeline, cost: &mut Cost) {
        if !self.changes.is_empty() {
            let command = pipe
                .cmd("EVAL")
                .arg(WRITE)
                .arg(3)
                .arg(&self.keys.hash[..])
                .arg(&self.keys.ends[..])
                .arg(&self.keys.version[..])
                .arg(self.now_ms)
                .arg(self.token)
                .arg(KEYS_TTL_MS);
            let mut args = vec![
                4,
                WRITE.len(),
                1,
                self.keys.hash.len(),
                self.keys.ends.len(),
                self.keys.version.len(),
                digits(self.now_ms),
                self.token.len(),
                digits(KEYS_TTL_MS),
            ];
            for change in self.changes {
                let name = field(change.key());
                let (op, until, value) = match change {
                    Change::Put(_, travelled) => (
                        "put",
                        travelled.until_ms,
                        serde_json::to_string(travelled).unwrap_or_default(),
                    ),
                    Change::Remove(_) => ("del", 0, String::new()),
                };
                args.extend([op.len(), name.len(), digits(until), value.len()]);
                command.arg(op).arg(name).arg(until).arg(value);
            }
            command.ignore();
            cost.sent += resp_array(&args);
            // The script, and per change two commands, plus the expiry's ZRANGEBYSCORE and
            // ZREMRANGEBYSCORE and the SET and two PEXPIREs.
            cost.commands += 6 + 2 * self.changes.len() as u64;
        }
        pipe.cmd("GET").arg(&self.keys.version[..]);
        cost.sent += resp_array(&[3, self.keys.version.len()]);
        cost.commands += 1;
    }
}

/// The version a round's `GET` found (`None`: no entry was ever written, or Redis lost them).
pub(crate) fn version_of(reply: Value, cost: &mut Cost) -> Result<Option<String>, String> {
    let version: Option<Vec<u8>> =
        redis::from_redis_value(reply).map_err(|e| format!("lists version: {e}"))?;
    cost.received += version_bytes(version.as_deref());
    Ok(version.as_deref().map(version_text))
}

/// A version as this node compares it: the bytes Redis holds, escaped (`escape_ascii`, which
/// gives no two byte strings the same text; a node's own tokens are printable ASCII and read
/// as they are). Bytes, not text, are asked of Redis, so that a version that is not UTF-8
/// (only something else writing to Redis makes one) is a version, not a read that fails
/// every round and leaves the node alone.
fn version_text(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// Bytes of the version's reply: a bulk string (`$`, its length, `\r\n`, it, `\r\n`) or nil.
fn version_bytes(version: Option<&[u8]>) -> u64 {
    version.map_or(5, |v| {
        1 + digits(v.len() as u64) as u64 + 4 + v.len() as u64
    })
}

/// The whole state as one read found it.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) version: Option<String>,
    /// Every entry the hash holds (fields that do not parse are left out).
    pub(crate) entries: HashMap<ListKey, Travelled>,
}

/// The pipeline reading the version and the hash in one `MULTI`.
pub(crate) fn read_pipeline(keys: &Keys, cost: &mut Cost) -> Pipeline {
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("GET")
        .arg(&keys.version[..])
        .cmd("HGETALL")
        .arg(&keys.hash[..]);
    cost.sent += resp_array(&[5])
        + resp_array(&[3, keys.version.len()])
        + resp_array(&[7, keys.hash.len()])
        + resp_array(&[4]);
    cost.commands += 4;
    pipe
}

/// What [`read_pipeline`] returns: the version, and the hash's fields with their values, as
/// bytes (a field or value that is not UTF-8 is skipped by [`parse_state`], not a failed read).
pub(crate) type Reply = (Option<Vec<u8>>, Vec<(Vec<u8>, Vec<u8>)>);

/// Parses what [`read_pipeline`] returned.
pub(crate) fn parse_state((version, fields): Reply, cost: &mut Cost) -> State {
    let mut entries = HashMap::with_capacity(fields.len());
    cost.received += 3 + digits(fields.len() as u64 * 2) as u64;
    for (name, value) in fields {
        cost.received += resp_array(&[name.len(), value.len()]) - 4;
        let (Ok(name), Ok(value)) = (std::str::from_utf8(&name), std::str::from_utf8(&value))
        else {
            continue;
        };
        let parsed = parse_field(name).zip(serde_json::from_str::<Travelled>(value).ok());
        if let Some((key, travelled)) = parsed {
            entries.insert(key, travelled);
        }
    }
    cost.received += version_bytes(version.as_deref());
    State {
        version: version.as_deref().map(version_text),
        entries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_name_the_list_and_the_network_and_read_back() {
        let key = (ListKind::Deny, Cidr::parse("2001:db8::/48").unwrap());
        assert_eq!(field(key), "deny 2001:db8::/48");
        assert_eq!(parse_field(&field(key)), Some(key));
        let key = (ListKind::Allow, Cidr::parse("192.0.2.0/24").unwrap());
        assert_eq!(parse_field(&field(key)), Some(key));
        assert_eq!(parse_field("block 192.0.2.0/24"), None);
        assert_eq!(parse_field("deny nowhere"), None);
        assert_eq!(redis::Script::new(WRITE).get_hash().len(), 40);
    }

    /// A read's reply from text.
    fn reply(version: Option<&str>, fields: Vec<(String, String)>) -> Reply {
        let fields = fields
            .into_iter()
            .map(|(name, value)| (name.into_bytes(), value.into_bytes()))
            .collect();
        (version.map(|v| v.as_bytes().to_vec()), fields)
    }

    fn travelled(until_ms: u64) -> Travelled {
        Travelled {
            until_ms,
            node: "edge-1".to_owned(),
            reason: "a flood".to_owned(),
        }
    }

    #[test]
    fn a_write_and_a_read_cost_what_they_send_and_the_write_keeps_the_keys_eight_days() {
        let keys = Keys::new("c");
        let deny = (ListKind::Deny, Cidr::parse("192.0.2.0/24").unwrap());
        let allow = (ListKind::Allow, Cidr::parse("2001:db8::/48").unwrap());
        let changes = [
            Change::Put(deny, travelled(1_700_000_060_000)),
            Change::Remove(allow),
        ];
        for changes in [&changes[..], &[]] {
            let mut pipe = redis::pipe();
            let mut cost = Cost::default();
            Outgoing {
                keys: &keys,
                changes,
                now_ms: 1_700_000_000_000,
                token: "edge-1:1700000000000:7",
            }
            .append(&mut pipe, &mut cost);
            let packed = pipe.get_packed_pipeline();
            assert_eq!(cost.sent, packed.len() as u64, "{changes:?}");
            let text = String::from_utf8_lossy(&packed);
            let written = !changes.is_empty();
            assert_eq!(text.contains("EVAL"), written);
            assert_eq!(text.contains("\r\n691200000\r\n"), written, "8 days in ms");
            assert_eq!(text.contains("deny 192.0.2.0/24"), written);
            let get = "*2\r\n$3\r\nGET\r\n$24\r\ntollgate:c:lists:version\r\n";
            assert!(text.ends_with(get), "{text}");
            let commands = if written { 6 + 2 * 2 + 1 } else { 1 };
            assert_eq!(cost.commands, commands);
        }
        let mut cost = Cost::default();
        let pipe = read_pipeline(&keys, &mut cost);
        assert_eq!(cost.sent, pipe.get_packed_pipeline().len() as u64);
        assert_eq!(cost.commands, 4);
    }

    #[test]
    fn a_read_costs_the_bytes_of_its_replies() {
        let mut cost = Cost::default();
        let version = version_of(Value::BulkString(b"edge-1:17:3".to_vec()), &mut cost);
        assert_eq!(version, Ok(Some("edge-1:17:3".to_owned())));
        assert_eq!(cost.received, "$11\r\nedge-1:17:3\r\n".len() as u64);
        let mut cost = Cost::default();
        assert_eq!(version_of(Value::Nil, &mut cost), Ok(None));
        assert_eq!(cost.received, "$-1\r\n".len() as u64);

        let value = serde_json::to_string(&travelled(1_700_000_060_000)).unwrap();
        let fields = vec![
            ("deny 192.0.2.0/24".to_owned(), value.clone()),
            ("block 192.0.2.0/24".to_owned(), value.clone()),
        ];
        let mut cost = Cost::default();
        let state = parse_state(reply(None, fields), &mut cost);
        let deny = (ListKind::Deny, Cidr::parse("192.0.2.0/24").unwrap());
        assert_eq!(
            state.entries.len(),
            1,
            "a field that does not parse is left out"
        );
        assert_eq!(state.entries[&deny], travelled(1_700_000_060_000));
        let bulk = |text: &str| format!("${}\r\n{text}\r\n", text.len());
        let replies = "$-1\r\n*4\r\n".to_owned()
            + &bulk("deny 192.0.2.0/24")
            + &bulk(&value)
            + &bulk("block 192.0.2.0/24")
            + &bulk(&value);
        assert_eq!(cost.received, replies.len() as u64);
        let mut cost = Cost::default();
        let state = parse_state(reply(None, Vec::new()), &mut cost);
        assert!(state.version.is_none() && state.entries.is_empty());
        assert_eq!(cost.received, "$-1\r\n*0\r\n".len() as u64);
        // A version as `version_of` counts it: `$`, its length's digits, `\r\n` twice.
        let mut cost = Cost::default();
        let version = Some("edge-1:1700000000000:17");
        let state = parse_state(reply(version, Vec::new()), &mut cost);
        assert_eq!(state.version.as_deref(), Some("edge-1:1700000000000:17"));
        let replies = "$23\r\nedge-1:1700000000000:17\r\n*0\r\n";
        assert_eq!(cost.received, replies.len() as u64);
    }

    #[test]
    fn a_write_costs_two_commands_per_change_and_a_read_the_digits_of_its_fields() {
        let keys = Keys::new("c");
        let deny = (ListKind::Deny, Cidr::parse("192.0.2.0/24").unwrap());
        for n in [1, 3] {
            let changes = vec![Change::Remove(deny); n];
            let mut pipe = redis::pipe();
            let mut cost = Cost::default();
            Outgoing {
                keys: &keys,
                changes: &changes,
                now_ms: 1_700_000_000_000,
                token: "edge-1:1700000000000:7",
            }
            .append(&mut pipe, &mut cost);
            assert_eq!(cost.commands, 6 + 2 * n as u64 + 1, "{n} changes");
            assert_eq!(cost.sent, pipe.get_packed_pipeline().len() as u64);
        }
        // Five fields: the reply's array says ten items, two digits.
        let value = serde_json::to_string(&travelled(1_700_000_060_000)).unwrap();
        let fields: Vec<(String, String)> = (0..5)
            .map(|i| (format!("deny 192.0.2.{i}/32"), value.clone()))
            .collect();
        let mut replies = "$-1\r\n*10\r\n".to_owned();
        for (name, value) in &fields {
            for text in [name, value] {
                replies += &format!("${}\r\n{text}\r\n", text.len());
            }
        }
        let mut cost = Cost::default();
        let state = parse_state(reply(None, fields), &mut cost);
        assert_eq!(state.entries.len(), 5);
        assert_eq!(cost.received, replies.len() as u64);
    }

    /// Bytes that are not UTF-8 in the lists' hash or version (only something else writing to
    /// Redis puts them there) are not a read that fails: asked as text, the whole reply failed
    /// to convert, the link was dropped and the node left alone, every round until the field
    /// ended. Now such a field is skipped, the others are applied, and such a version is a
    /// version, its bytes counted as they came.
    #[test]
    fn bytes_that_are_not_utf8_skip_their_field_and_do_not_fail_the_read() {
        let value = serde_json::to_string(&travelled(1_700_000_060_000)).unwrap();
        let bulk = |bytes: &[u8]| Value::BulkString(bytes.to_vec());
        let redis_reply = Value::Array(vec![
            bulk(b"edge-1:\xff:3"),
            Value::Array(vec![
                bulk(b"deny 192.0.2.0/24"),
                bulk(value.as_bytes()),
                bulk(b"deny 198.51.100.0/24\xff"),
                bulk(value.as_bytes()),
                bulk(b"deny 203.0.113.0/24"),
                bulk(b"{\"until_ms\":\xff}"),
            ]),
        ]);
        let read: Reply = redis::from_redis_value(redis_reply).expect("a reply in bytes converts");
        let mut cost = Cost::default();
        let state = parse_state(read, &mut cost);
        let deny = (ListKind::Deny, Cidr::parse("192.0.2.0/24").unwrap());
        assert_eq!(state.entries.len(), 1, "{:?}", state.entries);
        assert_eq!(state.entries[&deny], travelled(1_700_000_060_000));
        assert_eq!(state.version.as_deref(), Some("edge-1:\\xff:3"));
        // Counted as the bytes came: the version's 10 (not its escaped 13), the six items' own lengths.
        let items = [17, value.len(), 21, value.len(), 19, 14];
        let expected = "$10\r\n".len()
            + 10
            + 2
            + "*6\r\n".len()
            + items
                .iter()
                .map(|n| 1 + n.to_string().len() + 4 + n)
                .sum::<usize>();
        assert_eq!(cost.received, expected as u64);
        let mut cost = Cost::default();
        let version = version_of(bulk(b"edge-1:\xff:3"), &mut cost);
        assert_eq!(
            version,
            Ok(Some("edge-1:\\xff:3".to_owned())),
            "as the read names it"
        );
        assert_eq!(cost.received, "$10\r\n".len() as u64 + 10 + 2);
    }
}
