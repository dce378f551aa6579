//! Talking to Redis: key names, the one script a sync round runs, and what a round costs on
//! the wire.
//!
//! A round is one pipelined round trip: `TIME` (the cluster's clock, see `clock.rs`), the
//! dataset id (see [`dataset_key`]; another one than the connection read fails the round),
//! then `EVALSHA` calls, each over at most [`BATCH`] suspects, so that no single script holds Redis for long. Per suspect the script adds this
//! node's new weight to the counters of the current (and, after an outage, the previous)
//! window, sets their expiry in the same atomic step (a node that dies between the two cannot
//! leave a counter that never expires), and returns both windows' cluster-wide counts; each
//! call first checks the dataset id and writes nothing into another dataset.

use std::net::SocketAddr;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, Value,
};

use super::lists::{Outgoing, version_of};
use crate::config::{RedisAuth, RedisTls, TokenSource};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Suspects per `EVALSHA`: a script of this size runs in well under a millisecond.
pub(crate) const BATCH: usize = 512;

/// Bytes of a suspect's key after the cluster name and `:`: the namespace tag, the filter's
/// key, the period, the window.
const SUFFIX: usize = 8 + tollgate_filter::LimitKey::LEN + 8 + 8;

/// KEYS: the dataset id's key, then the current and previous window's counters of each
/// suspect, in pairs. ARGV: the dataset id the connection read, then per suspect the expiry
/// in milliseconds and the weight to add to each of the two. Nothing is written into a
/// dataset other than the one read at connect (a `FLUSHALL` since, say): the call fails, and
/// the node reconnects and pushes everything again.
pub(crate) const SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('TOLLGATE_DATASET the dataset id changed: Redis lost its data')
end
local out = {}
for i = 2, #KEYS, 2 do
  local a = (i - 2) / 2 * 3 + 1
  local ttl = ARGV[a + 1]
  for k = 0, 1 do
    local key = KEYS[i + k]
    local delta = tonumber(ARGV[a + 2 + k])
    if delta > 0 then
      out[#out + 1] = redis.call('INCRBY', key, delta)
      redis.call('PEXPIRE', key, ttl)
    else
      out[#out + 1] = tonumber(redis.call('GET', key) or 0)
    end
  end
end
return out
";

/// The Redis key of one suspect's counter in one window: `tollgate:` and the cluster's name
/// and `:`, then a fixed-length binary suffix: a tag (xxh3 of the cluster's name seeded with
/// the rule's shape, `tollgate_filter::Rule::shape`: its name, protocol, sources, weight and
/// limits), the filter's key (rule id, family, prefix length, masked address), the limit's
/// period in milliseconds and the window index, all big-endian u64 but the key. The suffix
/// has a fixed length, so keys of different clusters, rules, prefixes, periods or windows
/// never coincide; and two clusters given one name by mistake still count apart unless their
/// rules of one name count exactly the same things (then they are one cluster).
pub(crate) fn key_name(
    cluster: &str,
    shape: u64,
    key: &[u8],
    period_ms: u64,
    window: u64,
) -> Vec<u8> {
    let mut name = Vec::with_capacity(10 + cluster.len() + SUFFIX);
    name.extend_from_slice(b"tollgate:");
    name.extend_from_slice(cluster.as_bytes());
    name.push(b':');
    name.extend_from_slice(&xxh3_64_with_seed(cluster.as_bytes(), shape).to_be_bytes());
    name.extend_from_slice(key);
    name.extend_from_slice(&period_ms.to_be_bytes());
    name.extend_from_slice(&window.to_be_bytes());
    name
}

/// The Redis key of the cluster's dataset id: `tollgate:`, the cluster's name, `:dataset`.
/// The first node to connect to a Redis that lacks it sets it (no expiry: one key per
/// cluster name); it lives with the counts, so a replica promoted or a Redis restarted from
/// its persistence files answers with the same id, and a Redis that lost the counts (a
/// restart without persistence, `FLUSHALL`, another server) with a new one.
pub(crate) fn dataset_key(cluster: &str) -> Vec<u8> {
    format!("tollgate:{cluster}:dataset").into_bytes()
}

/// A new dataset id to offer a Redis that holds none: this node's wall clock in
/// microseconds and 64 random bits (the thread's generator, seeded by the OS), in hex. Two
/// ids coincide only if both parts do, so a Redis that lost its data never comes back with
/// the id it had.
fn new_dataset_id() -> String {
    let unix_us = crate::unix_time::unix_us();
    format!("{unix_us:x}-{:016x}", rand::random::<u64>())
}

/// The Redis key of the cluster's penalties: `tollgate:`, the cluster's name, `:penalties`.
/// (A suspect's key has a fixed-length binary suffix after the name's `:`, never this text.)
pub(crate) fn penalty_set(cluster: &str) -> Vec<u8> {
    format!("tollgate:{cluster}:penalties").into_bytes()
}

/// One suspect's part of a round.
#[derive(Clone, Debug)]
pub(crate) struct Push {
    pub(crate) current: Vec<u8>,
    pub(crate) previous: Vec<u8>,
    pub(crate) ttl_ms: u64,
    pub(crate) add_current: u64,
    pub(crate) add_previous: u64,
}

/// Cluster-wide counts of one suspect after a round: (current window, previous window).
pub(crate) type Totals = (u64, u64);

/// What a round cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cost {
    /// Request bytes in the RESP encoding.
    pub(crate) sent: u64,
    /// Reply bytes in the RESP encoding.
    pub(crate) received: u64,
    /// Commands Redis ran: the `EVALSHA` calls and the commands inside them.
    pub(crate) commands: u64,
}

/// A connection with the script loaded.
#[derive(Debug)]
pub(crate) struct Link {
    connection: MultiplexedConnection,
    sha: String,
    /// The server's `run_id`: a new one means another process (a restart, or a replica
    /// promoted), which may or may not hold the counts; only `dataset` tells.
    pub(crate) run_id: String,
    /// The dataset id the server holds (see [`dataset_key`]): a new one means a Redis that
    /// does not hold what was pushed before.
    pub(crate) dataset: String,
    /// Its key.
    dataset_key: Vec<u8>,
}

/// Why a connection or a round failed.
pub(crate) type LinkError = Box<dyn std::error::Error + Send + Sync>;

/// A server that answered but must not be written to: no network fault, and logged as what
/// it is (see `sync.rs`), not as Redis being unreachable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `ROLE` did not say master (its first element, as received): a replica, a stale
    /// address, or an old master back after a failover.
    NotMaster(String),
    /// The dataset id is not the one the connection read: Redis lost its data since (a
    /// `FLUSHALL`, the id evicted). `held` is what the round's `GET` found; `None` when the
    /// push script refused first (`TOLLGATE_DATASET`), or the id is gone.
    DatasetChanged {
        /// The id read at connect.
        read: String,
        /// The id held now, if any and known.
        held: Option<String>,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotMaster(role) => write!(f, "not a master (ROLE answered {role})"),
            Refusal::DatasetChanged { read, held: None } => write!(
                f,
                "the dataset id {read:?} read at connect is gone (FLUSHALL, eviction)"
            ),
            Refusal::DatasetChanged {
                read,
                held: Some(held),
            } => write!(
                f,
                "dataset id {held:?} where {read:?} was read at connect (FLUSHALL, eviction)"
            ),
        }
    }
}

impl std::error::Error for Refusal {}

/// Whether `error` holds the push script's refusal to write into another dataset.
fn refused_dataset(error: &redis::RedisError) -> bool {
    error
        .clone()
        .into_server_errors()
        .is_some_and(|errors| errors.iter().any(|(_, e)| e.code() == "TOLLGATE_DATASET"))
}

/// Where a connection goes and how: the address, and with TLS the settings and the name the
/// server's certificate must carry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target<'a> {
    pub(crate) address: SocketAddr,
    /// `Some((settings, server name))`: TLS; `None`: plain TCP.
    pub(crate) tls: Option<(&'a RedisTls, &'a str)>,
}

/// A connection to `target`, logged in as `login`, its replies bounded by `timeout`.
async fn open(
    target: Target<'_>,
    login: RedisConnectionInfo,
    timeout: Duration,
) -> Result<MultiplexedConnection, LinkError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let address = target.address;
    match target.tls {
        None => {
            let info = ConnectionAddr::Tcp(address.ip().to_string(), address.port())
                .into_connection_info()?
                .set_redis_settings(login);
            Ok(Client::open(info)?
                .get_multiplexed_async_connection_with_config(&config)
                .await?)
        }
        Some((tls, server_name)) => {
            let stream = super::tls::connect(address, server_name, tls, timeout).await?;
            let (connection, driver) =
                MultiplexedConnection::new_with_config(&login, stream, config).await?;
            // The connection's reader and writer: ends when the connection is dropped.
            tokio::spawn(driver);
            Ok(connection)
        }
    }
}

impl Link {
    /// Connects to `target`, logs in with `auth` (its password read now, so a rotated secret
    /// is picked up at the next connection; with TLS, the CA and client certificate files
    /// too), names the connection `client_name` (so `CLIENT LIST` shows which node it is) and
    /// loads the script, checks that the server is a master and reads its dataset id from
    /// `dataset_key` (setting one if it holds none); each step bounded by `timeout`.
    pub(crate) async fn connect(
        target: Target<'_>,
        auth: Option<&RedisAuth>,
        client_name: &str,
        dataset_key: &[u8],
        timeout: Duration,
    ) -> Result<Link, LinkError> {
        let mut login = RedisConnectionInfo::default();
        if let Some(auth) = auth {
            if let Some(user) = &auth.user {
                login = login.set_username(user);
            }
            login = login.set_password(read_password(&auth.password)?);
        }
        let bounded = async {
            let mut connection = open(target, login, timeout).await?;
            redis::cmd("CLIENT")
                .arg("SETNAME")
                .arg(client_name)
                .query_async::<()>(&mut connection)
                .await?;
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(SCRIPT)
                .query_async(&mut connection)
                .await?;
            // A replica (a stale address, or the old master back after a failover) would
            // refuse the writes: only a master will do.
            let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut connection).await?;
            match role.first() {
                Some(Value::BulkString(r)) if r == b"master" => {}
                Some(Value::SimpleString(r)) if r == "master" => {}
                Some(Value::BulkString(r)) => {
                    return Err(Refusal::NotMaster(String::from_utf8_lossy(r).into_owned()).into());
                }
                Some(Value::SimpleString(r)) => return Err(Refusal::NotMaster(r.clone()).into()),
                other => return Err(Refusal::NotMaster(format!("{other:?}")).into()),
            }
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query_async(&mut connection)
                .await?;
            let run_id = info
                .lines()
                .find_map(|line| line.strip_prefix("run_id:"))
                .unwrap_or_default()
                .trim()
                .to_owned();
            // One round trip: the id is set if the server holds none (NX), then read back,
            // whichever node's `SET` came first. The `SET` goes to the replicas ahead of
            // every count pushed after it, so a promoted replica holds it too.
            let offer = new_dataset_id();
            let (_, dataset): (Value, Option<String>) = redis::pipe()
                .cmd("SET")
                .arg(dataset_key)
                .arg(&offer)
                .arg("NX")
                .cmd("GET")
                .arg(dataset_key)
                .query_async(&mut connection)
                .await?;
            let dataset = dataset.ok_or_else(|| {
                format!(
                    "no dataset id at {} right after SET NX (deleted or evicted at once?)",
                    String::from_utf8_lossy(dataset_key)
                )
            })?;
            Ok::<_, LinkError>(Link {
                connection,
                sha,
                run_id,
                dataset,
                dataset_key: dataset_key.to_vec(),
            })
        };
        tokio::time::timeout(timeout, bounded)
            .await
            .map_err(|_| LinkError::from("timed out"))?
    }

    /// Redis's `TIME` in unix nanoseconds, bounded by `timeout`.
    pub(crate) async fn time(&mut self, timeout: Duration) -> Result<u64, LinkError> {
        let (seconds, micros): (u64, u64) = tokio::time::timeout(
            timeout,
            redis::cmd("TIME").query_async(&mut self.connection),
        )
        .await
        .map_err(|_| LinkError::from("timed out"))??;
        Ok(unix_nanos(seconds, micros))
    }

    /// Runs one round: Redis's `TIME`, then every push, in one pipelined round trip bounded by
    /// `timeout`. Returns the cluster-wide totals, one per push, in order, and Redis's time.
    pub(crate) async fn round(
        &mut self,
        pushes: &[Push],
        penalties: &Penalties<'_>,
        lists: &Outgoing<'_>,
        timeout: Duration,
    ) -> Result<Round, LinkError> {
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        // The dataset id, every round: a node with nothing to push learns too that Redis lost
        // its data (the script refuses to write into another dataset).
        pipe.cmd("GET").arg(&self.dataset_key[..]);
        let mut cost = Cost {
            sent: resp_array(&["TIME".len()]) + resp_array(&[3, self.dataset_key.len()]),
            received: 0,
            commands: 2,
        };
        for batch in pushes.chunks(BATCH) {
            let command = pipe
                .cmd("EVALSHA")
                .arg(&self.sha)
                .arg(1 + batch.len() * 2)
                .arg(&self.dataset_key[..]);
            let mut args: Vec<usize> = vec![
                "EVALSHA".len(),
                self.sha.len(),
                digits(1 + batch.len() as u64 * 2),
                self.dataset_key.len(),
            ];
            for push in batch {
                command.arg(&push.current[..]).arg(&push.previous[..]);
                args.push(push.current.len());
                args.push(push.previous.len());
            }
            command.arg(&self.dataset);
            args.push(self.dataset.len());
            for push in batch {
                command
                    .arg(push.ttl_ms)
                    .arg(push.add_current)
                    .arg(push.add_previous);
                args.push(digits(push.ttl_ms));
                args.push(digits(push.add_current));
                args.push(digits(push.add_previous));
            }
            cost.sent += resp_array(&args);
            let writes = batch
                .iter()
                .map(|p| u64::from(p.add_current > 0) + u64::from(p.add_previous > 0))
                .sum::<u64>();
            // The dataset id's GET; per counter: INCRBY and PEXPIRE, or one GET.
            cost.commands += 2 + 2 * batch.len() as u64 + writes;
        }
        // Then the penalties: this node's new ones added (scored by when they end), the ones
        // in force before Redis lost its data added back where missing (`NX`: one the cluster
        // started since, or another node added back, stays as it is), the ended ones removed,
        // and every one still in force read back (at most PENALTIES_READ).
        let set = penalties.set;
        for (key, until) in penalties.add {
            pipe.cmd("ZADD").arg(set).arg(*until).arg(&key[..]).ignore();
            cost.sent += resp_array(&[4, set.len(), digits(*until), key.len()]);
        }
        for (key, until) in penalties.again {
            pipe.cmd("ZADD")
                .arg(set)
                .arg("NX")
                .arg(*until)
                .arg(&key[..])
                .ignore();
            cost.sent += resp_array(&[4, set.len(), 2, digits(*until), key.len()]);
        }
        let adds = penalties.add.len() + penalties.again.len();
        if adds > 0 {
            // An abandoned cluster's set goes away a day after its last penalty.
            pipe.cmd("PEXPIRE").arg(set).arg(86_400_000).ignore();
            cost.sent += resp_array(&[7, set.len(), 8]);
        }
        pipe.cmd("ZREMRANGEBYSCORE")
            .arg(set)
            .arg("-inf")
            .arg(penalties.now_ms)
            .ignore();
        pipe.cmd("ZRANGEBYSCORE")
            .arg(set)
            .arg(format!("({}", penalties.now_ms))
            .arg("+inf")
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(PENALTIES_READ);
        let now_digits = digits(penalties.now_ms);
        cost.sent += resp_array(&[16, set.len(), 4, now_digits])
            + resp_array(&[13, set.len(), now_digits + 1, 4, 10, 5, 1, 4]);
        cost.commands += adds as u64 + u64::from(adds > 0) + 2;
        // Then the run-time list entries: this node's changes, and the version (last).
        lists.append(&mut pipe, &mut cost);
        let mut replies: Vec<Value> =
            match tokio::time::timeout(timeout, pipe.query_async(&mut self.connection))
                .await
                .map_err(|_| LinkError::from("timed out"))?
            {
                Ok(replies) => replies,
                Err(error) if refused_dataset(&error) => {
                    return Err(Refusal::DatasetChanged {
                        read: self.dataset.clone(),
                        held: None,
                    }
                    .into());
                }
                Err(error) => return Err(error.into()),
            };
        if replies.is_empty() {
            return Err("no reply to TIME".into());
        }
        let (seconds, micros): (String, String) = redis::from_redis_value(replies.remove(0))?;
        cost.received += resp_array(&[seconds.len(), micros.len()]);
        let redis_ns = seconds
            .parse::<u64>()
            .ok()
            .zip(micros.parse::<u64>().ok())
            .map(|(s, us)| unix_nanos(s, us))
            .ok_or_else(|| format!("TIME answered {seconds:?} {micros:?}"))?;
        if replies.is_empty() {
            return Err("no reply to the dataset id's GET".into());
        }
        let held: Option<String> = redis::from_redis_value(replies.remove(0))?;
        cost.received += held.as_ref().map_or(5, |id| resp_array(&[id.len()]) - 4);
        if held.as_deref() != Some(self.dataset.as_str()) {
            return Err(Refusal::DatasetChanged {
                read: self.dataset.clone(),
                held,
            }
            .into());
        }
        let version_reply = replies.pop().ok_or("no reply to the lists' GET")?;
        let lists_version = version_of(version_reply, &mut cost)?;
        let live_reply = replies.pop().ok_or("no reply to ZRANGEBYSCORE")?;
        let pairs: Vec<(Vec<u8>, u64)> = redis::from_redis_value(live_reply)?;
        let mut live = Vec::with_capacity(pairs.len());
        cost.received += 3 + digits(pairs.len() as u64 * 2) as u64;
        for (member, until) in pairs {
            cost.received += resp_array(&[member.len(), digits(until)]) - 4;
            if let Ok(key) = <[u8; tollgate_filter::LimitKey::LEN]>::try_from(&member[..]) {
                live.push((key, until));
            }
        }
        let mut totals = Vec::with_capacity(pushes.len());
        for reply in replies {
            let reply: Vec<i64> = redis::from_redis_value(reply)?;
            cost.received += push_totals(&reply, &mut totals)?;
        }
        if totals.len() != pushes.len() {
            return Err(format!("{} counts for {} suspects", totals.len(), pushes.len()).into());
        }
        Ok(Round {
            totals,
            cost,
            redis_ns,
            live,
            lists_version,
        })
    }

    /// Runs `pipe` (a part's own, such as the lists' read) bounded by `timeout`.
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &mut self,
        pipe: &redis::Pipeline,
        timeout: Duration,
    ) -> Result<T, LinkError> {
        Ok(
            tokio::time::timeout(timeout, pipe.query_async(&mut self.connection))
                .await
                .map_err(|_| LinkError::from("timed out"))??,
        )
    }
}

/// Penalties read back per round at most: under an attack with more penalised sources than
/// this in force, the others hold the first this many (by end time) and the rest locally.
pub(crate) const PENALTIES_READ: usize = 4096;

/// A round's part in the cluster's penalties.
#[derive(Debug)]
pub(crate) struct Penalties<'a> {
    /// The sorted set holding them: member the penalty key, score the Redis-time ms it ends.
    pub(crate) set: &'a [u8],
    /// Penalties started here since the last round: (penalty key, ends at).
    pub(crate) add: &'a [([u8; tollgate_filter::LimitKey::LEN], u64)],
    /// Penalties in force that the set held before Redis lost its data (a new dataset id),
    /// as this node last read them: added only where missing.
    pub(crate) again: &'a [([u8; tollgate_filter::LimitKey::LEN], u64)],
    /// Redis time now, in ms: penalties that ended by then are removed.
    pub(crate) now_ms: u64,
}

/// What a round brought back.
#[derive(Debug)]
pub(crate) struct Round {
    /// The cluster-wide totals, one per push, in order.
    pub(crate) totals: Vec<Totals>,
    /// What it cost.
    pub(crate) cost: Cost,
    /// Redis's `TIME`, in unix nanoseconds, read first in the round.
    pub(crate) redis_ns: u64,
    /// Penalties in force in the cluster: (penalty key, ends at, Redis-time ms).
    pub(crate) live: Vec<([u8; tollgate_filter::LimitKey::LEN], u64)>,
    /// The run-time lists' version in Redis (see `lists.rs`).
    pub(crate) lists_version: Option<String>,
}

/// The address of `master` as the sentinel at `sentinel` knows it
/// (`SENTINEL get-master-addr-by-name`), and the host it gave (a name or an IP address: what
/// TLS verifies), bounded by `timeout`.
pub(crate) async fn master_of(
    target: Target<'_>,
    master: &str,
    timeout: Duration,
) -> Result<(SocketAddr, String), LinkError> {
    let sentinel = target.address;
    let ask = async {
        let mut connection = open(target, RedisConnectionInfo::default(), timeout).await?;
        let answer: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(master)
            .query_async(&mut connection)
            .await?;
        let (host, port) =
            answer.ok_or_else(|| format!("sentinel {sentinel} does not know master `{master}`"))?;
        let address = tokio::net::lookup_host((host.as_str(), port))
            .await?
            .next()
            .ok_or_else(|| {
                format!("sentinel {sentinel}: master `{master}` at {host}, no address")
            })?;
        Ok::<_, LinkError>((address, host))
    };
    tokio::time::timeout(timeout, ask)
        .await
        .map_err(|_| LinkError::from(format!("sentinel {sentinel} timed out")))?
}

/// The password `source` holds (surrounding whitespace trimmed).
///
/// # Errors
/// A message naming the file or variable when it cannot be read or is empty (never the
/// password).
pub(crate) fn read_password(source: &TokenSource) -> Result<String, String> {
    source.read("cluster", "password")
}

/// Decimal digits of `n`.
pub(crate) fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Redis's `TIME` (seconds and microseconds) in unix nanoseconds, saturating: a reply no Redis
/// gives (microseconds past `u64::MAX / 1000`) reads as the far future, never wraps.
fn unix_nanos(seconds: u64, micros: u64) -> u64 {
    seconds
        .saturating_mul(1_000_000_000)
        .saturating_add(micros.saturating_mul(1_000))
}

/// Reads one `EVALSHA`'s reply, the current and previous window's cluster-wide totals of each
/// of its suspects in turn, into `totals`; returns the reply's bytes as they crossed the wire.
/// A reply of an odd number of integers is refused (one of its suspects would get a total
/// Redis never sent); a negative total, which only a write from outside the cluster leaves,
/// reads as 0.
fn push_totals(reply: &[i64], totals: &mut Vec<(u64, u64)>) -> Result<u64, String> {
    if !reply.len().is_multiple_of(2) {
        return Err(format!(
            "a push's reply holds {} totals, not two a suspect",
            reply.len()
        ));
    }
    // An integer reply each: `:`, the sign, the digits, `\r\n`.
    let integer = |n: i64| 3 + u64::from(n < 0) + digits(n.unsigned_abs()) as u64;
    let mut received = 3 + digits(reply.len() as u64) as u64;
    for pair in reply.chunks_exact(2) {
        received += integer(pair[0]) + integer(pair[1]);
        totals.push((pair[0].max(0) as u64, pair[1].max(0) as u64));
    }
    Ok(received)
}

/// Bytes of a RESP array of bulk strings of these lengths: `*N\r\n`, then `$len\r\n` +
/// payload + `\r\n` each.
pub(crate) fn resp_array(lengths: &[usize]) -> u64 {
    let items: usize = lengths
        .iter()
        .map(|&len| 1 + digits(len as u64) + 2 + len + 2)
        .sum();
    (1 + digits(lengths.len() as u64) + 2 + items) as u64
}

#[cfg(test)]
mod tests {
    use redis::Script;

    use super::*;
    use crate::cluster::fake_redis::{Answers, Exchange, ID, scripted};

    #[test]
    fn keys_of_different_clusters_periods_and_windows_differ() {
        let key = [7u8; tollgate_filter::LimitKey::LEN];
        let base = key_name("a", 1, &key, 1000, 5);
        assert_eq!(base, key_name("a", 1, &key, 1000, 5));
        assert_ne!(base, key_name("b", 1, &key, 1000, 5));
        assert_ne!(base, key_name("a", 2, &key, 1000, 5), "another rule shape");
        assert_ne!(base, key_name("a", 1, &key, 2000, 5));
        assert_ne!(base, key_name("a", 1, &key, 1000, 6));
        // The suffix has a fixed length: a cluster name cannot imitate another's keys.
        assert_ne!(
            key_name("a:", 1, &key, 1000, 5),
            key_name("a", 1, &key, 1000, 5)
        );
        assert_eq!(base.len(), "tollgate:a:".len() + SUFFIX);
    }

    #[test]
    fn the_scripts_dataset_refusal_is_told_from_other_errors() {
        let reply = |text: &[u8]| {
            redis::parse_redis_value(text)
                .and_then(Value::extract_error)
                .expect_err("an error reply")
        };
        assert!(refused_dataset(&reply(
            b"-TOLLGATE_DATASET the dataset id changed: Redis lost its data\r\n"
        )));
        assert!(!refused_dataset(&reply(
            b"-NOSCRIPT No matching script\r\n"
        )));
        assert!(!refused_dataset(&reply(
            b"-ERR TOLLGATE_DATASET in the text\r\n"
        )));
    }

    #[test]
    fn resp_sizes_match_the_encoding() {
        // *2\r\n$3\r\nGET\r\n$1\r\nk\r\n
        assert_eq!(
            resp_array(&[3, 1]),
            "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".len() as u64
        );
        assert_eq!(digits(0), 1);
        assert_eq!(digits(10), 2);
        assert_eq!(Script::new(SCRIPT).get_hash().len(), 40);
    }

    const TIMEOUT: Duration = Duration::from_secs(5);

    /// A link to a scripted Redis with `answers` (cluster `c`), and what the Redis will have
    /// exchanged once the link is dropped.
    async fn connect(
        answers: Answers,
    ) -> (
        Result<Link, LinkError>,
        tokio::task::JoinHandle<Vec<Exchange>>,
    ) {
        let (address, serve) = scripted(answers).await;
        let target = Target { address, tls: None };
        let dataset = dataset_key("c");
        let link = Link::connect(target, None, "node", &dataset, TIMEOUT).await;
        (link, serve)
    }

    /// Connects to a scripted Redis with `answers` and runs one round of `pushes` and
    /// `add` (penalties started here, also added back as if Redis had lost them).
    async fn round_with(
        answers: Answers,
        pushes: &[Push],
        add: &[([u8; tollgate_filter::LimitKey::LEN], u64)],
    ) -> (Result<Round, LinkError>, Vec<Exchange>) {
        let (link, serve) = connect(answers).await;
        let mut link = link.expect("a master");
        assert_eq!((link.run_id.as_str(), link.dataset.as_str()), ("r1", ID));
        let set = penalty_set("c");
        let penalties = Penalties {
            set: &set,
            add,
            again: add,
            now_ms: 1_700_000_000_012,
        };
        let keys = super::super::lists::Keys::new("c");
        let lists = Outgoing {
            keys: &keys,
            changes: &[],
            now_ms: penalties.now_ms,
            token: "t",
        };
        let round = link.round(pushes, &penalties, &lists, TIMEOUT).await;
        drop(link);
        (round, serve.await.unwrap())
    }

    fn pushes(count: u64) -> Vec<Push> {
        let key = [3u8; tollgate_filter::LimitKey::LEN];
        (0..count)
            .map(|i| Push {
                current: key_name("c", 1, &key, 1000, 2 * i + 1),
                previous: key_name("c", 1, &key, 1000, 2 * i),
                ttl_ms: 2000 + i,
                add_current: [0, 7, 12_345][usize::try_from(i % 3).unwrap()],
                add_previous: if i % 5 == 0 { 300 } else { 0 },
            })
            .collect()
    }

    #[tokio::test]
    async fn a_round_reads_what_redis_answers_and_costs_what_crossed_the_wire() {
        // 513 suspects: two EVALSHA, of 512 and 1.
        let pushes = pushes(BATCH as u64 + 1);
        // Five penalties in force (ten items in the reply: two digits in its length).
        let live: Vec<_> = (0..5u8)
            .map(|i| {
                (
                    [i; tollgate_filter::LimitKey::LEN],
                    1_700_000_060_000 + u64::from(i),
                )
            })
            .collect();
        let answers = Answers {
            // The previous window of suspect 1 (nothing added to it) holds 40 already.
            counters: vec![(pushes[1].previous.clone(), 40)],
            // A member of another length than a penalty key's is no penalty key.
            live: live
                .iter()
                .map(|(key, until)| (key.to_vec(), *until))
                .chain([(b"short".to_vec(), 1_700_000_070_000)])
                .collect(),
            ..Answers::default()
        };
        let (round, exchanges) = round_with(answers, &pushes, &live[..1]).await;
        let round = round.expect("a round");
        let mut expected: Vec<Totals> = pushes
            .iter()
            .map(|p| (p.add_current, p.add_previous))
            .collect();
        expected[1].1 = 40;
        assert_eq!(round.totals, expected);
        assert_eq!(round.redis_ns, 1_700_000_000_012_345_000);
        assert_eq!(round.live, live);
        assert_eq!(round.lists_version.as_deref(), Some("v7"));
        let evalsha = exchanges.iter().filter(|e| e.args[0] == b"EVALSHA");
        assert_eq!(
            evalsha.map(|e| e.args.len()).collect::<Vec<_>>(),
            [4 + 5 * BATCH + 1, 4 + 5 + 1]
        );
        assert_eq!(round.cost, on_the_wire(&exchanges));
        // Without penalties to add, no expiry to set.
        let (round, exchanges) = round_with(Answers::default(), &pushes[..1], &[]).await;
        assert!(exchanges.iter().all(|e| e.args[0] != b"PEXPIRE"));
        assert_eq!(round.expect("a round").cost, on_the_wire(&exchanges));
    }

    /// What a round's exchanges cost: every byte sent, every byte of the replies read (not
    /// those ignored), and the commands Redis ran.
    fn on_the_wire(exchanges: &[Exchange]) -> Cost {
        let read = [&b"TIME"[..], b"GET", b"EVALSHA", b"ZRANGEBYSCORE"];
        Cost {
            sent: exchanges.iter().map(|e| e.request as u64).sum(),
            received: exchanges
                .iter()
                .filter(|e| read.contains(&&e.args[0][..]))
                .map(|e| e.reply as u64)
                .sum(),
            commands: exchanges.iter().map(|e| e.ran).sum(),
        }
    }

    #[tokio::test]
    async fn only_a_master_is_written_to() {
        let roles: [(&[u8], Option<&str>); 5] = [
            (b"*3\r\n+master\r\n:0\r\n*0\r\n", None),
            (
                b"*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n$9\r\nconnected\r\n:0\r\n",
                Some("slave"),
            ),
            (b"*3\r\n+slave\r\n$1\r\nx\r\n:0\r\n", Some("slave")),
            (b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n", None),
            (b"*0\r\n", Some("None")),
        ];
        for (role, refused) in roles {
            let (link, _) = connect(Answers {
                role,
                ..Answers::default()
            })
            .await;
            let refusal = link.err().map(|error| {
                let refusal = error.downcast_ref::<Refusal>().expect("a refusal").clone();
                assert!(
                    refusal
                        .to_string()
                        .starts_with("not a master (ROLE answered ")
                );
                refusal
            });
            let expected = refused.map(|role| Refusal::NotMaster(role.to_owned()));
            assert_eq!(refusal, expected, "{}", String::from_utf8_lossy(role));
        }
    }

    #[tokio::test]
    async fn a_round_into_another_dataset_is_refused_as_such_and_other_errors_are_not() {
        let pushes = pushes(2);
        let lost = |held: Option<&str>| Refusal::DatasetChanged {
            read: ID.to_owned(),
            held: held.map(str::to_owned),
        };
        let cases = [
            (
                Some("18f2a9c3b4d5f-fedcba9876543210"),
                None,
                Some(lost(Some("18f2a9c3b4d5f-fedcba9876543210"))),
            ),
            (None, None, Some(lost(None))),
            (
                Some(ID),
                Some(&b"-TOLLGATE_DATASET the dataset id changed: Redis lost its data\r\n"[..]),
                Some(lost(None)),
            ),
            (
                Some(ID),
                Some(&b"-NOSCRIPT No matching script\r\n"[..]),
                None,
            ),
        ];
        for (held, refuse, expected) in cases {
            let answers = Answers {
                held,
                refuse,
                ..Answers::default()
            };
            let (round, _) = round_with(answers, &pushes, &[]).await;
            let error = round.expect_err("no round");
            assert_eq!(
                error.downcast_ref::<Refusal>(),
                expected.as_ref(),
                "{error}"
            );
        }
        assert_eq!(
            lost(None).to_string(),
            format!("the dataset id {ID:?} read at connect is gone (FLUSHALL, eviction)")
        );
    }

    #[tokio::test]
    async fn redis_time_and_the_sentinels_master_are_read_as_answered() {
        let (link, _) = connect(Answers::default()).await;
        let time = link.expect("a master").time(TIMEOUT).await.expect("a time");
        assert_eq!(time, 1_700_000_000_012_345_000);
        let sentinel = |reply: &'static [u8]| async move {
            let (address, _) = scripted(Answers {
                sentinel: reply,
                ..Answers::default()
            })
            .await;
            master_of(Target { address, tls: None }, "m", TIMEOUT).await
        };
        let (address, host) = sentinel(b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n")
            .await
            .expect("a master");
        assert_eq!(
            (address, host.as_str()),
            (SocketAddr::from(([127, 0, 0, 1], 6380)), "127.0.0.1")
        );
        let unknown = sentinel(b"*-1\r\n").await.expect_err("no master");
        assert!(
            unknown.to_string().contains("does not know master `m`"),
            "{unknown}"
        );
    }

    #[test]
    fn the_cluster_keys_are_named_as_documented_and_dataset_ids_never_repeat() {
        assert_eq!(dataset_key("c"), b"tollgate:c:dataset");
        assert_eq!(penalty_set("c"), b"tollgate:c:penalties");
        let (one, two) = (new_dataset_id(), new_dataset_id());
        assert_ne!(one, two);
        assert!(one.len() > 17 && one.contains('-'), "{one}");
    }

    #[test]
    fn a_password_file_is_read_trimmed_and_an_empty_one_refused() {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-redis-password-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("password");
        let source = TokenSource::File(path.clone());
        std::fs::write(&path, "  s3cret \n").unwrap();
        assert_eq!(read_password(&source).as_deref(), Ok("s3cret"));
        std::fs::write(&path, " \n").unwrap();
        let empty = read_password(&source).expect_err("no password");
        assert!(empty.ends_with("holds no password"), "{empty}");
        std::fs::remove_file(&path).unwrap();
        let missing = read_password(&source).expect_err("no file");
        assert!(missing.starts_with("[cluster] password_file "), "{missing}");
    }

    #[test]
    fn time_past_what_redis_gives_saturates() {
        assert_eq!(unix_nanos(1_700_000_000, 12_345), 1_700_000_000_012_345_000);
        assert_eq!(unix_nanos(0, u64::MAX / 999), u64::MAX);
        assert_eq!(unix_nanos(u64::MAX / 999, 0), u64::MAX);
    }

    #[test]
    fn a_push_reply_is_read_in_pairs_and_counted_as_sent() {
        let mut totals = Vec::new();
        // `*4\r\n:40\r\n:0\r\n:-3\r\n:7\r\n`
        let received = push_totals(&[40, 0, -3, 7], &mut totals);
        assert_eq!(received, Ok(4 + 5 + 4 + 5 + 4));
        assert_eq!(totals, [(40, 0), (0, 7)]);
        let odd = push_totals(&[40, 0, 5], &mut totals);
        assert_eq!(
            odd,
            Err("a push's reply holds 3 totals, not two a suspect".into())
        );
        assert_eq!(totals.len(), 2, "nothing of a refused reply is kept");
    }
}
