//! The rate-limit service Envoy calls (`[rls]`): a real tonic client on loopback against the
//! in-process proxy, speaking `envoy.service.ratelimit.v3` as Envoy does, and `tollgate check`
//! on its YAML files.

use std::path::PathBuf;

use tollgate::config::ProxyConfig;
use tollgate::rls::proto::rate_limit_descriptor::Entry;
use tollgate::rls::proto::rate_limit_response::rate_limit::Unit;
use tollgate::rls::proto::{
    Code, RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitServiceClient,
};
use tollgate::server::Server;
use tonic::transport::Channel;

use crate::support;

/// Three per minute per API key (a named rule), a hundred per hour per path.
const YAML: &str = "\
domain: api
descriptors:
  - key: api_key
    rate_limit:
      name: per_key
      unit: minute
      requests_per_unit: 3
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 100}
";

/// A proxy serving `[rls]` from `api.yaml` (holding `yaml`) beside its config file, and a
/// client connected to it.
struct Rls {
    server: Server,
    dir: tempfile::TempDir,
    client: RateLimitServiceClient<Channel>,
}

async fn serving(yaml: &str, more: &str) -> Rls {
    let dir = support::scratch("rls");
    std::fs::write(dir.path().join("api.yaml"), yaml).expect("written");
    let path = dir.path().join("tollgate.toml");
    let text = format!(
        "[admin]\nenabled = false\n[rls]\nlisten = \"127.0.0.1:0\"\nconfigs = [\"api.yaml\"]\n\
         memory = \"1MiB\"\n{more}\n"
    );
    std::fs::write(&path, &text).expect("written");
    let config = ProxyConfig::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let server = Server::start(config, Some(path)).await.expect("starts");
    let address = server.rls_addr().expect("[rls] runs");
    let client = tokio::time::timeout(
        support::BOUND,
        RateLimitServiceClient::connect(format!("http://{address}")),
    )
    .await
    .expect("connects in time")
    .expect("connects");
    Rls {
        server,
        dir,
        client,
    }
}

/// A request for `domain` of one descriptor per list of `(key, value)` entries.
fn request(domain: &str, descriptors: &[&[(&str, &str)]], hits_addend: u32) -> RateLimitRequest {
    let descriptor = |entries: &[(&str, &str)]| RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        limit: None,
    };
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
        hits_addend,
    }
}

impl Rls {
    async fn ask(&mut self, request: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        tokio::time::timeout(support::BOUND, self.client.should_rate_limit(request))
            .await
            .expect("answers in time")
            .map(tonic::Response::into_inner)
    }

    async fn answer(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.ask(request).await.expect("an answer")
    }

    async fn refused(&mut self, request: RateLimitRequest) -> tonic::Status {
        self.ask(request).await.expect_err("refused")
    }
}

fn key(value: &str) -> [(&str, &str); 1] {
    [("api_key", value)]
}

/// Each status's code and `limit_remaining`.
fn codes(response: &RateLimitResponse) -> Vec<(Code, u32)> {
    response
        .statuses
        .iter()
        .map(|s| (s.code(), s.limit_remaining))
        .collect()
}

#[tokio::test]
async fn under_the_limit_is_ok_with_statuses_and_over_it_is_over_limit() {
    let mut rls = serving(YAML, "").await;
    for remaining in [2, 1, 0] {
        // hits_addend 0, as Envoy sends it: counts as 1.
        let response = rls.answer(request("api", &[&key("k1")], 0)).await;
        assert_eq!(response.overall_code(), Code::Ok);
        assert_eq!(codes(&response), [(Code::Ok, remaining)]);
        let limit = response.statuses[0].current_limit.clone().expect("a limit");
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit()),
            ("per_key", 3, Unit::Minute)
        );
    }
    let over = rls.answer(request("api", &[&key("k1")], 0)).await;
    assert_eq!(over.overall_code(), Code::OverLimit);
    assert_eq!(codes(&over), [(Code::OverLimit, 0)]);
    let reset = over.statuses[0].duration_until_reset.expect("a reset");
    // Not now, and within two windows: 4 counted in this minute fall to the 2 that leave
    // room for one more once this minute ends and half the next has passed (the sliding
    // window weighs the last minute by what of it is still inside one minute): about 90 s.
    assert!((1..=120).contains(&reset.seconds), "{reset:?}");
    // Another key has its own count.
    let other = rls.answer(request("api", &[&key("k2")], 0)).await;
    assert_eq!(codes(&other), [(Code::Ok, 2)]);
}

#[tokio::test]
async fn one_descriptor_over_makes_the_whole_request_over_limit() {
    let mut rls = serving(YAML, "").await;
    rls.answer(request("api", &[&key("k1")], 3)).await;
    let both = rls
        .answer(request("api", &[&key("k1"), &[("path", "/v1/users")]], 0))
        .await;
    assert_eq!(both.overall_code(), Code::OverLimit);
    assert_eq!(codes(&both), [(Code::OverLimit, 0), (Code::Ok, 99)]);
}

#[tokio::test]
async fn hits_addend_is_the_weight() {
    let mut rls = serving(YAML, "").await;
    let three = rls.answer(request("api", &[&key("k1")], 3)).await;
    assert_eq!(codes(&three), [(Code::Ok, 0)]);
    let one_more = rls.answer(request("api", &[&key("k1")], 1)).await;
    assert_eq!(one_more.overall_code(), Code::OverLimit);
    let four = rls.answer(request("api", &[&key("k2")], 4)).await;
    assert_eq!(four.overall_code(), Code::OverLimit, "4 > 3 at once");
    let two = rls.answer(request("api", &[&key("k3")], 2)).await;
    assert_eq!(codes(&two), [(Code::Ok, 1)]);
}

#[tokio::test]
async fn bad_requests_are_invalid_arguments_and_unknown_domains_ok() {
    let mut rls = serving(YAML, "").await;
    let empty = rls.refused(request("api", &[], 0)).await;
    assert_eq!(empty.code(), tonic::Code::InvalidArgument);
    assert!(
        empty
            .message()
            .contains("rate limit descriptor list must not be empty"),
        "{empty:?}"
    );
    let long = "v".repeat(4_097);
    let oversized = rls.refused(request("api", &[&key(&long)], 0)).await;
    assert_eq!(oversized.code(), tonic::Code::InvalidArgument);
    assert!(
        oversized.message().contains("value_too_long")
            && oversized.message().contains("more than 4096"),
        "{oversized:?}"
    );
    let unknown = rls.answer(request("nowhere", &[&key("k1")], 0)).await;
    assert_eq!(unknown.overall_code(), Code::Ok);
    assert_eq!(codes(&unknown), [(Code::Ok, 0)]);
    assert!(unknown.statuses[0].current_limit.is_none());
    let unmatched = rls.answer(request("api", &[&[("user", "u")]], 0)).await;
    assert_eq!(codes(&unmatched), [(Code::Ok, 0)]);
    // The service still answers everyone else.
    let fine = rls.answer(request("api", &[&key("k1")], 0)).await;
    assert_eq!(codes(&fine), [(Code::Ok, 2)]);
}

#[tokio::test]
async fn a_message_past_max_message_bytes_is_refused_before_decoding() {
    let mut rls = serving(YAML, "max_message_bytes = \"1KiB\"").await;
    let status = rls
        .refused(request("api", &[&key(&"v".repeat(2_000))], 0))
        .await;
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    let fine = rls.answer(request("api", &[&key("k1")], 0)).await;
    assert_eq!(codes(&fine), [(Code::Ok, 2)]);
}

#[tokio::test]
async fn a_reload_rereads_the_files_and_keeps_the_counts() {
    let mut rls = serving(YAML, "").await;
    for _ in 0..2 {
        rls.answer(request("api", &[&key("k1")], 0)).await;
    }
    let yaml = rls.dir.path().join("api.yaml");
    // A bad file refuses the reload: the rules in force stay, counts and all.
    std::fs::write(&yaml, YAML.replace("minute", "fortnight")).expect("written");
    let refused = rls.server.shared().reloader().reload_off_runtime().await;
    let message = refused.expect_err("a bad file is refused").to_string();
    assert!(
        message.contains("api.yaml:6:13: invalid rate limit unit"),
        "{message}"
    );
    // The same path with a new limit, and a new rule: the count of k1 carries over.
    let changed = YAML.replace("requests_per_unit: 3", "requests_per_unit: 4")
        + "  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    std::fs::write(&yaml, changed).expect("written");
    rls.server
        .shared()
        .reloader()
        .reload_off_runtime()
        .await
        .expect("reloaded");
    let after = rls.answer(request("api", &[&key("k1")], 0)).await;
    assert_eq!(
        codes(&after),
        [(Code::Ok, 1)],
        "2 counted before, 1 now, of 4"
    );
    let limit = after.statuses[0].current_limit.clone().expect("a limit");
    assert_eq!(limit.requests_per_unit, 4);
    let user = rls.answer(request("api", &[&[("user", "u")]], 0)).await;
    let limit = user.statuses[0].current_limit.clone();
    assert_eq!(
        limit.map(|l| l.unit()),
        Some(Unit::Second),
        "the new rule is in force"
    );
}

#[tokio::test]
async fn a_key_over_its_limit_stays_refused_across_a_restart() {
    let scratch = support::scratch("rls-state");
    let state = scratch.path().join("state.bin");
    let more = format!("[proxy]\nstate_file = \"{}\"", state.display());
    let mut rls = serving(YAML, &more).await;
    for _ in 0..4 {
        rls.answer(request("api", &[&key("k1")], 0)).await;
    }
    rls.answer(request("api", &[&key("k2")], 0)).await;
    let Rls {
        server,
        dir,
        client,
    } = rls;
    drop((client, dir));
    // Shutdown saves the state file: with [rls], format version 2.
    server.shutdown().await;
    let saved = std::fs::read(&state).expect("saved at shutdown");
    assert_eq!(saved[8], 2, "the descriptor section makes version 2");

    let mut rls = serving(YAML, &more).await;
    let over = rls.answer(request("api", &[&key("k1")], 0)).await;
    assert_eq!(over.overall_code(), Code::OverLimit, "k1 is still over");
    // 1 before the restart, 1 now, of 3: let through.
    let k2 = rls.answer(request("api", &[&key("k2")], 0)).await;
    assert_eq!(k2.overall_code(), Code::Ok);
    assert!(k2.statuses[0].limit_remaining <= 1, "{k2:?}");
    // A key never seen is let through.
    let fresh = rls.answer(request("api", &[&key("k3")], 0)).await;
    assert_eq!(fresh.overall_code(), Code::Ok, "{fresh:?}");
}

#[test]
fn check_names_the_yaml_file_line_and_column() {
    let dir = support::scratch("rls-check");
    let bad = YAML.replace("unit: minute", "unit: fortnight");
    std::fs::write(dir.path().join("bad.yaml"), bad).expect("written");
    let path: PathBuf = dir.path().join("tollgate.toml");
    let text = "[rls]\nlisten = \"127.0.0.1:8081\"\nconfigs = [\"bad.yaml\"]\n";
    std::fs::write(&path, text).expect("written");
    let mut out = Vec::new();
    let code = tollgate::tools::check::check(&path, &mut out).expect("output is written");
    let out = String::from_utf8_lossy(&out);
    assert_eq!(code, std::process::ExitCode::FAILURE, "{out}");
    let at = format!(
        "{}:6:13: invalid rate limit unit 'fortnight'",
        dir.path().join("bad.yaml").display()
    );
    assert!(out.contains(&at), "{at} not in\n{out}");
    // The same file fixed passes, and says what it holds.
    std::fs::write(dir.path().join("bad.yaml"), YAML).expect("written");
    let mut out = Vec::new();
    let code = tollgate::tools::check::check(&path, &mut out).expect("output is written");
    let out = String::from_utf8_lossy(&out);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}");
    assert!(out.contains("[rls]: valid; 2 descriptor rule(s)"), "{out}");
}

/// A client of the service whose connections come from `from` (a 127.x.y.z address).
async fn client_from(from: &str, to: std::net::SocketAddr) -> RateLimitServiceClient<Channel> {
    let from: std::net::IpAddr = from.parse().expect("an address");
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{to}")).expect("a URI");
    let channel = tokio::time::timeout(
        support::BOUND,
        endpoint.connect_with_connector(From(from, to)),
    )
    .await
    .expect("connects in time")
    .expect("connects");
    RateLimitServiceClient::new(channel)
}

/// tonic's connector for [`client_from`]: a socket bound to the source address, then
/// connected.
#[derive(Clone, Copy)]
struct From(std::net::IpAddr, std::net::SocketAddr);

impl tonic::codegen::Service<tonic::codegen::http::Uri> for From {
    type Response = hyper_util::rt::TokioIo<tokio::net::TcpStream>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<Self::Response>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: tonic::codegen::http::Uri) -> Self::Future {
        let From(from, to) = *self;
        Box::pin(async move {
            let stream = support::connect_from(&from.to_string(), to).await?;
            Ok(hyper_util::rt::TokioIo::new(stream))
        })
    }
}

/// The real binary serving `[rls]` with `YAML` and the lines `bounds` more: the process, and
/// the service's address. The scratch directory holds the YAML file.
fn launch(
    dir: &tempfile::TempDir,
    bounds: &str,
) -> (support::process::Proxy, std::net::SocketAddr) {
    launch_with(dir, YAML, bounds)
}

/// As [`launch`], with `yaml_text` in the descriptor file.
fn launch_with(
    dir: &tempfile::TempDir,
    yaml_text: &str,
    bounds: &str,
) -> (support::process::Proxy, std::net::SocketAddr) {
    let yaml = dir.path().join("api.yaml");
    std::fs::write(&yaml, yaml_text).expect("written");
    let rls = support::process::free_port();
    let rest = format!(
        "[rls]\nlisten = \"{rls}\"\nconfigs = [\"{}\"]\nmemory = \"1MiB\"\n{bounds}\n",
        yaml.display()
    );
    let proxy =
        support::process::Launch::new("rls-bounds", "upstreams = [\"127.0.0.1:1\"]", &rest).start();
    (proxy, rls)
}

/// Whether the peer closes `stream` (EOF or a reset) before `BOUND`, and what it sent
/// before: nothing from a connection refused at accept, HTTP/2's SETTINGS from one served.
async fn closed(stream: &mut tokio::net::TcpStream) -> Option<usize> {
    use tokio::io::AsyncReadExt;
    let mut sent = Vec::new();
    match tokio::time::timeout(support::BOUND, stream.read_to_end(&mut sent)).await {
        Ok(_) => Some(sent.len()),
        Err(_) => None,
    }
}

#[tokio::test]
async fn a_caller_over_its_connection_bounds_is_closed_while_others_are_served() {
    let dir = support::scratch("rls-bounds");
    let (proxy, rls) = launch(
        &dir,
        "max_connections_per_address = 2\nmax_connections_per_prefix = 3",
    );
    // Two connections from 127.0.1.2 fill its address's share; the kernel's backlog hands
    // them to the service in order, so the third is accepted after them and closed.
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(
            support::connect_from("127.0.1.2", rls)
                .await
                .expect("connects"),
        );
    }
    let mut third = support::connect_from("127.0.1.2", rls)
        .await
        .expect("connects");
    assert_eq!(
        closed(&mut third).await,
        Some(0),
        "a third from one address is closed"
    );
    // A neighbour in the same /24 takes the prefix's last slot, then the next one is closed.
    let mut neighbour = client_from("127.0.1.3", rls).await;
    let answer = tokio::time::timeout(
        support::BOUND,
        neighbour.should_rate_limit(request("api", &[&key("k1")], 0)),
    )
    .await
    .expect("answers in time")
    .expect("the neighbour is served");
    assert_eq!(answer.into_inner().overall_code(), Code::Ok);
    let mut fourth = support::connect_from("127.0.1.4", rls)
        .await
        .expect("connects");
    assert_eq!(
        closed(&mut fourth).await,
        Some(0),
        "a fourth from one /24 is closed"
    );
    // Another /24 is served while the flood holds its connections.
    let mut other = client_from("127.0.2.1", rls).await;
    let answer = tokio::time::timeout(
        support::BOUND,
        other.should_rate_limit(request("api", &[&key("k1")], 0)),
    )
    .await
    .expect("answers in time")
    .expect("another caller is served");
    assert_eq!(codes(&answer.into_inner()), [(Code::Ok, 1)]);
    let refused = |reason: &str| {
        proxy.metric(&format!(
            "tollgate_rls_connections_refused_total{{reason=\"{reason}\"}}"
        ))
    };
    assert_eq!((refused("address"), refused("prefix")), (1.0, 1.0));
    assert_eq!(proxy.metric("tollgate_rls_connections "), 4.0);
    drop(held);
}

/// An HTTP/2 request of `ShouldRateLimit` whose headers are sent and whose body is held
/// open, on a connection of its own from `from` (kept open while its handle lives): the
/// service counts it in flight until the body ends or `request_timeout` passes.
struct Held {
    answer: h2::client::ResponseFuture,
    body: h2::SendStream<tonic::codegen::Bytes>,
    _connection: h2::client::SendRequest<tonic::codegen::Bytes>,
    /// The connection's task, ending when the service closes it.
    task: tokio::task::JoinHandle<()>,
    /// Every byte the service sent on the connection.
    received: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

async fn held_request(from: &str, to: std::net::SocketAddr) -> Held {
    let stream = support::connect_from(from, to).await.expect("connects");
    let received = std::sync::Arc::default();
    let stream = Recorded {
        stream,
        received: std::sync::Arc::clone(&received),
    };
    let (mut client, connection) = h2::client::handshake(stream).await.expect("HTTP/2");
    let task = tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = tonic::codegen::http::Request::post(format!(
        "http://{to}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .expect("a request");
    let (answer, body) = client.send_request(request, false).expect("sent");
    Held {
        answer,
        body,
        _connection: client,
        task,
        received,
    }
}

/// A connection that keeps a copy of what it reads.
struct Recorded {
    stream: tokio::net::TcpStream,
    received: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl tokio::io::AsyncRead for Recorded {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = std::pin::Pin::new(&mut this.stream).poll_read(cx, buf);
        let mut received = this.received.lock().expect("not poisoned");
        received.extend_from_slice(&buf.filled()[before..]);
        read
    }
}

impl tokio::io::AsyncWrite for Recorded {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl Held {
    /// Sends the body, `request`, and waits for the answer's headers: its HTTP status.
    async fn finish(&mut self, request: RateLimitRequest) -> u16 {
        let message = prost::Message::encode_to_vec(&request);
        // gRPC's frame: not compressed, the length, the message.
        let mut frame = vec![0u8];
        frame.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
        frame.extend_from_slice(&message);
        self.body.send_data(frame.into(), true).expect("sent");
        let answer = tokio::time::timeout(support::BOUND, &mut self.answer)
            .await
            .expect("answers in time")
            .expect("an answer");
        answer.status().as_u16()
    }

    /// Waits (at most `BOUND`) for the service to close the connection, and returns the
    /// GOAWAY frames it sent, each as (last stream id, error code), from the HTTP/2 frames
    /// read (RFC 9113, 4.1 and 6.8).
    async fn goaways(self) -> Vec<(u32, u32)> {
        tokio::time::timeout(support::BOUND, self.task)
            .await
            .expect("the service closes the connection in time")
            .expect("the connection's task ends");
        let received = self.received.lock().expect("not poisoned");
        let mut goaways = Vec::new();
        let mut rest = &received[..];
        while let [l0, l1, l2, kind, _flags, _, _, _, _, after @ ..] = rest {
            let length = u32::from_be_bytes([0, *l0, *l1, *l2]) as usize;
            let Some(payload) = after.get(..length) else {
                break;
            };
            if let (0x7, [s0, s1, s2, s3, e0, e1, e2, e3, ..]) = (*kind, payload) {
                let last = u32::from_be_bytes([*s0, *s1, *s2, *s3]) & 0x7fff_ffff;
                goaways.push((last, u32::from_be_bytes([*e0, *e1, *e2, *e3])));
            }
            rest = &after[length..];
        }
        goaways
    }
}

/// Polls the metric `name` until it reads `value` ([`support::eventually`]: bounded).
async fn until_metric(proxy: &support::process::Proxy, name: &str, value: f64) {
    support::eventually(|| proxy.metric(name) == value).await;
}

/// Asks `client` about API key `value`, in time.
async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    value: &str,
) -> Result<RateLimitResponse, tonic::Status> {
    tokio::time::timeout(
        support::BOUND,
        client.should_rate_limit(request("api", &[&key(value)], 0)),
    )
    .await
    .expect("answers in time")
    .map(tonic::Response::into_inner)
}

/// That `status` refuses a request over the bound `name`, at once.
fn over(status: &tonic::Status, name: &str) {
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains(name), "{status:?}");
}

#[tokio::test]
async fn a_caller_over_its_requests_in_flight_is_refused_at_once_while_others_are_served() {
    let dir = support::scratch("rls-in-flight");
    let (proxy, rls) = launch(
        &dir,
        "max_requests_in_flight_per_address = 1\nmax_requests_in_flight_per_prefix = 2\n\
         request_timeout = \"60s\"\nidle_timeout = \"120s\"",
    );
    let in_flight = "tollgate_rls_requests_in_flight ";
    let mut held = held_request("127.0.1.2", rls).await;
    until_metric(&proxy, in_flight, 1.0).await;
    // Its second request, on another connection, is over the address's bound.
    let mut flooder = client_from("127.0.1.2", rls).await;
    over(
        &ask(&mut flooder, "k1").await.expect_err("refused"),
        "max_requests_in_flight_per_address",
    );
    // A neighbour in its /24 holds the prefix's second request; a third address of the
    // /24 is over the prefix's bound.
    let mut neighbour = held_request("127.0.1.3", rls).await;
    until_metric(&proxy, in_flight, 2.0).await;
    let mut third = client_from("127.0.1.4", rls).await;
    over(
        &ask(&mut third, "k1").await.expect_err("refused"),
        "max_requests_in_flight_per_prefix",
    );
    // Everyone else is served meanwhile.
    let mut other = client_from("127.0.2.1", rls).await;
    let served = ask(&mut other, "k1")
        .await
        .expect("another caller is served");
    assert_eq!(codes(&served), [(Code::Ok, 2)]);
    let refused = |reason: &str| {
        proxy.metric(&format!(
            "tollgate_rls_requests_refused_total{{reason=\"{reason}\"}}"
        ))
    };
    assert_eq!((refused("address"), refused("prefix")), (1.0, 1.0));
    // The held requests end their bodies and are answered; their slots are free again.
    assert_eq!(held.finish(request("api", &[&key("k1")], 0)).await, 200);
    assert_eq!(
        neighbour.finish(request("api", &[&key("k1")], 0)).await,
        200
    );
    until_metric(&proxy, in_flight, 0.0).await;
    for client in [&mut flooder, &mut third] {
        let again = ask(client, "k2")
            .await
            .expect("served once the others are answered");
        assert_eq!(again.overall_code(), Code::Ok);
    }
}

#[tokio::test]
async fn a_connection_without_a_request_is_closed_at_its_deadline() {
    let dir = support::scratch("rls-timeouts");
    let (proxy, rls) = launch(
        &dir,
        "header_timeout = \"1s\"\nrequest_timeout = \"500ms\"\nidle_timeout = \"1s\"",
    );
    // A connection that sends nothing holds its slot until header_timeout (and, never
    // finishing HTTP/2's preface, is dropped request_timeout and a second later).
    let mut silent = support::connect_from("127.0.1.2", rls)
        .await
        .expect("connects");
    // One that asked once and then stays idle, until idle_timeout: closed gracefully, with
    // RFC 9113's two GOAWAYs without error: the first (stream 2^31-1) says no new request,
    // the second, after a round trip, names the last request taken (its own, stream 1). A
    // client with nothing in flight (h2's, Envoy's) may close on the first.
    let mut asked = held_request("127.0.1.3", rls).await;
    assert_eq!(asked.finish(request("api", &[&key("k1")], 0)).await, 200);
    let goaways = asked.goaways().await;
    assert!(
        !goaways.is_empty() && goaways.iter().all(|&(_, error)| error == 0),
        "closed with GOAWAY(NO_ERROR): {goaways:?}"
    );
    assert_eq!(goaways[0].0, 0x7fff_ffff, "{goaways:?}");
    assert!(
        goaways[1..].iter().all(|&(last, _)| last == 1),
        "{goaways:?}"
    );
    let sent = closed(&mut silent).await;
    assert!(
        sent.is_some_and(|n| n > 0),
        "served, then closed at header_timeout"
    );
    let closed = |reason: &str| {
        proxy.metric(&format!(
            "tollgate_rls_connections_closed_total{{reason=\"{reason}\"}}"
        ))
    };
    until_metric(&proxy, "tollgate_rls_connections ", 0.0).await;
    assert_eq!(
        (closed("header_timeout"), closed("idle_timeout")),
        (1.0, 1.0)
    );
}

#[tokio::test]
async fn answers_are_counted_per_rule_and_per_value_only_where_detailed() {
    let dir = support::scratch("rls-metrics");
    let yaml = format!(
        "{YAML}  - key: user\n    detailed_metric: true\n    rate_limit: {{unit: hour, requests_per_unit: 1000}}\n\
         \x20 - key: trial\n    shadow_mode: true\n    rate_limit: {{unit: minute, requests_per_unit: 1}}\n"
    );
    let (proxy, rls) = launch_with(&dir, &yaml, "");
    let mut client = client_from("127.0.0.1", rls).await;
    let mut ask = async |request: RateLimitRequest| {
        tokio::time::timeout(support::BOUND, client.should_rate_limit(request))
            .await
            .expect("answers in time")
    };
    // per_key: 3 OK (the third with nothing left: near the limit), then one over.
    for _ in 0..4 {
        ask(request("api", &[&key("k1")], 0))
            .await
            .expect("answered");
    }
    // A shadow rule over its limit answers OK, counted apart.
    for _ in 0..2 {
        ask(request("api", &[&[("trial", "t")]], 0))
            .await
            .expect("answered");
    }
    // A detailed rule: a series per value up to the cap, then the rest together.
    for n in 0..=100 {
        let user = format!("u{n}");
        ask(request("api", &[&[("user", user.as_str())]], 0))
            .await
            .expect("answered");
    }
    ask(request("nowhere", &[&key("k1")], 0))
        .await
        .expect("answered");
    ask(request("api", &[&[("nothing", "x")]], 0))
        .await
        .expect("answered");
    ask(request("api", &[], 0)).await.expect_err("refused");
    let text = proxy.get("/metrics");
    let metric = |line: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(line)?.strip_prefix(' '))
            .map_or(0.0, |v| v.parse().expect("a number"))
    };
    let rule = |rule: &str, result: &str| {
        metric(&format!(
            "tollgate_rls_rule_descriptors_total{{rule=\"{rule}\",result=\"{result}\"}}"
        ))
    };
    assert_eq!(
        (rule("api.api_key", "ok"), rule("api.api_key", "over_limit")),
        (3.0, 1.0)
    );
    assert_eq!(
        metric("tollgate_rls_rule_near_limit_total{rule=\"api.api_key\"}"),
        1.0
    );
    assert_eq!(
        (
            rule("api.trial", "ok"),
            rule("api.trial", "shadow_over_limit")
        ),
        (1.0, 1.0)
    );
    assert_eq!(rule("api.user", "ok"), 101.0);
    let value = |value: &str| {
        metric(&format!(
            "tollgate_rls_rule_value_descriptors_total{{rule=\"api.user\",value=\"{value}\",result=\"ok\"}}"
        ))
    };
    assert_eq!(
        (value("user_u0"), value("user_u99"), value("_other")),
        (1.0, 1.0, 1.0)
    );
    let values = text
        .lines()
        .filter(|l| l.starts_with("tollgate_rls_rule_value_descriptors_total{"))
        .count();
    assert_eq!(
        values, 101,
        "100 values and _other, none for the rules not detailed"
    );
    let outcome = |outcome: &str| {
        metric(&format!(
            "tollgate_rls_descriptors_total{{outcome=\"{outcome}\"}}"
        ))
    };
    assert_eq!((outcome("unknown_domain"), outcome("no_rule")), (1.0, 1.0));
    assert_eq!(
        metric("tollgate_rls_requests_invalid_total{reason=\"no_descriptors\"}"),
        1.0
    );
    assert_eq!(
        metric("tollgate_rls_requests_total{code=\"over_limit\"}"),
        1.0
    );
}
