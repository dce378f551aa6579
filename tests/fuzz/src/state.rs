//! Warm-restart state files: [`decode`] on any bytes, as they are and sealed under a valid
//! header (so the fuzzer reaches the body's parser past the checksum), and what decodes put
//! back into a policy.

use std::net::Ipv4Addr;
use std::sync::OnceLock;

use tollgate::state::format::HEADER_LEN;
use tollgate::state::{decode, encode};
use tollgate_filter::{Config, Event, Policy, Source, Transport};

/// The policy every decoded state is restored into: a limit and a penalty of 10 s (the
/// periods the seeds use), small.
fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        Config::parse(
            "[sketch]\nmemory = \"256KiB\"\n[[rule]]\nname = \"r\"\n\
             limits = [{ rate = \"5/10s\" }]\npenalty = \"10s\"\n",
        )
        .expect("the harness's config parses")
    })
}

/// `body` under a header that gives its true length and checksum.
#[must_use]
pub fn sealed(body: &[u8]) -> Vec<u8> {
    let mut bytes = encode(&tollgate::state::State {
        saved_at_unix_ms: 0,
        tick: tollgate_sketch::Tick::ZERO,
        sketches: Vec::new(),
        lists: Vec::new(),
        descriptors: None,
    });
    bytes.truncate(HEADER_LEN);
    bytes[16..24].copy_from_slice(&(body.len() as u64).to_le_bytes());
    bytes[24..32].copy_from_slice(&xxhash_rust::xxh3::xxh3_64(body).to_le_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// Decodes `data`, and `data` sealed as a body.
///
/// # Panics
/// When an invariant breaks: a decode panics, a state that decodes does not encode back to
/// exactly the bytes it came from (the format is canonical), or restoring it into a policy
/// (and deciding there) panics, the rate-limit service's descriptor policy too.
pub fn check(data: &[u8]) {
    for bytes in [data.to_vec(), sealed(data)] {
        let Ok(state) = decode(&bytes) else {
            continue;
        };
        assert!(encode(&state) == bytes, "a decoded state encodes otherwise");
        let Ok((policy, _)) = Policy::restore(config().clone(), &state.sketches, state.tick) else {
            continue;
        };
        let event = Event {
            source: Source::from(Ipv4Addr::new(192, 0, 2, 1)),
            transport: Transport::Tcp,
            bytes: 60,
        };
        let _ = policy.decide(&event, state.tick);
        // The rate-limit service's sketches (a version 2 file) go back into its policy.
        if let Some(saved) = &state.descriptors {
            let Ok((descriptors, _)) = descriptor_policy().restore(saved, state.tick) else {
                continue;
            };
            let request = tollgate_filter::Request {
                domain: "api".into(),
                descriptors: vec![tollgate_filter::Descriptor::of(&[("api_key", "k")])],
                hits_addend: 1,
            };
            let _ = descriptors.decide(&request, state.tick);
        }
    }
}

/// A small descriptor policy of a per-second limit (the seeds' unit), fresh for each input.
fn descriptor_policy() -> tollgate_filter::DescriptorPolicy {
    static CONFIG: OnceLock<tollgate_filter::DescriptorConfig> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let text = "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: second, requests_per_unit: 5}\n";
        tollgate_filter::DescriptorConfig::parse(&[("api.yaml", text)])
            .expect("the harness's descriptor file parses")
    });
    tollgate_filter::DescriptorPolicy::new(config, 64 << 10, None)
        .expect("64 KiB holds one unit's sketch")
}
