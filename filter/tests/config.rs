//! Config files: a full example parses into the values it says; every kind of bad file is
//! refused whole, with each error's line and what is wrong.

use std::time::Duration;

use tollgate_filter::{Action, Config, Prefix, ProtocolMatch, Weight};

const EXAMPLE: &str = r#"
[sketch]
memory = "64MiB"

[lists]
allow = ["10.0.0.0/8", "2001:db8:1::/48"]
deny  = ["192.0.2.0/24"]

[[rule]]
name = "per-source"
protocol = "tcp"
limits = [
  { rate = "100/10s",  ipv4_prefix = 32, ipv6_prefix = 64 },
  { rate = "1000/10s", ipv4_prefix = 24, ipv6_prefix = 48 },
]
weight = "events"
action = "reset"
shadow = false
penalty = "60s"

[[rule]]
name = "udp-bytes"
protocol = "udp"
sources = ["198.51.100.0/24"]
limits = [{ rate = "1000000/1s" }]
weight = "bytes"
action = "drop"
shadow = true
"#;

#[test]
fn the_readme_example_parses_into_typed_values() {
    let config = Config::parse(EXAMPLE).expect("valid");
    assert_eq!(config.memory, 64 << 20);
    assert_eq!(config.allow.len(), 2);
    assert_eq!(config.deny[0].to_string(), "192.0.2.0/24");
    let rule = &config.rules[0];
    assert_eq!(rule.name, "per-source");
    assert_eq!(rule.protocol, ProtocolMatch::Tcp);
    assert_eq!(rule.limits.len(), 2);
    assert_eq!(rule.limits[1].rate.count, 1000);
    assert_eq!(rule.limits[1].ipv4_prefix, Prefix::V4(24));
    assert_eq!(rule.limits[1].ipv6_prefix, Prefix::V6(48));
    assert_eq!(rule.action, Action::Reset);
    assert_eq!(rule.penalty, Some(Duration::from_secs(60)));
    let udp = &config.rules[1];
    assert_eq!(
        (udp.weight, udp.action, udp.shadow),
        (Weight::Bytes, Action::Drop, true)
    );
    assert_eq!(
        udp.limits[0].ipv6_prefix,
        Prefix::V6(64),
        "the default IPv6 prefix"
    );
    assert_eq!(udp.sources[0].prefix, Prefix::V4(24));
}

/// The single error of `text`: (line, message).
fn only_error(text: &str) -> (usize, String) {
    let errors = Config::parse(text).expect_err("a bad config").0;
    assert_eq!(errors.len(), 1, "{errors:?}");
    (errors[0].line, errors[0].message.clone())
}

fn rule_with(line3: &str) -> String {
    format!("[[rule]]\nname = \"r\"\n{line3}\n")
}

#[test]
fn each_kind_of_bad_config_names_its_line() {
    let cases: [(String, usize, &str); 11] = [
        (
            rule_with("limits = [{ rate = \"1/s\" }]\ncolour = \"red\""),
            4,
            "unknown field `colour`",
        ),
        (
            "[lists]\nallow = [\"10.0.0.0/8\", \"10.0.0.300/8\"]\n".into(),
            2,
            "not an IP address",
        ),
        (
            "[lists]\ndeny = [\"10.0.0.0/33\"]\n".into(),
            2,
            "longer than an IPv4 address",
        ),
        (
            rule_with("limits = [{ rate = \"1/s\", ipv6_prefix = 129 }]"),
            3,
            "longer than an IPv6",
        ),
        (rule_with("limits = [{ rate = \"0/10s\" }]"), 3, "zero"),
        (
            rule_with("limits = [{ rate = \"ten/10s\" }]"),
            3,
            "whole number",
        ),
        (
            rule_with("limits = [{ rate = \"1/s\" }]\naction = \"explode\""),
            4,
            "unknown variant `explode`",
        ),
        (rule_with("limits = []"), 3, "has no limits"),
        ("[sketch]\nmemory = \"lots\"\n".into(), 2, "not a size"),
        (
            rule_with("limits = [{ rate = \"1/s\" }]\nreply = \"no\""),
            4,
            "only used with action = \"reply\"",
        ),
        (
            rule_with("limits = [{ rate = \"1/s\" }]\naction = \"delay\"\ndelay = \"0s\""),
            5,
            "a delay must be longer than zero",
        ),
    ];
    for (text, line, needle) in cases {
        let (got_line, message) = only_error(&text);
        assert_eq!(got_line, line, "{text:?}: {message}");
        assert!(
            message.contains(needle),
            "{text:?}: {message:?} lacks {needle:?}"
        );
    }
}

#[test]
fn periods_get_the_memory_named_and_the_rest_is_split() {
    let text = "[sketch]\nmemory = \"64MiB\"\nperiods = { \"1s\" = \"8MiB\" }\n\n[[rule]]\nname = \"burst\"\nlimits = [{ rate = \"20/1s\" }, { rate = \"600/60s\" }]\npenalty = \"5m\"\n";
    let config = Config::parse(text).expect("valid");
    assert_eq!(config.periods, [(Duration::from_secs(1), 8 << 20)]);
    let policy = tollgate_filter::Policy::compile(config, None).expect("fits");
    let now = tollgate_sketch::Tick::ZERO;
    let stats = policy
        .sketch_stats(now)
        .into_iter()
        .chain(policy.penalty_stats(now));
    let sizes: Vec<usize> = stats.map(|s| s.memory_bytes).collect();
    // 8 MiB for 1 s; 56 MiB split evenly between the sketch of 60 s and the two of the 5 min
    // penalty (each within its budget).
    assert!(sizes[0] <= 8 << 20 && sizes[0] > 7 << 20, "{sizes:?}");
    let third = (56 << 20) / 3;
    assert!(
        sizes[1..]
            .iter()
            .all(|&s| s <= third && s > third - (1 << 20)),
        "{sizes:?}"
    );
    for (bad, needle) in [
        (
            "{ \"2s\" = \"1MiB\" }",
            "no limit or penalty has the period `2s`",
        ),
        ("{ \"1s\" = \"100MiB\" }", "more than the memory"),
        (
            "{ \"1s\" = \"1MiB\", \"1000ms\" = \"1MiB\" }",
            "already given",
        ),
        ("{ \"1s\" = 5 }", "needs a size"),
    ] {
        let text = text.replace("{ \"1s\" = \"8MiB\" }", bad);
        let (line, message) = only_error(&text);
        assert_eq!(line, 3, "{message}");
        assert!(message.contains(needle), "{message}");
    }
}

#[test]
fn duplicate_rule_names_point_at_both() {
    let text = "[[rule]]\nname = \"a\"\nlimits = [{ rate = \"1/s\" }]\n\n[[rule]]\nname = \"a\"\nlimits = [{ rate = \"2/s\" }]\n";
    let (line, message) = only_error(text);
    assert_eq!(line, 6);
    assert!(
        message.contains("duplicate rule name `a` (first used on line 2)"),
        "{message}"
    );
}

#[test]
fn all_errors_are_reported_at_once_and_nothing_is_kept() {
    let text = "[lists]\nallow = [\"bad\"]\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"0/s\" }, { rate = \"5/0s\" }]\n";
    let errors = Config::parse(text).expect_err("bad").0;
    let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
    assert_eq!(lines, [2, 5, 5]);
    let printed = tollgate_filter::ConfigErrors(errors).to_string();
    assert!(
        printed.starts_with("line 2, column 10: `bad` is not a network"),
        "{printed}"
    );
}

#[test]
fn toml_syntax_errors_are_located() {
    let (line, message) = only_error("[sketch]\nmemory = \"64MiB\n");
    assert_eq!(line, 2, "{message}");
}

/// Issue 9, item 3: a limit the 24-bit counters cannot reach is refused, with its place, its
/// value and the largest allowed.
#[test]
fn limits_the_counters_cannot_reach_are_refused() {
    let text =
        "[[rule]]\nname = \"r\"\nweight = \"bytes\"\nlimits = [{ rate = \"100000000/1s\" }]\n";
    let error = &Config::parse(text).expect_err("unreachable").0[0];
    assert_eq!((error.line, error.column), (4, 20), "{error}");
    assert!(error.message.contains("`100000000/1s`"), "{error}");
    assert!(error.message.contains("16777214"), "{error}");
    assert_eq!(tollgate_filter::MAX_LIMIT, 16_777_214);
    // The largest reachable limit is accepted, one more is not.
    let at =
        |count: u64| format!("[[rule]]\nname = \"r\"\nlimits = [{{ rate = \"{count}/1s\" }}]\n");
    assert!(Config::parse(&at(16_777_214)).is_ok());
    assert!(Config::parse(&at(16_777_215)).is_err());
}

/// Issue 9, item 4: memory too small for the sketches is refused at its line, with its value.
#[test]
fn memory_too_small_for_the_sketches_is_located() {
    let rule = "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"10/1s\" }]\npenalty = \"1m\"\n";
    for memory in ["0MiB", "1KiB"] {
        let text = format!("[sketch]\nmemory = \"{memory}\"\n{rule}");
        let errors = Config::parse(&text).expect_err("too small").0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!((errors[0].line, errors[0].column), (2, 10), "{errors:?}");
        assert!(
            errors[0].message.contains(&format!("\"{memory}\"")),
            "{errors:?}"
        );
    }
    // A named period too small for its sketch is refused at its own entry.
    let text = format!(
        "[sketch]\nmemory = \"1MiB\"\n[sketch.periods]\n\"1s\" = \"64KiB\"\n\"1m\" = \"100\"\n{rule}"
    );
    let errors = Config::parse(&text).expect_err("too small").0;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].line, 5, "{errors:?}");
    assert!(errors[0].message.contains("`1m` = \"100\""), "{errors:?}");
}

/// Errors in `[sketch] periods` point at their own entries, not at the table.
#[test]
fn period_errors_point_at_their_entries() {
    let text = "[sketch]\nmemory = \"1MiB\"\n[sketch.periods]\n\"1s\" = \"64KiB\"\n\"2s\" = \"64KiB\"\n\"1m\" = 5\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"10/1s\" }, { rate = \"10/1m\" }]\n";
    let errors = Config::parse(text).expect_err("bad").0;
    let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
    assert_eq!(lines, [5, 6], "{errors:?}");
}
