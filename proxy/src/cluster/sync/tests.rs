//! The sync task's tests: rounds against a scripted Redis (`cluster::fake_redis`), the
//! link's back-off and failures, the lists and the clock.

use std::net::Ipv4Addr;

use tollgate_filter::{Event, Filter, ListEntry, Remote, Source, Transport};
use tollgate_sketch::{Clock, MonotonicClock, Tick};

use super::link::{Failure, penalties_in_force};
use super::round::Own;
use super::*;
use crate::cluster::ClusterMetrics;
use crate::cluster::lists::{Change, State};
use crate::cluster::redis::{LinkError, Refusal, key_name};
use crate::cluster::view::Rest;
use crate::config::ProxyConfig;
use crate::test_log::{Capture, lines_with};

#[test]
fn a_new_suspect_pushes_each_windows_part_in_its_window() {
    let config = ProxyConfig::parse(
        r#"
        [sketch]
        memory = "4MiB"
        [cluster]
        redis = ["127.0.0.1:1"]
        node = "a"
        name = "t"
        threshold = 0.25
        [[rule]]
        name = "r"
        limits = [{ rate = "100/10s" }]
        "#,
    )
    .expect("valid");
    let cluster = Arc::new(Cluster::new(
        config.cluster.clone().expect("a [cluster]"),
        MonotonicClock::new(),
        ClusterMetrics::new(),
    ));
    let remote = Arc::clone(&cluster) as Arc<dyn Remote>;
    let filter = Filter::with_remote(config.policy.clone(), remote).expect("fits");
    let event = Event {
        source: Source::from(Ipv4Addr::new(192, 0, 2, 1)),
        transport: Transport::Tcp,
        bytes: 1,
    };
    // 20 events in the sketch's first window: under the threshold of 25.
    for _ in 0..20 {
        let _ = filter.decide(&event, Tick::from_nanos(1_000_000_000));
    }
    // Halfway through the next window 10 of them still count: with 16 more events here
    // the key becomes a suspect on the way.
    let now = Tick::from_nanos(15_000_000_000);
    for _ in 0..16 {
        let _ = filter.decide(&event, now);
    }
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    syncer.collect(cluster.cluster_ms(now));
    let owns: Vec<Own> = syncer.own.values().copied().collect();
    let [own] = owns[..] else {
        panic!("one suspect, got {owns:?}");
    };
    // Never more in the current window than the 16 events counted in it; the previous
    // window's share (10) in the previous window.
    assert!(own.counted[0] <= 16, "current {:?}", own.counted);
    assert!(
        (1..=10).contains(&own.counted[1]),
        "previous {:?}",
        own.counted
    );
}

#[test]
fn a_refusal_is_logged_as_what_it_is_not_as_unreachable() {
    let not_master = LinkError::from(Refusal::NotMaster("slave".to_owned()));
    let lost = LinkError::from(Refusal::DatasetChanged {
        read: "a".to_owned(),
        held: Some("b".to_owned()),
    });
    let cut = LinkError::from("timed out");
    assert_eq!(Failure::of(&not_master), Failure::NotMaster);
    assert_eq!(Failure::of(&lost), Failure::DataLost);
    assert_eq!(Failure::of(&cut), Failure::Unreachable);
    assert!(Failure::NotMaster.message().contains("not a master"));
    assert!(Failure::DataLost.message().contains("lost its data"));
    for refusal in [Failure::NotMaster, Failure::DataLost] {
        assert!(!refusal.message().contains("unreachable"), "{refusal:?}");
    }
    assert!(lost.to_string().contains("\"b\" where \"a\""), "{lost}");
}

#[test]
fn own_counts_roll_with_the_windows() {
    let mut own = Own {
        key: [0; tollgate_filter::LimitKey::LEN],
        period_ms: 1000,
        shape: 0,
        window: 7,
        counted: [5, 3],
        pushed: [4, 3],
        touched: true,
    };
    own.roll(7);
    assert_eq!((own.counted, own.pushed), ([5, 3], [4, 3]));
    // One window on: what was current is previous, and its unpushed 1 is still owed.
    own.roll(8);
    assert_eq!((own.window, own.counted, own.pushed), (8, [0, 5], [0, 4]));
    own.roll(10);
    assert_eq!((own.counted, own.pushed), ([0, 0], [0, 0]));
}

/// A node of cluster `t` whose first `redis` address is `redis`, with `extra` settings in
/// its `[cluster]` section (a limit of 100 per 10 s).
/// A filter of one rule (100 per 10 s) whose suspects go to `cluster`.
fn counting_to(cluster: &Arc<Cluster>) -> Filter {
    let config = ProxyConfig::parse(
        r#"
        [[rule]]
        name = "r"
        limits = [{ rate = "100/10s" }]
        "#,
    )
    .expect("valid");
    let remote = Arc::clone(cluster) as Arc<dyn Remote>;
    Filter::with_remote(config.policy.clone(), remote).expect("fits")
}

fn cluster_at(redis: &str, extra: &str) -> Arc<Cluster> {
    let config = ProxyConfig::parse(&format!(
        r#"
        [sketch]
        memory = "4MiB"
        [cluster]
        redis = ["{redis}"]
        node = "a"
        name = "t"
        threshold = 0.25
        {extra}
        [[rule]]
        name = "r"
        limits = [{{ rate = "100/10s" }}]
        "#
    ))
    .expect("valid");
    Arc::new(Cluster::new(
        config.cluster.clone().expect("a [cluster]"),
        MonotonicClock::new(),
        ClusterMetrics::new(),
    ))
}

#[test]
fn redis_away_backs_off_doubling_to_its_cap_and_tries_the_next_server() {
    let cluster = cluster_at("127.0.0.1:1", r#"sync = "100ms""#);
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    syncer.view.insert(7, Rest::default());
    cluster.view.store(Arc::new(syncer.view.clone()));
    let cut = LinkError::from("connection refused");
    let mut waits = Vec::new();
    for _ in 0..5 {
        // `failed` reads the clock between these two: the wait it added lies between
        // `retry_at - after` and `retry_at - before`, however slow the machine.
        let before = Instant::now();
        syncer.failed(&cut);
        let after = Instant::now();
        waits.push((
            syncer.retry_at.saturating_duration_since(after),
            syncer.retry_at.saturating_duration_since(before),
        ));
    }
    // Each wait is the one before doubled, up to RETRY_MAX: not a retry storm against a
    // Redis that is down, and not a wait that grows past how soon a failover is followed.
    for ((least, most), ms) in waits.iter().zip([100, 200, 400, 500, 500]) {
        let expected = Duration::from_millis(ms);
        assert!((*least..=*most).contains(&expected), "{waits:?}");
    }
    assert_eq!(syncer.server, 5, "each failure tries the next server");
    assert!(syncer.view.is_empty() && cluster.view.load().is_empty());
    assert_eq!(cluster.metrics.redis_errors.get(), 5);
    assert_eq!(cluster.metrics.alone.get(), 1);
    // A Redis that only lost its data answers: it is the one reconnected to.
    syncer.failed(&LinkError::from(Refusal::DatasetChanged {
        read: "a".to_owned(),
        held: None,
    }));
    assert_eq!(syncer.server, 5);
}

#[test]
fn only_penalties_that_have_not_ended_are_added_back() {
    const LEN: usize = tollgate_filter::LimitKey::LEN;
    // Ended before now, ending now (`penalised` no longer refuses it), ending after.
    let held = HashMap::from([([1; LEN], 99), ([2; LEN], 100), ([3; LEN], 101)]);
    assert_eq!(penalties_in_force(&held, 100), [([3; LEN], 101)]);
}

#[test]
fn a_clock_reading_beyond_max_clock_error_stops_sharing_until_one_agrees() {
    let cluster = cluster_at("127.0.0.1:1", r#"max_clock_error = "250ms""#);
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    syncer.view.insert(7, Rest::default());
    cluster.view.store(Arc::new(syncer.view.clone()));
    let metrics = &cluster.metrics;
    let wall_ns = crate::unix_time::unix_ns();
    // Redis 5 s ahead of this node's wall clock; edges off by exactly the budget: shared.
    syncer.clock_read(wall_ns + 5_000_000_000, Duration::from_millis(250));
    assert!(!syncer.clock_refused);
    assert!(
        (metrics.clock_offset.get() - 5.0).abs() < 1.0,
        "{}",
        metrics.clock_offset.get()
    );
    assert!((metrics.clock_error.get() - 0.25).abs() < 1e-9);
    assert_eq!(syncer.view.len(), 1, "the view is kept");
    // A millisecond beyond: nothing shared, the others' counts out of the decisions.
    syncer.clock_read(wall_ns, Duration::from_millis(251));
    assert!(syncer.clock_refused);
    assert_eq!(metrics.clock_refused.get(), 1);
    assert_eq!(metrics.clock_refusals.get(), 1);
    assert!(syncer.view.is_empty() && cluster.view.load().is_empty());
    syncer.clock_read(wall_ns, Duration::ZERO);
    assert!(!syncer.clock_refused);
    assert_eq!(metrics.clock_refused.get(), 0);
}

#[test]
fn own_counts_stop_growing_at_their_cap_and_count_the_overflow() {
    let cluster = cluster_at("127.0.0.1:1", "suspects = 64");
    let filter = counting_to(&cluster);
    let now = Tick::from_nanos(1_000_000_000);
    // Two sources over the threshold: two new suspects.
    for last in [1, 2] {
        let event = Event {
            source: Source::from(Ipv4Addr::new(192, 0, 2, last)),
            transport: Transport::Tcp,
            bytes: 1,
        };
        for _ in 0..30 {
            let _ = filter.decide(&event, now);
        }
    }
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    let now_ms = cluster.cluster_ms(now);
    let cap = syncer.own_cap();
    assert_eq!(cap, 8 * 64);
    // Room for one more.
    for hash in 0..cap as u64 - 1 {
        syncer.own.insert(
            hash << 1,
            Own {
                key: [0; tollgate_filter::LimitKey::LEN],
                period_ms: 10_000,
                shape: 0,
                window: now_ms / 10_000,
                counted: [1, 0],
                pushed: [0, 0],
                touched: true,
            },
        );
    }
    syncer.collect(now_ms);
    assert_eq!(syncer.own.len(), cap);
    assert_eq!(cluster.metrics.suspects_overflow.get(), 1);
}

#[test]
fn a_read_lays_over_what_changed_and_not_what_ended_or_is_changing_here() {
    use tollgate_filter::{Cidr, ListKind, RuntimeLists};
    let cluster = cluster_at("127.0.0.1:1", "");
    let lists = Arc::new(RuntimeLists::new(100, Duration::from_secs(3600)));
    cluster.attach_lists(Arc::clone(&lists));
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    let deny = |cidr: &str| (ListKind::Deny, Cidr::parse(cidr).unwrap());
    let now = cluster.clock.now();
    let now_ms = cluster.cluster_ms(now);
    let travelled = |in_ms: u64, node: &str, reason: &str| Travelled {
        until_ms: now_ms + in_ms,
        node: node.to_owned(),
        reason: reason.to_owned(),
    };
    // Held here from the last read, or (the last) added here and not written yet.
    let [same, reason, longer, gone, changing] = [
        "192.0.2.0/24",
        "192.0.2.1/32",
        "192.0.2.2/32",
        "198.51.100.0/24",
        "203.0.113.0/24",
    ]
    .map(deny);
    for key in [same, reason, longer, gone, changing] {
        let ttl = Duration::from_secs(60);
        let added = lists.add(key.1, key.0, ttl, "x".to_owned(), now);
        added.expect("room");
        syncer.lists_known.insert(key, travelled(60_000, "b", "x"));
    }
    syncer.lists_known.remove(&changing);
    cluster
        .lists_out
        .lock()
        .unwrap()
        .push(Change::Put(changing, travelled(60_000, "a", "x")));
    let (new, ended) = (deny("10.1.0.0/16"), deny("10.2.0.0/16"));
    let state = State {
        version: Some("v2".to_owned()),
        entries: HashMap::from([
            (same, travelled(60_000, "b", "x")),
            (reason, travelled(60_000, "b", "y")),
            (longer, travelled(120_000, "b", "x")),
            (new, travelled(30_000, "c", "z")),
            // A replayed or stale entry that has ended by Redis's clock.
            (ended, travelled(0, "c", "z")),
        ]),
    };
    syncer.apply_lists(state);
    let held: HashMap<ListKey, ListEntry> = lists
        .entries(cluster.clock.now())
        .into_iter()
        .map(|entry| ((entry.kind, entry.cidr), entry))
        .collect();
    let keys: std::collections::HashSet<_> = held.keys().copied().collect();
    let expected = [same, reason, longer, changing, new].into_iter().collect();
    assert_eq!(keys, expected, "`gone` removed, `ended` left out");
    let left = |key| held[&key].expires.saturating_since(now).as_millis();
    assert_eq!(held[&reason].reason, "y");
    assert!(
        (119_000..=120_000).contains(&left(longer)),
        "{}",
        left(longer)
    );
    assert!((29_000..=30_000).contains(&left(new)), "{}", left(new));
    assert_eq!(held[&new].reason, "z");
    // Put: `reason`, `longer`, `new`; taken out: `gone`. `same` is not put again.
    assert_eq!(cluster.metrics.list_entries_received.get(), 4);
    assert_eq!(cluster.list_origin(new.0, new.1).as_deref(), Some("c"));
    assert_eq!(
        cluster.list_origin(changing.0, changing.1).as_deref(),
        Some("a")
    );
    assert_eq!(syncer.lists_version.as_deref(), Some("v2"));
}

/// The window (of 10 s) the scripted Redis's `TIME`, 1,700,000,000.012345 s, falls in.
const SCRIPTED_WINDOW: u64 = 170_000_000;

/// The key of the suspect the push tests use, in `window`.
fn pushed_key(window: u64) -> Vec<u8> {
    key_name("t", 1, &[3; tollgate_filter::LimitKey::LEN], 10_000, window)
}

/// A node connected to a scripted Redis where the others have counted `others` of the
/// push tests' suspect (current window, previous window), with that suspect counted
/// `own` here (nothing pushed yet).
async fn connected(
    others: [i64; 2],
    own: [u64; 2],
) -> (
    Arc<Cluster>,
    Syncer,
    tokio::task::JoinHandle<Vec<crate::cluster::fake_redis::Exchange>>,
) {
    use crate::cluster::fake_redis::{Answers, scripted};
    let answers = Answers {
        counters: vec![
            (pushed_key(SCRIPTED_WINDOW), others[0]),
            (pushed_key(SCRIPTED_WINDOW - 1), others[1]),
        ],
        ..Answers::default()
    };
    let (address, serve) = scripted(answers).await;
    // Its `TIME` stands still: a wide budget for the rounds' readings.
    let cluster = cluster_at(&address.to_string(), r#"max_clock_error = "1h""#);
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    syncer.connect().await;
    assert!(syncer.link.is_some(), "connected");
    assert_eq!(cluster.cluster_ms_now() / 10_000, SCRIPTED_WINDOW);
    // The lists' version every round finds (the scripted Redis cannot answer their read).
    syncer.lists_version = Some("v7".to_owned());
    syncer.own.insert(
        1,
        Own {
            key: [3; tollgate_filter::LimitKey::LEN],
            period_ms: 10_000,
            shape: 1,
            window: SCRIPTED_WINDOW,
            counted: own,
            pushed: [0, 0],
            touched: true,
        },
    );
    (cluster, syncer, serve)
}

#[tokio::test]
async fn the_view_holds_the_rest_of_the_cluster_and_each_count_is_pushed_once() {
    let (cluster, mut syncer, serve) = connected([40, 100], [10, 4]).await;
    let now_ms = cluster.cluster_ms_now();
    syncer.push(now_ms, false).await;
    let rest = syncer.view[&1];
    // Redis holds 50 and 104 now; the rest of the cluster is what this node did not count.
    assert_eq!(
        (rest.window, rest.current, rest.previous),
        (SCRIPTED_WINDOW, 40, 100)
    );
    assert_eq!(cluster.view.load().get(&1).copied(), Some(rest));
    assert_eq!(syncer.own[&1].pushed, [10, 4]);
    assert_eq!(cluster.metrics.alone.get(), 0, "joined");
    // Nothing new here, and the view holds it: not pushed nor read again (no script sent:
    // see the count of scripts below).
    syncer.push(now_ms, false).await;
    // 5 more here. An early round leaves out a suspect the others have counted (it is
    // settled): it waits for the next regular round.
    syncer.own.get_mut(&1).unwrap().counted[0] += 5;
    syncer.own.get_mut(&1).unwrap().touched = true;
    syncer.push(now_ms + 1, true).await;
    assert_eq!(syncer.own[&1].pushed, [10, 4]);
    // The regular round pushes only the 5, and the rest stays 40 and 100 (pushing 15
    // again would make it 50, an overcount that throttles the source early everywhere).
    syncer.push(now_ms + 100, false).await;
    let rest = syncer.view[&1];
    assert_eq!((rest.current, rest.previous), (40, 100));
    assert_eq!((rest.growth, rest.growth_ms), (0, 100));
    assert_eq!(syncer.own[&1].pushed, [15, 4]);
    // The next window: what was current is previous, and the rest of it is still 40
    // (the 15 of this node taken out, not 0 nor 55); no growth across the edge.
    let next_ms = now_ms + 10_000;
    let own = syncer.own.get_mut(&1).unwrap();
    own.roll(next_ms / 10_000);
    own.counted[0] += 1;
    own.touched = true;
    syncer.push(next_ms, false).await;
    let rest = syncer.view[&1];
    assert_eq!(
        (rest.window, rest.current, rest.previous),
        (SCRIPTED_WINDOW + 1, 0, 40)
    );
    assert_eq!((rest.growth, rest.growth_ms), (0, 0));
    // Every round wrote its lists' part with a token of its own.
    assert_eq!(syncer.lists_writes, 5);
    // Each counter lives two periods: the previous window's count is there to be read
    // until that window has passed out of every estimate.
    drop(syncer);
    let exchanges = serve.await.unwrap();
    let scripts: Vec<_> = exchanges
        .iter()
        .filter(|e| e.args[0] == b"EVALSHA")
        .collect();
    // The first round, the regular one with 5 more, the next window's: not the one with
    // nothing new, nor the early one.
    assert_eq!(scripts.len(), 3);
    for script in scripts {
        // EVALSHA sha 3 dataset-key current previous dataset ttl add-current add-previous
        assert_eq!(script.args[7], b"20000");
    }
}

/// A round whose script went through but whose lists' read after it failed: the link is
/// dropped and the node is alone (limits count this node only) until a round on a new
/// link, so it must not say it joined; the round's counts went to Redis and are not
/// pushed again.
#[tokio::test]
async fn a_lists_read_that_fails_after_the_round_leaves_the_node_alone() {
    let (cluster, mut syncer, _serve) = connected([40, 100], [10, 4]).await;
    // A version other than the one the round finds: the lists are read after it, and the
    // scripted Redis cannot answer that read.
    syncer.lists_version = Some("v6".to_owned());
    syncer.push(cluster.cluster_ms_now(), false).await;
    assert!(
        syncer.link.is_none(),
        "the read failed: the link is dropped"
    );
    assert_eq!(syncer.own[&1].pushed, [10, 4], "pushed once");
    assert_eq!(cluster.metrics.alone.get(), 1, "alone, not joined");
    assert!(syncer.view.is_empty() && cluster.view.load().is_empty());
}

#[tokio::test]
async fn a_round_while_the_clock_is_refused_shares_nothing_and_pushes_nothing() {
    let (cluster, mut syncer, _serve) = connected([40, 0], [10, 0]).await;
    syncer.clock_refused = true;
    let now_ms = cluster.cluster_ms_now();
    syncer.push(now_ms, false).await;
    assert!(syncer.view.is_empty());
    assert_eq!(syncer.own[&1].pushed, [0, 0]);
    // The next round agrees again: the 10 counted here reach Redis once, not twice.
    syncer.push(now_ms + 1, false).await;
    assert_eq!(syncer.view[&1].current, 40);
}

#[tokio::test]
async fn a_round_reconnects_only_once_its_wait_is_over_and_to_the_next_server() {
    // Nothing listens on either: each attempt is refused at once.
    let cluster = cluster_at("127.0.0.1:1\", \"127.0.0.1:2", r#"sync = "100ms""#);
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    let first: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
    let second: std::net::SocketAddr = "127.0.0.1:2".parse().unwrap();
    syncer.round(false).await;
    assert_eq!(cluster.metrics.redis_errors.get(), 1);
    assert_eq!(syncer.current, Some(first));
    // Within the backoff: no attempt. (Its end set an hour away: a machine stalled past
    // the real 100 ms must not make this round due.)
    syncer.retry_at = Instant::now() + Duration::from_secs(3600);
    syncer.round(false).await;
    assert_eq!(cluster.metrics.redis_errors.get(), 1);
    for expected in [second, first] {
        syncer.retry_at = Instant::now();
        syncer.round(false).await;
        assert_eq!(syncer.current, Some(expected));
    }
    assert_eq!(cluster.metrics.redis_errors.get(), 3);
}

#[test]
fn a_suspect_with_nothing_in_either_window_is_forgotten_and_leaves_the_view() {
    let cluster = cluster_at("127.0.0.1:1", "");
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    let now_ms = 1_700_000_000_000;
    for (hash, window) in [(2, now_ms / 10_000 - 2), (4, now_ms / 10_000 - 1)] {
        syncer.own.insert(
            hash,
            Own {
                key: [0; tollgate_filter::LimitKey::LEN],
                period_ms: 10_000,
                shape: 0,
                window,
                counted: [1, 0],
                pushed: [1, 0],
                touched: false,
            },
        );
        syncer.view.insert(hash, Rest::default());
    }
    syncer.collect(now_ms);
    // Two windows on, nothing left; one window on, its count is the previous window's.
    assert!(!syncer.own.contains_key(&2) && !syncer.view.contains_key(&2));
    let kept = syncer.own[&4];
    assert_eq!((kept.window, kept.counted), (now_ms / 10_000, [0, 1]));
    assert!(syncer.view.contains_key(&4));
}

#[tokio::test]
async fn a_redis_that_lost_the_counts_gets_them_again_and_one_that_kept_them_does_not() {
    use crate::cluster::fake_redis::{Answers, ID, scripted};
    const LEN: usize = tollgate_filter::LimitKey::LEN;
    for (before, lost) in [(ID, false), ("an id of another dataset", true)] {
        let (address, _serve) = scripted(Answers::default()).await;
        let cluster = cluster_at(&address.to_string(), r#"max_clock_error = "1h""#);
        let far = cluster.cluster_ms_now() + 3_600_000;
        cluster
            .penalties_in
            .store(Arc::new(HashMap::from([([1; LEN], far), ([2; LEN], 1)])));
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        syncer.dataset = Some(before.to_owned());
        syncer.own.insert(
            1,
            Own {
                key: [3; LEN],
                period_ms: 10_000,
                shape: 1,
                window: SCRIPTED_WINDOW,
                counted: [10, 4],
                pushed: [10, 4],
                touched: false,
            },
        );
        syncer.connect().await;
        assert_eq!(syncer.dataset.as_deref(), Some(ID));
        let (pushed, again) = if lost {
            ([0, 0], vec![([1; LEN], far)])
        } else {
            // Pushing them again would count them twice after every failover.
            ([10, 4], Vec::new())
        };
        assert_eq!(syncer.own[&1].pushed, pushed, "lost: {lost}");
        assert_eq!(syncer.penalties_again, again, "lost: {lost}");
    }
}

#[test]
fn a_known_suspects_new_weight_is_added_to_its_count() {
    // A count that shrinks or grows wrong here reaches the others: too little lets a
    // source spread over the nodes through each one's limit, too much throttles it early.
    let cluster = cluster_at("127.0.0.1:1", "");
    let filter = counting_to(&cluster);
    let event = Event {
        source: Source::from(Ipv4Addr::new(192, 0, 2, 1)),
        transport: Transport::Tcp,
        bytes: 1,
    };
    let now = Tick::from_nanos(1_000_000_000);
    let now_ms = cluster.cluster_ms(now);
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    let mut counted = Vec::new();
    // 30 events make it a suspect (threshold 25); 7 more come after the first collect.
    for events in [30, 7] {
        for _ in 0..events {
            let _ = filter.decide(&event, now);
        }
        syncer.collect(now_ms);
        let owns: Vec<Own> = syncer.own.values().copied().collect();
        let [own] = owns[..] else {
            panic!("one suspect, got {owns:?}");
        };
        // In the window Redis keys it by: one off, it would never roll nor be forgotten.
        assert_eq!(own.window, now_ms / 10_000);
        counted.push(own.counted[0]);
    }
    assert_eq!(counted[1].checked_sub(counted[0]), Some(7), "{counted:?}");
}

#[tokio::test]
async fn a_new_redis_process_is_logged_once_as_a_failover_or_a_lost_dataset() {
    use crate::cluster::fake_redis::{Answers, ID, scripted};
    const FAILOVER: &str = "another Redis process with the same dataset";
    const LOST: &str = "Redis holds another dataset";
    // The scripted Redis's process is `r1`, its dataset `ID`.
    let capture = Capture::start();
    let mut seen = 0;
    for (run_id, dataset, failover, lost) in [
        ("r1", ID, 0, 0),
        ("r0", ID, 1, 0),
        ("r0", "an id of another dataset", 0, 1),
    ] {
        let (address, _serve) = scripted(Answers::default()).await;
        let cluster = cluster_at(&address.to_string(), r#"max_clock_error = "1h""#);
        let mut syncer = Syncer::new(Arc::clone(&cluster));
        syncer.run_id = Some(run_id.to_owned());
        syncer.dataset = Some(dataset.to_owned());
        syncer.connect().await;
        assert!(syncer.link.is_some(), "connected");
        let log = capture.since(&mut seen);
        assert_eq!(lines_with(&log, FAILOVER), failover, "{run_id}: {log}");
        assert_eq!(lines_with(&log, LOST), lost, "{run_id} {dataset}: {log}");
        let said = log
            .lines()
            .find(|l| l.contains(FAILOVER) || l.contains(LOST));
        if let Some(line) = said {
            assert!(line.contains(&format!("redis={address}")), "{line}");
        }
    }
}

#[test]
fn going_alone_is_logged_at_once_then_at_most_every_thirty_seconds() {
    let cluster = cluster_at("127.0.0.1:1", "");
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    syncer.current = Some("127.0.0.1:1".parse().unwrap());
    let cut = LinkError::from("connection refused");
    let capture = Capture::start();
    let mut seen = 0;
    let mut fail = |syncer: &mut Syncer| {
        syncer.failed(&cut);
        capture
            .since(&mut seen)
            .lines()
            .filter(|l| l.contains("cluster: Redis unreachable"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // The node starts alone: its first failure says so, with the server and the error.
    let lines = fail(&mut syncer);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("redis=127.0.0.1:1") && lines[0].contains("error=connection refused"),
        "{lines:?}"
    );
    // Still alone, within 30 s of the last line (set in the future: however slow the
    // machine): nothing, not a line per retry while Redis is down.
    let later = Instant::now() + Duration::from_secs(3600);
    syncer.alone_logged = Some(later);
    assert_eq!(fail(&mut syncer), Vec::<String>::new());
    // 30 s after the last line: said again.
    syncer.alone_logged = Instant::now().checked_sub(ALONE_LOG_EVERY);
    assert_eq!(fail(&mut syncer).len(), 1);
    // Joined, then lost within 30 s of the last line: said at once (limits count this
    // node only from now on).
    syncer.alone_logged = Some(later);
    cluster.metrics.alone.set(0);
    assert_eq!(fail(&mut syncer).len(), 1);
    assert_eq!(cluster.metrics.alone.get(), 1);
}

#[test]
fn a_clock_refusal_is_logged_as_it_starts_and_ends_and_every_thirty_seconds_between() {
    const REFUSED: &str = "not sharing counts until a reading agrees";
    const AGREES: &str = "within max_clock_error again";
    let cluster = cluster_at("127.0.0.1:1", r#"max_clock_error = "250ms""#);
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    let capture = Capture::start();
    let mut seen = 0;
    let mut read = |syncer: &mut Syncer, error_ms: u64| {
        syncer.clock_read(0, Duration::from_millis(error_ms));
        let log = capture.since(&mut seen);
        (lines_with(&log, REFUSED), lines_with(&log, AGREES), log)
    };
    // Within the budget, as before: nothing to say.
    let (refused, agrees, log) = read(&mut syncer, 250);
    assert_eq!((refused, agrees), (0, 0), "{log}");
    // Beyond it: said once, with the figures.
    let (refused, agrees, log) = read(&mut syncer, 251);
    assert_eq!((refused, agrees), (1, 0), "{log}");
    assert!(
        log.contains("error_ms=251") && log.contains("max_clock_error_ms=250"),
        "{log}"
    );
    // Still beyond, within 30 s of the line (set in the future: however slow the machine).
    syncer.clock_logged = Some(Instant::now() + Duration::from_secs(3600));
    let (refused, agrees, log) = read(&mut syncer, 400);
    assert_eq!((refused, agrees), (0, 0), "{log}");
    // 30 s after it: said again.
    syncer.clock_logged = Instant::now().checked_sub(ALONE_LOG_EVERY);
    let (refused, agrees, log) = read(&mut syncer, 400);
    assert_eq!((refused, agrees), (1, 0), "{log}");
    // Within the budget again: said once.
    let (refused, agrees, log) = read(&mut syncer, 10);
    assert_eq!((refused, agrees), (0, 1), "{log}");
    let (refused, agrees, log) = read(&mut syncer, 10);
    assert_eq!((refused, agrees), (0, 0), "{log}");
}

#[test]
fn list_changes_from_others_are_logged_when_some_are_applied_or_dropped_and_only_then() {
    use tollgate_filter::{Cidr, ListKind, RuntimeLists};
    const APPLIED: &str = "run-time list changes from other nodes applied";
    let cluster = cluster_at("127.0.0.1:1", "");
    // Entries live at most an hour here.
    let lists = Arc::new(RuntimeLists::new(100, Duration::from_secs(3600)));
    cluster.attach_lists(Arc::clone(&lists));
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    let now_ms = cluster.cluster_ms(cluster.clock.now());
    let entry = |cidr: &str, in_ms: u64| {
        (
            (ListKind::Deny, Cidr::parse(cidr).unwrap()),
            Travelled {
                until_ms: now_ms + in_ms,
                node: "b".to_owned(),
                reason: "a flood".to_owned(),
            },
        )
    };
    let new = entry("10.1.0.0/16", 60_000);
    // A peer's entry that would outlive this node's longest time to live (forged, or from a
    // node configured otherwise): dropped, counted and said.
    let long = entry("10.2.0.0/16", 2 * 3_600_000);
    let capture = Capture::start();
    let mut seen = 0;
    let mut apply = |version: &str, entries: Vec<(ListKey, Travelled)>| {
        syncer.apply_lists(State {
            version: Some(version.to_owned()),
            entries: entries.into_iter().collect(),
        });
        capture
            .since(&mut seen)
            .lines()
            .filter(|l| l.contains(APPLIED))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let lines = apply("v1", vec![new.clone()]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("applied=1 dropped=0"), "{lines:?}");
    // Nothing new: nothing said.
    assert_eq!(apply("v2", vec![new.clone()]), Vec::<String>::new());
    let lines = apply("v3", vec![new, long.clone()]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("applied=0 dropped=1"), "{lines:?}");
    let held = lists.entries(cluster.clock.now());
    assert!(held.iter().all(|e| e.cidr != long.0.1), "{held:?}");
}

#[test]
fn a_peers_entry_is_not_laid_over_a_change_made_here_nor_once_it_has_ended() {
    use tollgate_filter::{Cidr, ListKind, RuntimeLists};
    let cluster = cluster_at("127.0.0.1:1", "");
    let lists = Arc::new(RuntimeLists::new(100, Duration::from_secs(3600)));
    cluster.attach_lists(Arc::clone(&lists));
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    let deny = |cidr: &str| (ListKind::Deny, Cidr::parse(cidr).unwrap());
    let (removed, ended) = (deny("192.0.2.0/24"), deny("198.51.100.0/24"));
    // Removed here since the last round (not written yet): the peer's entry is the older.
    cluster
        .lists_out
        .lock()
        .unwrap()
        .push(Change::Remove(removed));
    let now_ms = cluster.cluster_ms(cluster.clock.now());
    let peer = |until_ms| Travelled {
        until_ms,
        node: "b".to_owned(),
        reason: "a flood".to_owned(),
    };
    // The other ended 5 s ago by Redis's clock (stale, or replayed).
    syncer.apply_lists(State {
        version: Some("v1".to_owned()),
        entries: HashMap::from([
            (removed, peer(now_ms + 60_000)),
            (ended, peer(now_ms - 5_000)),
        ]),
    });
    let held = lists.entries(cluster.clock.now());
    assert!(held.is_empty(), "{held:?}");
    assert_eq!(cluster.metrics.list_entries_received.get(), 0);
    assert_eq!(cluster.list_origin(removed.0, removed.1), None);
}

#[test]
fn after_redis_lost_the_lists_a_node_writes_again_only_what_it_added_itself() {
    use tollgate_filter::{Cidr, ListKind, RuntimeLists};
    let cluster = cluster_at("127.0.0.1:1", "");
    let lists = Arc::new(RuntimeLists::new(100, Duration::from_secs(3600)));
    cluster.attach_lists(Arc::clone(&lists));
    let deny = |cidr: &str| (ListKind::Deny, Cidr::parse(cidr).unwrap());
    // Added here (this node is `a`), and one another node added.
    let (own, others) = (deny("192.0.2.0/24"), deny("198.51.100.0/24"));
    let added = cluster.clock.now();
    let added_ms = cluster.cluster_ms(added);
    for key in [own, others] {
        let ttl = Duration::from_secs(60);
        let done = lists.add(key.1, key.0, ttl, "a flood".to_owned(), added);
        done.expect("room");
    }
    cluster.list_origins.store(Arc::new(HashMap::from([
        (own, "a".to_owned()),
        (others, "b".to_owned()),
    ])));
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    let travelled = Travelled {
        until_ms: added_ms + 60_000,
        node: "b".to_owned(),
        reason: "a flood".to_owned(),
    };
    syncer.lists_known.insert(others, travelled);
    syncer.lists_version = Some("v7".to_owned());
    syncer.rewrite_own_lists();
    // Only its own: writing the other's again would bring it back after its node removed
    // it. It ends when it ends here (ms rounding on either side).
    let out = cluster.lists_out.lock().unwrap().clone();
    let [Change::Put(key, travelled)] = &out[..] else {
        panic!("one put, got {out:?}");
    };
    assert_eq!(*key, own);
    assert_eq!(
        (&travelled.node[..], &travelled.reason[..]),
        ("a", "a flood")
    );
    let end = added_ms + 60_000;
    assert!(
        (end - 2..=end + 1).contains(&travelled.until_ms),
        "{travelled:?}"
    );
    // What it knew of the old Redis is forgotten: the first read of the new one removes
    // nothing.
    assert!(syncer.lists_known.is_empty() && syncer.lists_version.is_none());
    // With the changes' queue full, it stays local and is counted.
    cluster
        .lists_out
        .lock()
        .unwrap()
        .resize(super::super::LISTS_OUT, Change::Remove(others));
    syncer.rewrite_own_lists();
    assert_eq!(
        cluster.lists_out.lock().unwrap().len(),
        super::super::LISTS_OUT
    );
    assert_eq!(cluster.metrics.list_entries_dropped.get(), 1);
}

#[tokio::test]
async fn a_sentinel_that_does_not_answer_is_passed_over_for_the_next() {
    use crate::cluster::fake_redis::{Answers, scripted};
    // The first sentinel refuses at once; the second (scripted) names 127.0.0.1:6380.
    let (address, _serve) = scripted(Answers::default()).await;
    let sentinels = format!("sentinels = [\"127.0.0.1:1\", \"{address}\"]\nmaster = \"m\"");
    let cluster = cluster_at("127.0.0.1:2", &sentinels);
    let mut syncer = Syncer::new(Arc::clone(&cluster));
    let found = syncer.discover().await;
    let master: std::net::SocketAddr = "127.0.0.1:6380".parse().unwrap();
    assert_eq!(found, Ok((master, "127.0.0.1".to_owned())));
    // The one that answered is asked first next time.
    assert_eq!(syncer.sentinel % 2, 1);
}
