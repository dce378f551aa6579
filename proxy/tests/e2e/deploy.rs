//! What `proxy/deploy/` ships stays true to the proxy: every example config passes `tollgate
//! check`; every metric the Grafana dashboard and the Prometheus alert rules name is one the
//! proxy exports (read from a running proxy's `/metrics`); the systemd unit keeps its
//! hardening, and `systemd-analyze verify` accepts it; promtool parses the rules and every
//! dashboard query and runs the rules' unit tests. The last two are ignored without their
//! tools: run with `--include-ignored` after installing `systemd` and `promtool`, and then a
//! missing tool fails them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::support;
use tollgate::metrics::Metrics;

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

#[test]
fn every_example_config_passes_check() {
    let dir = deploy_dir().join("examples");
    let mut checked = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("proxy/deploy/examples exists") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "toml") {
            let mut out = Vec::new();
            let code = tollgate::tools::check::check(&path, &mut out).expect("output is written");
            assert_eq!(
                code,
                ExitCode::SUCCESS,
                "{} is refused by check:\n{}",
                path.display(),
                String::from_utf8_lossy(&out)
            );
            checked.insert(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    for expected in ["one-service.toml", "behind-balancer.toml", "udp-dns.toml"] {
        assert!(
            checked.contains(expected),
            "{expected} missing: {checked:?}"
        );
    }
}

/// The metric names an exposition text makes queryable: each sample's name, and for
/// families with no sample yet the names their `# TYPE` line promises (`_total` for a
/// counter, `_bucket`, `_sum` and `_count` for a histogram).
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                panic!("a bad TYPE line: {line}");
            };
            match kind {
                "counter" => names.insert(format!("{name}_total")),
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                    true
                }
                _ => names.insert(name.to_owned()),
            };
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

/// Aggregation operators and keywords of PromQL: never metric names.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "atan2",
];

/// The index just past the bracket that closes the one at `open` (`{`, `[` or `(`), quotes
/// inside skipped.
fn close_of(chars: &[char], open: usize) -> usize {
    let (left, right) = match chars[open] {
        '{' => ('{', '}'),
        '[' => ('[', ']'),
        _ => ('(', ')'),
    };
    let mut depth = 0;
    let mut i = open;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => i = close_of_quote(chars, i) - 1,
            c if c == left => depth += 1,
            c if c == right => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    panic!("unclosed {left} in {:?}", chars.iter().collect::<String>())
}

/// The index just past the quote that closes the one at `open`.
fn close_of_quote(chars: &[char], open: usize) -> usize {
    let quote = chars[open];
    let mut i = open + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            c if c == quote => return i + 1,
            _ => {}
        }
        i += 1;
    }
    panic!("unclosed quote in {:?}", chars.iter().collect::<String>())
}

/// The metric names a PromQL expression selects: identifiers that are not functions (followed
/// by `(`), aggregations or keywords, outside label matchers `{}`, ranges `[]`, strings, and
/// the label lists of `by (...)`, `without`, `on`, `ignoring`, `group_left`, `group_right`.
fn metric_names(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut labels_follow = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = close_of_quote(&chars, i);
        } else if c == '{' || c == '[' {
            i = close_of(&chars, i);
        } else if c == '(' && labels_follow {
            labels_follow = false;
            i = close_of(&chars, i);
        } else if c.is_ascii_digit() || c == '.' || c == '$' {
            // A number, a duration (5m), or a dashboard variable.
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "._".contains(chars[i])) {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            labels_follow = matches!(
                word.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            );
            if !KEYWORDS.contains(&word.as_str()) && next != Some(&'(') {
                names.push(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn metric_names_are_read_from_promql() {
    assert_eq!(
        metric_names(
            "sum by (listener, reason) (rate(tollgate_refused_total{listener=~\"$l\", \
             reason=~\"a|b}\"}[$__rate_interval])) / on (listener) group_left \
             tollgate_udp_session_limit > 0.9"
        ),
        ["tollgate_refused_total", "tollgate_udp_session_limit"]
    );
    assert_eq!(
        metric_names(
            "histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m] offset 1h))) \
             and max without (instance) (up{job=\"t\"}) == bool 1"
        ),
        ["x_bucket", "up"]
    );
    assert_eq!(
        metric_names("max(tollgate_cluster_alone) == 1e3"),
        ["tollgate_cluster_alone"]
    );
}

/// Every PromQL expression of the Grafana dashboard (panel targets and the template
/// variables' `label_values` queries).
fn dashboard_exprs(dashboard: &serde_json::Value) -> Vec<String> {
    fn walk(value: &serde_json::Value, exprs: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("expr", serde_json::Value::String(expr)) => exprs.push(expr.clone()),
                        _ => walk(value, exprs),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, exprs)),
            _ => {}
        }
    }
    let mut exprs = Vec::new();
    walk(&dashboard["panels"], &mut exprs);
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating");
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let query = variable["query"]["query"].as_str().expect("a query string");
        // label_values(SELECTOR, LABEL): the selector is the PromQL.
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|rest| rest.rsplit_once(','))
            .map(|(selector, _label)| selector)
            .unwrap_or_else(|| panic!("variable {}: not label_values: {query}", variable["name"]));
        exprs.push(inner.to_owned());
    }
    exprs
}

/// The `expr:` of every rule in the alert rules file (each on one line) with its alert name.
fn alert_exprs(text: &str) -> Vec<(String, String)> {
    let mut alert = None;
    let mut exprs = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("- alert:") {
            alert = Some(name.trim().to_owned());
        } else if let Some(expr) = line.strip_prefix("expr:") {
            let expr = expr.trim();
            assert!(
                !expr.is_empty() && !expr.starts_with(['|', '>']),
                "alerts.yml:{}: keep each expr on its line",
                index + 1
            );
            let name = alert
                .take()
                .unwrap_or_else(|| panic!("alerts.yml:{}: an expr with no alert", index + 1));
            exprs.push((name, expr.to_owned()));
        }
    }
    exprs
}

/// The names a running proxy exports: a TCP and a UDP listener and `[cluster]` (its Redis
/// away: the node limits alone) served in-process, driven until every labelled family has a
/// series (a family shows in `/metrics` only from its first one): a throttle, a shadow
/// throttle, a listed source's refusal, an unreachable upstream, a reload. `/metrics` is read
/// from the admin endpoint. The kernel fast path's names come from the registry with
/// `[kernel]` on: a real start would program the host's nftables.
async fn exported() -> BTreeSet<String> {
    let closed = support::closed_port().await;
    let server = support::start(&format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n\n[cluster]\nredis = [\"{closed}\"]\nname = \
         \"deploy\"\n\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nupstreams = \
         [\"{closed}\"]\nmax_connections = 100\n\n[[listener]]\nname = \"dns\"\nprotocol = \
         \"udp\"\nlisten = \"127.0.0.1:0\"\nupstreams = [\"{closed}\"]\nmax_sessions = \
         100\n\n[lists]\ndeny = [\"127.0.0.9/32\"]\n\n[[rule]]\nname = \"r\"\nlimits = [{{ rate = \
         \"1/10s\" }}]\n\n[[rule]]\nname = \"s\"\nshadow = true\nlimits = [{{ rate = \"1/10s\" \
         }}]\n"
    ))
    .await;
    let web = server.local_addr("web").expect("web is bound");
    // Allowed (then the upstream is unreachable), throttled by `r` and `s`, listed.
    for from in ["127.0.0.2", "127.0.0.2", "127.0.0.9"] {
        let _ = support::attempt(from, web).await;
    }
    support::eventually(|| support::metric(&server, "tollgate_upstream_errors_total") > 0.0).await;
    let _ = server.shared().reloader().reload();
    let (status, body) = support::admin(&server, "GET", "/metrics").await;
    assert_eq!(status, 200, "{body}");
    let (policy, now) = (server.shared().filter().policy(), server.shared().now());
    server.shutdown().await;
    let mut names = exported_names(&body);
    let kernel = Metrics::for_sections(false, true);
    kernel.kernel.set_elements("v4", 0);
    names.extend(exported_names(&kernel.render(&policy, now)));
    names
}

/// Metric names a query may use that Prometheus itself makes (the scrape's own `up`).
const PROMETHEUS_OWN: &[&str] = &["up"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alerts_name_only_exported_metrics() {
    let exported = exported().await;
    for expected in [
        "tollgate_decisions_total",
        "tollgate_cluster_alone",
        "tollgate_cluster_sync_seconds_bucket",
        "tollgate_udp_sessions",
        "tollgate_kernel_errors_total",
    ] {
        assert!(
            exported.contains(expected),
            "{expected} not in {exported:?}"
        );
    }
    let dashboard_path = deploy_dir().join("grafana-dashboard.json");
    let alerts_path = deploy_dir().join("alerts.yml");
    let dashboard: serde_json::Value =
        serde_json::from_str(&read(&dashboard_path)).expect("the dashboard is JSON");
    let alerts = read(&alerts_path);
    let mut queries: Vec<(String, String)> = dashboard_exprs(&dashboard)
        .into_iter()
        .map(|expr| ("grafana-dashboard.json".to_owned(), expr))
        .collect();
    let rules = alert_exprs(&alerts);
    let alert_names: BTreeSet<&str> = rules.iter().map(|(name, _)| name.as_str()).collect();
    for needed in [
        "TollgateAloneInCluster",
        "TollgateReloadFailed",
        "TollgateDecideFailures",
        "TollgateFrontSaturated",
    ] {
        assert!(alert_names.contains(needed), "no {needed} in alerts.yml");
    }
    queries.extend(
        rules
            .iter()
            .map(|(name, expr)| (format!("alerts.yml {name}"), expr.clone())),
    );
    let mut unknown = Vec::new();
    let mut used = BTreeSet::new();
    for (place, expr) in &queries {
        let names = metric_names(expr);
        if names.is_empty() {
            unknown.push(format!("{place}: no metric in `{expr}`"));
        }
        for name in names {
            if !exported.contains(&name) && !PROMETHEUS_OWN.contains(&name.as_str()) {
                unknown.push(format!("{place}: `{name}` is not exported, in `{expr}`"));
            }
            used.insert(name);
        }
    }
    // Names in titles, descriptions and annotations must be real too.
    for (file, text) in [
        ("grafana-dashboard.json", read(&dashboard_path)),
        ("alerts.yml", alerts),
        (
            "alerts.test.yml",
            read(&deploy_dir().join("alerts.test.yml")),
        ),
    ] {
        for (index, line) in text.lines().enumerate() {
            for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("tollgate_") && !exported.contains(word) {
                    unknown.push(format!("{file}:{}: `{word}` is not exported", index + 1));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "names the proxy does not export:\n{}",
        unknown.join("\n")
    );
    assert!(
        queries.len() >= 40 && used.len() >= 30,
        "{} queries, {} names: the files were not read whole",
        queries.len(),
        used.len()
    );
}

/// `KEY=value` settings of the unit's `[Service]` section (a key set twice keeps each value).
fn service_settings(unit: &str) -> Vec<(String, String)> {
    let mut section = "";
    let mut settings = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[Service]" && !line.starts_with('#') {
            if let Some((key, value)) = line.split_once('=') {
                settings.push((key.to_owned(), value.to_owned()));
            }
        }
    }
    settings
}

#[test]
fn the_unit_is_hardened_and_reloads_with_sighup() {
    let unit = read(&deploy_dir().join("tollgate.service"));
    let settings = service_settings(&unit);
    let get = |key: &str| -> Vec<&str> {
        settings
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("StateDirectory", "tollgate"),
        // Only binding low ports; CAP_NET_ADMIN is for [kernel] alone, added by hand.
        ("CapabilityBoundingSet", "CAP_NET_BIND_SERVICE"),
        ("AmbientCapabilities", "CAP_NET_BIND_SERVICE"),
        // server.rs reloads on SIGHUP (proxy/tests/e2e/signals.rs shows it).
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
        ("KillSignal", "SIGTERM"),
        // SIGTERM to the proxy only: the nft child deleting the kernel table at shutdown
        // must not be killed with it.
        ("KillMode", "mixed"),
    ] {
        assert_eq!(get(key), [value], "tollgate.service: {key}");
    }
    let files: u64 = get("LimitNOFILE")
        .first()
        .and_then(|v| v.parse().ok())
        .expect("LimitNOFILE is a number");
    // One TCP listener at the default 10,000 connections needs 20,129 (README, Descriptors).
    assert!(files >= 20_129, "LimitNOFILE={files}");
    let start = get("ExecStart");
    assert!(
        start.len() == 1 && start[0].ends_with(" run --config /etc/tollgate/tollgate.toml"),
        "ExecStart: {start:?}"
    );
}

/// The unit with its `ExecStart` pointing at the binary this test built (verify checks that
/// the command exists), in a fresh directory (removed when dropped).
fn unit_for_this_build(name: &str) -> (tempfile::TempDir, PathBuf) {
    let unit = read(&deploy_dir().join("tollgate.service"))
        .replace("/usr/local/bin/tollgate", env!("CARGO_BIN_EXE_tollgate"));
    let dir = support::scratch(&format!("unit-{name}"));
    let path = dir.path().join("tollgate.service");
    std::fs::write(&path, unit).unwrap();
    (dir, path)
}

fn systemd_analyze(args: &[&str], unit: &Path) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(args)
        .arg(unit)
        .output()
        .unwrap_or_else(|err| {
            panic!(
                "cannot run systemd-analyze ({err}): install it (apt-get install systemd) or \
                 leave out --include-ignored"
            )
        })
}

#[test]
#[ignore = "needs systemd-analyze on the PATH; run with --include-ignored"]
fn systemd_analyze_verifies_the_unit() {
    let (_dir, unit) = unit_for_this_build("verify");
    let out = systemd_analyze(&["verify"], &unit);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // verify exits 0 on unknown keys and bad values it ignores: any word from it is a failure.
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify tollgate.service ({}):\n{said}",
        out.status
    );
    // The exposure score, 0 (locked down) to 10: 2.0 or less ("OK").
    let out = systemd_analyze(&["security", "--offline=true", "--threshold=20"], &unit);
    assert!(
        out.status.success(),
        "systemd-analyze security: exposure above 2.0 ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Runs `promtool ARGS...` in `dir`; panics with its output if it fails.
fn promtool(dir: &Path, args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|err| {
            panic!(
                "cannot run promtool ({err}): install it (apt-get install prometheus, or \
                 extract usr/bin/promtool from its .deb) or leave out --include-ignored"
            )
        });
    assert!(
        out.status.success(),
        "promtool {} ({}):\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs promtool on the PATH; run with --include-ignored"]
fn promtool_accepts_the_rules_their_unit_tests_and_every_dashboard_query() {
    let deploy = deploy_dir();
    promtool(&deploy, &["check", "rules", "alerts.yml"]);
    // Each alert fires on the series it is about, and not on its neighbours' (a per-source
    // cap is not a full front): alerts.test.yml.
    promtool(&deploy, &["test", "rules", "alerts.test.yml"]);
    // The dashboard's queries as recording rules, the Grafana variables given values: promtool
    // parses every one as PromQL.
    let dashboard: serde_json::Value =
        serde_json::from_str(&read(&deploy.join("grafana-dashboard.json"))).unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (index, expr) in dashboard_exprs(&dashboard).iter().enumerate() {
        let expr = expr
            .replace("$__rate_interval", "5m")
            .replace("$instance", ".*")
            .replace("$listener", ".*");
        let quoted = serde_json::to_string(&expr).unwrap();
        rules.push_str(&format!(
            "      - record: dashboard_query_{index}\n        expr: {quoted}\n"
        ));
    }
    let dir = support::scratch("promtool");
    std::fs::write(dir.path().join("dashboard.yml"), rules).unwrap();
    promtool(dir.path(), &["check", "rules", "dashboard.yml"]);
}
