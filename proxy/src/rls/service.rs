//! `ShouldRateLimit`: a gRPC request read into the filter's [`Request`], decided, and the
//! [`Response`] written back as Envoy reads it; and the server that answers it, bounded in
//! message size and in requests at once, closing each connection with an HTTP/2 GOAWAY.

use std::convert::Infallible;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::{mpsc, watch};
use tollgate_filter::{Code, Descriptor, DescriptorPolicy, Entry, Request, Response, Unit};

use super::Rls;
use super::callers::{Admitted, Bounded, Callers, Guarded};
use super::metrics::RlsMetrics;
use super::proto::{
    DescriptorStatus, RateLimit, RateLimitRequest, RateLimitResponse, RateLimitService,
    RateLimitServiceServer, rate_limit_response,
};
use crate::config::RlsConfig;

/// The gRPC service over the state of [`Rls`].
#[derive(Debug)]
struct Service {
    rls: Arc<Rls>,
    metrics: RlsMetrics,
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let request = read(request.into_inner()).inspect_err(|_| {
            self.metrics.invalid("limit_override");
        })?;
        // A panic in the policy is a bug; the service fails open, as the data path does,
        // rather than dropping the caller's stream.
        let decided = catch_unwind(AssertUnwindSafe(|| self.rls.decide(&request)));
        match decided {
            Ok((policy, Ok(response))) => {
                self.metrics.answered(&policy, &request, &response);
                Ok(tonic::Response::new(write(&policy, &response)))
            }
            Ok((_, Err(refusal))) => {
                self.metrics.invalid(refusal.name());
                Err(tonic::Status::invalid_argument(format!(
                    "{}: {refusal}",
                    refusal.name()
                )))
            }
            Err(_) => {
                tracing::error!("the descriptor policy failed: answered OK");
                Ok(tonic::Response::new(RateLimitResponse {
                    overall_code: rate_limit_response::Code::Ok.into(),
                    ..RateLimitResponse::default()
                }))
            }
        }
    }
}

/// The gRPC request as the policy reads it: its strings moved, nothing copied. A
/// descriptor's `limit` override is refused, not ignored: Tollgate limits by its files only.
#[allow(clippy::result_large_err)] // tonic's Status is what the handler returns
fn read(message: RateLimitRequest) -> Result<Request, tonic::Status> {
    let mut descriptors = Vec::with_capacity(message.descriptors.len());
    for (at, descriptor) in message.descriptors.into_iter().enumerate() {
        if descriptor.limit.is_some() {
            return Err(tonic::Status::invalid_argument(format!(
                "limit_override: descriptor {at}: a `limit` override is not supported"
            )));
        }
        let entries = descriptor.entries.into_iter();
        descriptors.push(Descriptor {
            entries: entries.map(|e| Entry::new(e.key, e.value)).collect(),
        });
    }
    Ok(Request {
        domain: message.domain,
        descriptors,
        hits_addend: u64::from(message.hits_addend),
    })
}

/// The policy's response as Envoy reads it: the overall code, and per descriptor its code,
/// the limit that decided it (with the rule's `name`), what is left and when it has room.
fn write(policy: &DescriptorPolicy, response: &Response) -> RateLimitResponse {
    let rules = policy.matcher().rules();
    let statuses = response.statuses.iter().map(|status| DescriptorStatus {
        code: code(status.code).into(),
        current_limit: status.current_limit.map(|limit| RateLimit {
            name: status
                .rule
                .and_then(|r| rules.get(r))
                .and_then(|r| r.name.clone())
                .unwrap_or_default(),
            requests_per_unit: limit.requests_per_unit,
            unit: unit(limit.unit).into(),
        }),
        limit_remaining: status.limit_remaining,
        duration_until_reset: status.duration_until_reset.map(whole_seconds),
    });
    RateLimitResponse {
        overall_code: code(response.code).into(),
        statuses: statuses.collect(),
        ..RateLimitResponse::default()
    }
}

fn code(code: Code) -> rate_limit_response::Code {
    match code {
        Code::Ok => rate_limit_response::Code::Ok,
        Code::OverLimit => rate_limit_response::Code::OverLimit,
    }
}

fn unit(unit: Unit) -> rate_limit_response::rate_limit::Unit {
    use rate_limit_response::rate_limit::Unit as Proto;
    match unit {
        Unit::Second => Proto::Second,
        Unit::Minute => Proto::Minute,
        Unit::Hour => Proto::Hour,
        Unit::Day => Proto::Day,
    }
}

/// `duration_until_reset` rounded up to whole seconds: Envoy writes it into
/// `X-RateLimit-Reset` as whole seconds, dropping the fraction, which would be early.
fn whole_seconds(duration: Duration) -> prost_types::Duration {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    prost_types::Duration {
        seconds: i64::try_from(seconds).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

/// How long a connection closing (at its deadline, or as the service stops) is given beyond
/// `request_timeout`, which ends each request it carries, for the answers to be written and
/// the peer to read the GOAWAY and close; then it is dropped.
const CLOSING_GRACE: Duration = Duration::from_secs(1);

/// Serves `ShouldRateLimit` on `listener` until `stopped` says stop: HTTP/2 without TLS, at
/// most `max_concurrent_requests` streams per connection, request messages of at most
/// `max_message_bytes` (a larger one is refused before it is decoded), the callers held to
/// their bounds (see `callers.rs`). A connection past its deadline is closed gracefully, as
/// every one is when the service stops: HTTP/2's GOAWAY, so that its peer sends no more
/// requests on it and loses none it sent (a second GOAWAY, a round trip later, names the
/// last one taken, and those are answered); one that has not finished HTTP/2's preface is
/// dropped.
pub(super) async fn serve(
    rls: Arc<Rls>,
    listener: tokio::net::TcpListener,
    config: RlsConfig,
    metrics: RlsMetrics,
    mut stopped: watch::Receiver<bool>,
) {
    let callers = Arc::new(Callers::new(config.callers, metrics.clone()));
    let service = RateLimitServiceServer::new(Service { rls, metrics })
        .max_decoding_message_size(config.max_message_bytes);
    let streams = u32::try_from(config.max_concurrent_requests).unwrap_or(u32::MAX);
    let mut http2 = http2::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        .max_concurrent_streams(streams);
    let admitted = Admitted::new(listener, callers);
    // Each connection's task holds a sender: once all are dropped, every connection is closed.
    let (open, mut all_closed) = mpsc::channel::<Infallible>(1);
    loop {
        let guarded = tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => break,
            accepted = admitted.accept() => match accepted {
                Ok(guarded) => guarded,
                Err(err) => {
                    tracing::debug!(%err, listen = %config.listen, "the rate-limit service's accept failed");
                    continue;
                }
            },
        };
        let service = Bounded::new(service.clone(), guarded.caller().clone());
        tokio::spawn(connection(
            http2.clone(),
            guarded,
            service,
            stopped.clone(),
            open.clone(),
        ));
    }
    drop(open);
    let _ = all_closed.recv().await;
}

/// Serves one connection until its peer closes it, or until its deadline passes or the
/// service stops: then a GOAWAY, and `request_timeout` and [`CLOSING_GRACE`] for what it
/// still carries, before it is dropped. `_open` is dropped with it.
async fn connection(
    http2: http2::Builder<TokioExecutor>,
    guarded: Guarded,
    service: Bounded<RateLimitServiceServer<Service>>,
    mut stopped: watch::Receiver<bool>,
    _open: mpsc::Sender<Infallible>,
) {
    let caller = guarded.caller().clone();
    let serving = http2.serve_connection(TokioIo::new(guarded), TowerToHyperService::new(service));
    let mut serving = pin!(serving);
    tokio::select! {
        result = serving.as_mut() => {
            if let Err(err) = result {
                tracing::debug!(%err, "a rate-limit service connection failed");
            }
            return;
        }
        () = caller.deadline() => {}
        _ = stopped.wait_for(|stop| *stop) => {}
    }
    serving.as_mut().graceful_shutdown();
    let grace = caller.request_timeout() + CLOSING_GRACE;
    if tokio::time::timeout(grace, serving).await.is_err() {
        tracing::debug!("a rate-limit service connection did not close after its GOAWAY: dropped");
    }
}

#[cfg(test)]
mod tests {
    use super::super::proto;
    use super::*;

    #[test]
    fn a_reset_is_never_written_early() {
        let at = |d: Duration| whole_seconds(d).seconds;
        assert_eq!(at(Duration::ZERO), 0);
        assert_eq!(at(Duration::from_secs(3)), 3);
        assert_eq!(at(Duration::from_millis(2_001)), 3);
        assert_eq!(at(Duration::from_nanos(1)), 1);
    }

    #[test]
    fn an_override_is_refused_naming_its_descriptor() {
        let override_ = proto::RateLimitDescriptor {
            entries: vec![],
            limit: Some(proto::rate_limit_descriptor::RateLimitOverride::default()),
        };
        let message = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![proto::RateLimitDescriptor::default(), override_],
            hits_addend: 0,
        };
        let status = read(message).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains("descriptor 1"), "{status:?}");
    }
}
