//! What the config's tests share: a policy to complete a file, and parsing that panics with
//! the file when the outcome is not the expected one.

use tollgate_filter::ConfigErrors;

use super::{ClusterConfig, KernelConfig, ProxyConfig};

const POLICY: &str =
    "[sketch]\nmemory = \"1MiB\"\n[[rule]]\nname = \"r\"\nlimits = [{ rate = \"100/10s\" }]\n";

fn parse(proxy: &str) -> Result<ProxyConfig, ConfigErrors> {
    ProxyConfig::parse(&format!("{proxy}\n{POLICY}"))
}

pub(super) fn parsed(proxy: &str) -> ProxyConfig {
    parse(proxy).unwrap_or_else(|e| panic!("refused:\n{proxy}\n{e}"))
}

/// The messages of a file that must be refused.
pub(super) fn refusals(proxy: &str) -> Vec<String> {
    match parse(proxy) {
        Ok(_) => panic!("accepted:\n{proxy}"),
        Err(e) => e.0.into_iter().map(|e| e.message).collect(),
    }
}

pub(super) fn refused(proxy: &str, needle: &str) {
    let messages = refusals(proxy);
    assert!(
        messages.iter().any(|m| m.contains(needle)),
        "`{needle}` not in {messages:?}"
    );
}

/// Parses `text`, the whole file `name` (the `tollgate check` of the e2e tests, without the
/// binary): it must be refused, and its errors as `check` locates them
/// ([`super::located`]) say each of `needles`.
pub(super) fn refused_file(name: &str, text: &str, needles: &[&str]) {
    let errors = match ProxyConfig::parse(text) {
        Ok(_) => panic!("{name} passed:\n{text}"),
        Err(errors) => errors,
    };
    let out = super::located(std::path::Path::new(name), &errors);
    for needle in needles {
        assert!(out.contains(needle), "{needle} missing from\n{out}");
    }
}

pub(super) fn listener(fields: &str) -> String {
    format!(
        "[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:1\"\nupstreams = [\"127.0.0.1:2\"]\n{fields}"
    )
}

pub(super) const CLUSTER: &str = "[cluster]\nname = \"c\"\nredis = [\"127.0.0.2:6379\"]\n";

pub(super) fn cluster(fields: &str) -> ClusterConfig {
    parsed(&format!("{CLUSTER}{fields}"))
        .cluster
        .expect("a cluster")
}

pub(super) fn kernel(fields: &str) -> KernelConfig {
    parsed(&format!("[kernel]\n{fields}"))
        .kernel
        .expect("a kernel section")
}
