//! The run-time allow/deny lists through the admin endpoint:
//!
//! - `GET /lists`: the entries in force, with the cap and the longest time to live;
//! - `POST /lists/allow`, `POST /lists/deny` with a JSON body
//!   `{"cidr": "192.0.2.0/24", "ttl": "1h", "reason": "..."}` (`ttl` as the config writes
//!   durations, or a number of seconds; `reason` optional): adds the entry, or replaces the
//!   one that list holds for that network;
//! - `DELETE /lists/allow?cidr=...`, `DELETE /lists/deny?cidr=...`: removes it.
//!
//! With `[cluster]`, every change travels to the other nodes (see `crate::cluster`), and
//! an entry that travels shows the node that added it (`"node"`, or `(added on node ...)`).
//! Every change is logged (the network, list, time to live and reason). The bodies are at
//! most 4 KiB and must arrive within 5 s. The changes need the token (see the admin module).

use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use hyper::body::Body;
use hyper::{Request, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use tollgate_filter::{Cidr, ListEntry, ListError, ListKind, Remote, parse_duration};
use tollgate_sketch::Tick;

use super::answer::{Answer, Format, json, query, text};
use crate::shared::Shared;
use crate::state::lists::unix_ms_now;

/// The largest request body read, in bytes.
pub(crate) const MAX_BODY: usize = 4096;

/// How long a request body may take to arrive (a connection being answered is never evicted,
/// so a body trickled in must not hold it for long).
const BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// A new entry as posted.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Posted {
    cidr: String,
    ttl: Ttl,
    #[serde(default)]
    reason: String,
}

/// A time to live: `"90s"`, `"1h"` or a number of seconds.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Ttl {
    Seconds(u64),
    Text(String),
}

/// The list a `/lists/allow` or `/lists/deny` path names.
pub(crate) fn kind_of(path: &str) -> Option<ListKind> {
    match path {
        "/lists/allow" => Some(ListKind::Allow),
        "/lists/deny" => Some(ListKind::Deny),
        _ => None,
    }
}

fn refusal(error: &ListError) -> StatusCode {
    match error {
        ListError::Ttl { .. } | ListError::Reason { .. } => StatusCode::BAD_REQUEST,
        ListError::Full { .. } => StatusCode::INSUFFICIENT_STORAGE,
        ListError::NotFound { .. } => StatusCode::NOT_FOUND,
    }
}

/// The cluster node that added `entry`, if it travels through a cluster.
pub(crate) fn origin(shared: &Shared, entry: &ListEntry) -> Option<String> {
    shared
        .cluster()
        .and_then(|cluster| cluster.list_origin(entry.kind, entry.cidr))
}

fn entry_json(entry: &ListEntry, now: Tick, unix_ms: u64, node: Option<String>) -> Value {
    let left = u64::try_from(entry.expires.saturating_since(now).as_millis()).unwrap_or(u64::MAX);
    let mut value = json!({
        "cidr": entry.cidr.to_string(),
        "list": entry.kind.as_str(),
        "expires_in_ms": left,
        "expires_unix_ms": unix_ms.saturating_add(left),
        "reason": entry.reason,
    });
    if let Some(node) = node {
        value["node"] = json!(node);
    }
    value
}

fn entry_text(entry: &ListEntry, now: Tick, node: Option<String>) -> String {
    format!(
        "{:<5} {:<44} expires in {:>8}s  {:?}{}\n",
        entry.kind.as_str(),
        entry.cidr.to_string(),
        entry.expires.saturating_since(now).as_secs(),
        entry.reason,
        node.map_or_else(String::new, |node| format!("  (added on node {node})"))
    )
}

/// `GET /lists`.
pub(crate) fn list(shared: &Shared, format: Format) -> Answer {
    let lists = shared.filter().lists();
    let now = shared.now();
    lists.sweep(now);
    let entries = lists.entries(now);
    match format {
        Format::Json => {
            let unix_ms = unix_ms_now();
            json(
                StatusCode::OK,
                &json!({
                    "entries": entries
                        .iter()
                        .map(|e| entry_json(e, now, unix_ms, origin(shared, e)))
                        .collect::<Vec<_>>(),
                    "capacity": lists.capacity(),
                    "max_ttl_s": lists.max_ttl().as_secs(),
                }),
            )
        }
        Format::Text => {
            let mut body = format!(
                "{} run-time entries (at most {}, each for at most {}s)\n",
                entries.len(),
                lists.capacity(),
                lists.max_ttl().as_secs()
            );
            for entry in &entries {
                body.push_str(&entry_text(entry, now, origin(shared, entry)));
            }
            text(StatusCode::OK, body)
        }
    }
}

/// `POST /lists/allow` or `/lists/deny` with its body.
pub(crate) async fn add<B>(
    shared: &Shared,
    format: Format,
    kind: ListKind,
    request: Request<B>,
) -> Answer
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let collected = tokio::time::timeout(
        BODY_TIMEOUT,
        Limited::new(request.into_body(), MAX_BODY).collect(),
    )
    .await;
    let body = match collected {
        Err(_) => {
            return format.refuse(
                StatusCode::REQUEST_TIMEOUT,
                &format!("the body did not arrive within {}s", BODY_TIMEOUT.as_secs()),
            );
        }
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(err)) => {
            let status = if err.is::<http_body_util::LengthLimitError>() {
                StatusCode::PAYLOAD_TOO_LARGE
            } else {
                StatusCode::BAD_REQUEST
            };
            return format.refuse(
                status,
                &format!("the body could not be read (at most {MAX_BODY} bytes): {err}"),
            );
        }
    };
    let posted: Posted = match serde_json::from_slice(&body) {
        Ok(posted) => posted,
        Err(err) => {
            return format.refuse(
                StatusCode::BAD_REQUEST,
                &format!(
                    "the body is not {{\"cidr\": \"192.0.2.0/24\", \"ttl\": \"1h\", \
                     \"reason\": \"...\"}}: {err}"
                ),
            );
        }
    };
    let cidr = match Cidr::parse(&posted.cidr) {
        Ok(cidr) => cidr,
        Err(err) => return format.refuse(StatusCode::BAD_REQUEST, &format!("cidr: {err}")),
    };
    let ttl = match &posted.ttl {
        Ttl::Seconds(seconds) => Duration::from_secs(*seconds),
        Ttl::Text(text) => match parse_duration(text) {
            Ok(ttl) => ttl,
            Err(err) => return format.refuse(StatusCode::BAD_REQUEST, &format!("ttl: {err}")),
        },
    };
    let now = shared.now();
    let reason = posted.reason;
    match shared.filter().lists().add(cidr, kind, ttl, reason, now) {
        Ok((entry, replaced)) => {
            super::xdp::sync_lists(shared);
            if let Some(cluster) = shared.cluster() {
                // The rest of the cluster holds it from its next round.
                cluster.list_entry_added(&entry, now);
            }
            tracing::info!(
                list = kind.as_str(),
                cidr = %entry.cidr,
                ttl_s = ttl.as_secs(),
                reason = %entry.reason,
                replaced,
                "run-time list entry added"
            );
            let status = if replaced {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            match format {
                Format::Json => json(
                    status,
                    &entry_json(&entry, now, unix_ms_now(), origin(shared, &entry)),
                ),
                Format::Text => text(
                    status,
                    format!(
                        "{} {}\n{}",
                        if replaced { "replaced" } else { "added" },
                        entry.cidr,
                        entry_text(&entry, now, origin(shared, &entry))
                    ),
                ),
            }
        }
        Err(err) => format.refuse(refusal(&err), &err.to_string()),
    }
}

/// `DELETE /lists/allow?cidr=...` or `/lists/deny?cidr=...`.
pub(crate) fn remove<B>(
    shared: &Shared,
    format: Format,
    kind: ListKind,
    request: &Request<B>,
) -> Answer {
    let Some(cidr) = query(request, "cidr") else {
        return format.refuse(
            StatusCode::BAD_REQUEST,
            &format!(
                "say which network: DELETE /lists/{}?cidr=NETWORK",
                kind.as_str()
            ),
        );
    };
    let cidr = match Cidr::parse(&cidr) {
        Ok(cidr) => cidr,
        Err(err) => return format.refuse(StatusCode::BAD_REQUEST, &format!("cidr: {err}")),
    };
    let now = shared.now();
    match shared.filter().lists().remove(cidr, kind, now) {
        Ok(entry) => {
            super::xdp::sync_lists(shared);
            let node = origin(shared, &entry);
            if let Some(cluster) = shared.cluster() {
                // And from the rest of the cluster by its next round.
                cluster.list_entry_removed(entry.kind, entry.cidr, now);
            }
            tracing::info!(list = kind.as_str(), cidr = %entry.cidr, "run-time list entry removed");
            match format {
                Format::Json => json(
                    StatusCode::OK,
                    &entry_json(&entry, now, unix_ms_now(), node),
                ),
                Format::Text => text(StatusCode::OK, format!("removed {}\n", entry.cidr)),
            }
        }
        Err(err) => format.refuse(refusal(&err), &err.to_string()),
    }
}
