//! The contenders: Tollgate's `DescriptorPolicy`, limitador's in-memory `RateLimiter` (with
//! the `limitador` feature) and a Redis counter per descriptor as envoyproxy/ratelimit keeps
//! it, each deciding one [`Call`] at a time.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tollgate_filter::{Code, Descriptor, DescriptorConfig, DescriptorPolicy, Request};
use tollgate_sketch::{Clock, MonotonicClock};

use crate::calls::{
    CONFIG, Call, DOMAIN, LIMIT_KEY, LIMIT_KEY_PATH, LIMIT_USER, WINDOW_SECONDS, write_key,
    write_user,
};

/// A limiter deciding requests of the workload.
pub(crate) trait Contender {
    /// What it is, for the tables.
    fn name(&self) -> String;
    /// Decides one request: whether it is let through.
    fn decide(&mut self, call: Call) -> bool;
}

/// Tollgate's policy over the [`CONFIG`] rules, deciding one reused [`Request`] whose strings
/// are rewritten for each call (the service moves the gRPC message's strings in), at the
/// production clock's time.
#[derive(Debug)]
pub(crate) struct Tollgate {
    policy: DescriptorPolicy,
    request: Request,
    clock: MonotonicClock,
    memory: usize,
}

impl Tollgate {
    pub(crate) fn new(memory: usize, clock: MonotonicClock) -> Result<Tollgate, String> {
        let config =
            DescriptorConfig::parse(&[("api.yaml", CONFIG)]).map_err(|err| err.to_string())?;
        let policy = DescriptorPolicy::new(&config, memory, None).map_err(|err| err.to_string())?;
        let room = "0".repeat(32);
        let request = Request {
            domain: DOMAIN.into(),
            descriptors: vec![
                Descriptor::of(&[("api_key", &room)]),
                Descriptor::of(&[("api_key", &room), ("path", &room)]),
                Descriptor::of(&[("user", &room)]),
            ],
            hits_addend: 0,
        };
        Ok(Tollgate {
            policy,
            request,
            clock,
            memory,
        })
    }

    /// Bytes of sketch it holds.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.policy.memory_bytes()
    }
}

impl Contender for Tollgate {
    fn name(&self) -> String {
        format!("tollgate ({} MiB)", self.memory >> 20)
    }

    fn decide(&mut self, call: Call) -> bool {
        let [key, key_path, user] = &mut self.request.descriptors[..] else {
            unreachable!("three descriptors, built in `new`");
        };
        write_key(call.key, &mut key.entries[0].value);
        key_path.entries[0].value.clone_from(&key.entries[0].value);
        key_path.entries[1].value.clear();
        key_path.entries[1].value.push_str(call.path());
        write_user(call.user(), &mut user.entries[0].value);
        // A refusal (never, for these requests) would let it through: the service fails open.
        self.policy
            .decide(&self.request, self.clock.now())
            .map_or(true, |response| response.code == Code::Ok)
    }
}

/// limitador's in-memory limiter, its limits written as limitador-server writes the Envoy
/// descriptors into its context (`descriptors[i].key`), with a cache of `cache` counters.
#[cfg(feature = "limitador")]
pub(crate) struct Limitador {
    limiter: limitador::RateLimiter,
    namespace: limitador::limit::Namespace,
    cache: u64,
    key: String,
    user: String,
}

#[cfg(feature = "limitador")]
impl std::fmt::Debug for Limitador {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limitador")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "limitador")]
impl Limitador {
    pub(crate) fn new(cache: u64) -> Result<Limitador, String> {
        use limitador::limit::{Expression, Limit};
        let limiter = limitador::RateLimiter::new(cache);
        let limits = [
            (LIMIT_KEY, vec!["descriptors[0].api_key"]),
            (
                LIMIT_KEY_PATH,
                vec!["descriptors[1].api_key", "descriptors[1].path"],
            ),
            (LIMIT_USER, vec!["descriptors[2].user"]),
        ];
        for (max, variables) in limits {
            let variables = variables
                .into_iter()
                .map(Expression::parse)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| format!("{err:?}"))?;
            let limit = Limit::new(
                DOMAIN,
                u64::from(max),
                WINDOW_SECONDS,
                Vec::new(),
                variables,
            );
            limiter.add_limit(limit);
        }
        Ok(Limitador {
            limiter,
            namespace: DOMAIN.into(),
            cache,
            key: String::new(),
            user: String::new(),
        })
    }
}

#[cfg(feature = "limitador")]
impl Contender for Limitador {
    fn name(&self) -> String {
        format!("limitador 0.14 (cache {})", self.cache)
    }

    fn decide(&mut self, call: Call) -> bool {
        use std::collections::HashMap;
        write_key(call.key, &mut self.key);
        write_user(call.user(), &mut self.user);
        let descriptors = vec![
            HashMap::from([("api_key".to_owned(), self.key.clone())]),
            HashMap::from([
                ("api_key".to_owned(), self.key.clone()),
                ("path".to_owned(), call.path().to_owned()),
            ]),
            HashMap::from([("user".to_owned(), self.user.clone())]),
        ];
        let mut context = limitador::limit::Context::default();
        context.list_binding("descriptors".to_owned(), descriptors);
        self.limiter
            .check_rate_limited_and_update(&self.namespace, &context, 1)
            .map_or(true, |result| !result.limited)
    }
}

/// A `redis-server` this process started on a free loopback port, killed when dropped.
#[derive(Debug)]
pub(crate) struct RedisServer {
    child: Child,
    address: SocketAddr,
}

impl RedisServer {
    /// Starts one; `Ok(None)` when `redis-server` is not on the PATH.
    pub(crate) fn start() -> io::Result<Option<RedisServer>> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err),
        };
        let server = RedisServer {
            child,
            address: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.client()?.get_connection().is_err() {
            if Instant::now() > deadline {
                return Err(io::Error::other("redis-server did not start in 10 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Some(server))
    }

    fn client(&self) -> io::Result<redis::Client> {
        redis::Client::open(format!("redis://{}/", self.address)).map_err(io::Error::other)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A counter per descriptor in Redis as envoyproxy/ratelimit keeps it
/// (`src/redis/fixed_cache_impl.go`): for each descriptor `INCRBY key hits` and `EXPIRE key
/// unit`, all of a request's in one pipeline, one round trip; the key is the domain, the
/// descriptor's `key_value` entries and the window's start, `_`-joined; over when a count
/// passes its limit. Synchronous, one connection, as one of the reference's workers.
pub(crate) struct Redis {
    connection: redis::Connection,
    pipeline: redis::Pipeline,
    key: String,
    user: String,
    window: u64,
    errors: u64,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis").finish_non_exhaustive()
    }
}

impl Redis {
    pub(crate) fn connect(server: &RedisServer) -> io::Result<Redis> {
        let connection = server
            .client()?
            .get_connection()
            .map_err(io::Error::other)?;
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        Ok(Redis {
            connection,
            pipeline: redis::Pipeline::new(),
            key: String::new(),
            user: String::new(),
            // One window for the whole run, as for the others.
            window: since_epoch / WINDOW_SECONDS * WINDOW_SECONDS,
            errors: 0,
        })
    }
}

impl Contender for Redis {
    fn name(&self) -> String {
        let name = "redis INCRBY+EXPIRE (envoyproxy/ratelimit)";
        match self.errors {
            0 => name.into(),
            // Each let through, failing open.
            n => format!("{name}, {n} failed round trips"),
        }
    }

    fn decide(&mut self, call: Call) -> bool {
        write_key(call.key, &mut self.key);
        write_user(call.user(), &mut self.user);
        let window = self.window;
        let keys = [
            format!("{DOMAIN}_api_key_{}_{window}", self.key),
            format!(
                "{DOMAIN}_api_key_{}_path_{}_{window}",
                self.key,
                call.path()
            ),
            format!("{DOMAIN}_user_{}_{window}", self.user),
        ];
        self.pipeline.clear();
        for key in &keys {
            self.pipeline
                .cmd("INCRBY")
                .arg(key)
                .arg(1)
                .cmd("EXPIRE")
                .arg(key)
                .arg(WINDOW_SECONDS)
                .ignore();
        }
        // A failed round trip is let through (failing open) and counted for the table.
        let Ok(counts) = self.pipeline.query::<Vec<u64>>(&mut self.connection) else {
            self.errors += 1;
            return true;
        };
        counts
            .iter()
            .zip([LIMIT_KEY, LIMIT_KEY_PATH, LIMIT_USER])
            .all(|(&count, limit)| count <= u64::from(limit))
    }
}
