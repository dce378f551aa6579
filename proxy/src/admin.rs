//! The admin endpoint (HTTP, loopback by default):
//!
//! - `GET /metrics`: Prometheus metrics;
//! - `GET /top?n=20`: the most rejected sources;
//! - `GET /estimate?source=ADDRESS`: where a source stands under each limit of each rule
//!   (counting nothing);
//! - `POST /reload`: re-read the config file, as SIGHUP does; the answer says what was wrong if
//!   it is refused.
//!
//! hyper serves it; the admin sees little traffic, so clarity matters more than speed here.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tollgate_filter::{DurationText, Source};

use crate::shared::Shared;

/// Serves admin requests on `listener` until `stop` says so.
pub async fn serve(shared: Arc<Shared>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else {
            // Out of files or similar: the data path matters more; try again shortly.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(respond(&shared, &request)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn query<'a>(request: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    request.uri().query()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name).then_some(value)
    })
}

fn respond(shared: &Shared, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => {
            let policy = shared.filter.policy();
            text(
                StatusCode::OK,
                shared.metrics.render(&policy.sketch_stats(shared.now())),
            )
        }
        (&Method::GET, "/top") => {
            let n = query(request, "n")
                .and_then(|n| n.parse().ok())
                .unwrap_or(20);
            let mut body = format!(
                "{:<40} {:>10} {:>10}  last\n",
                "source", "rejected", "error"
            );
            for offender in shared.offenders.top(n) {
                let _ = writeln!(
                    body,
                    "{:<40} {:>10} {:>10}  {}",
                    offender.source.to_string(),
                    offender.count,
                    offender.error,
                    offender.last
                );
            }
            text(StatusCode::OK, body)
        }
        (&Method::GET, "/estimate") => estimate(shared, query(request, "source")),
        (&Method::POST, "/reload") => match shared.reload() {
            Ok(()) => text(StatusCode::OK, "reloaded\n".into()),
            Err(err) => text(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("reload refused; the old policy stays:\n{err}\n"),
            ),
        },
        (&Method::GET, "/") => text(
            StatusCode::OK,
            "GET /metrics\nGET /top?n=20\nGET /estimate?source=ADDRESS\nPOST /reload\n".into(),
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "no such endpoint; see GET /\n".into(),
        ),
    }
}

fn estimate(shared: &Shared, source: Option<&str>) -> Response<Full<Bytes>> {
    let Some(source) = source else {
        return text(
            StatusCode::BAD_REQUEST,
            "say which source: /estimate?source=ADDRESS\n".into(),
        );
    };
    let Ok(addr) = source.parse::<IpAddr>() else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("`{source}` is not an IP address\n"),
        );
    };
    let policy = shared.filter.policy();
    let found = policy.estimates(Source::new(addr), shared.now());
    if found.is_empty() {
        return text(
            StatusCode::OK,
            format!("{addr}: no limit applies (a list decides for it, or no rule matches)\n"),
        );
    }
    let mut body = format!(
        "{:<24} {:>5} {:<44} {:>12} {:>12}\n",
        "rule", "limit", "counted as", "estimate", "allowed"
    );
    for limit in found {
        let rule = policy.rule(limit.at.rule).map_or("?", |r| r.name.as_str());
        let _ = writeln!(
            body,
            "{:<24} {:>5} {:<44} {:>12} {:>12}",
            rule,
            limit.at.limit,
            format!(
                "{}/{}",
                Source::new(addr).masked(limit.prefix),
                limit.prefix.len()
            ),
            limit.estimate,
            format!(
                "{}/{}",
                limit.limit.rate.count,
                DurationText(limit.limit.rate.per)
            ),
        );
    }
    text(StatusCode::OK, body)
}
