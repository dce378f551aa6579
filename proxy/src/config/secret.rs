//! Where a secret (the admin's token, the Redis password) comes from: never the config text.

/// Where the admin's bearer token comes from (never the config text itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// A file holding the token (surrounding whitespace is ignored).
    File(std::path::PathBuf),
    /// An environment variable holding the token.
    Env(String),
}
