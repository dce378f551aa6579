//! A per-client rate limit inside an axum service (a tower middleware), answering
//! `429 Too Many Requests` with the RateLimit headers once a client is over its limit.
//!
//! The limiter is one `RateSketch` in an `Arc`, shared by every request task: fixed memory
//! however many clients arrive, no lock, no per-client entry to evict. Each request counts
//! under its client's IP address; the sliding estimate decides.
//!
//! Runs by itself and exits: it serves on 127.0.0.1:0, sends requests from two clients
//! (127.0.0.1 and 127.0.0.2, both loopback on Linux), prints each status and the headers,
//! and fails if a client got more than its limit through.
//!
//! ```sh
//! cargo run -p tollgate-sketch --example axum_limit
//! ```

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};
use tollgate_sketch::{Clock, MonotonicClock, RateSketch, Tick};

/// Requests a client may make per window.
const LIMIT: u64 = 5;
/// The window: the limit is `LIMIT` per sliding `WINDOW`.
const WINDOW: Duration = Duration::from_secs(60);

/// What every request task shares.
#[derive(Debug)]
struct Limiter {
    sketch: RateSketch,
    clock: MonotonicClock,
}

impl Limiter {
    /// Whole seconds from `now` until `done` holds for the client's estimate, counting nothing
    /// (at most two windows: by then every event counted so far has slid out).
    fn seconds_until(&self, key: &[u8], now: Tick, done: impl Fn(u64) -> bool) -> u64 {
        let horizon = 2 * WINDOW.as_secs();
        (0..=horizon)
            .find(|&s| done(self.sketch.estimate(key, now + Duration::from_secs(s))))
            .unwrap_or(horizon)
    }
}

/// The middleware: counts the request under its client's address, then lets it through or
/// answers 429. Every request is counted, refused ones too, so a client that keeps hammering
/// stays refused.
async fn limit(
    State(limiter): State<Arc<Limiter>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    let key = match peer.ip() {
        IpAddr::V4(ip) => ip.octets().to_vec(),
        IpAddr::V6(ip) => ip.octets().to_vec(),
    };
    let now = limiter.clock.now();
    // The sliding estimate never falls below the true count: a client over LIMIT is always
    // refused. It may exceed it by at most the sketch's stated overcount bound.
    let estimate = limiter.sketch.observe(&key, 1, now);
    let mut response = if estimate <= LIMIT {
        next.run(request).await
    } else {
        let retry = limiter.seconds_until(&key, now, |e| e < LIMIT);
        let mut refused = (StatusCode::TOO_MANY_REQUESTS, "slow down\n").into_response();
        refused
            .headers_mut()
            .insert("retry-after", HeaderValue::from(retry));
        refused
    };
    // Until the client's whole quota is back: its counted requests have slid out.
    let reset = limiter.seconds_until(&key, now, |e| e == 0);
    let headers = response.headers_mut();
    headers.insert("ratelimit-limit", HeaderValue::from(LIMIT));
    headers.insert(
        "ratelimit-remaining",
        HeaderValue::from(LIMIT.saturating_sub(estimate)),
    );
    headers.insert("ratelimit-reset", HeaderValue::from(reset));
    headers.insert(
        "ratelimit-policy",
        HeaderValue::from_str(&format!("{LIMIT};w={}", WINDOW.as_secs()))
            .unwrap_or(HeaderValue::from_static("")),
    );
    response
}

/// One HTTP/1.1 GET from source address `from`: the status line and the RateLimit headers.
async fn get_from(from: IpAddr, to: SocketAddr) -> std::io::Result<(u16, Vec<String>)> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    let mut stream = socket.connect(to).await?;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: example\r\nConnection: close\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not HTTP: {response:?}")))?;
    let headers = response
        .lines()
        .filter(|line| {
            let line = line.to_ascii_lowercase();
            line.starts_with("ratelimit-") || line.starts_with("retry-after")
        })
        .map(str::to_owned)
        .collect();
    Ok((status, headers))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let limiter = Arc::new(Limiter {
        // 1 MiB holds tens of thousands of busy clients to an overcount of a few requests;
        // the crate docs say how to size it.
        sketch: RateSketch::builder()
            .window(WINDOW)
            .memory_bytes(1 << 20)
            .build()?,
        clock: MonotonicClock::new(),
    });
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(middleware::from_fn_with_state(Arc::clone(&limiter), limit));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });

    let mut over = 0;
    for (client, requests) in [("127.0.0.1", LIMIT + 3), ("127.0.0.2", 2)] {
        let from: IpAddr = client.parse()?;
        let mut allowed = 0;
        for n in 1..=requests {
            // A guard against a hang, not a measurement.
            let (status, headers) =
                tokio::time::timeout(Duration::from_secs(10), get_from(from, address)).await??;
            println!("{client} request {n}: {status} {}", headers.join(", "));
            allowed += u64::from(status == 200);
        }
        let expected = requests.min(LIMIT);
        if allowed != expected {
            eprintln!("{client}: {allowed} allowed, expected {expected}");
            over += 1;
        }
    }
    server.abort();
    let stats = limiter.sketch.stats(limiter.clock.now());
    println!(
        "sketch: {} bytes, {} requests in this window, overcount bound {}",
        stats.memory_bytes, stats.events_current, stats.overcount_bound
    );
    Ok(if over == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
