//! Where a secret (the admin's token, the Redis password) comes from: never the config text.
//! The config names the place; the secret is read from it where it is used, by one reader.

/// Where a secret (the admin's bearer token, the Redis password) comes from (never the config
/// text itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// A file holding the token (surrounding whitespace is ignored).
    File(std::path::PathBuf),
    /// An environment variable holding the token.
    Env(String),
}

impl TokenSource {
    /// `{secret}_file = "PATH"`: the file, if the text names one.
    pub(super) fn file(path: &str, secret: &str) -> Result<TokenSource, String> {
        if path.is_empty() {
            Err(format!(
                "{secret}_file is empty: name the file that holds the {secret}"
            ))
        } else {
            Ok(TokenSource::File(path.into()))
        }
    }

    /// `{secret}_env = "NAME"`: the variable, if the text can name one.
    pub(super) fn env(name: &str) -> Result<TokenSource, String> {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            Err(format!("`{name}` is not an environment variable name"))
        } else {
            Ok(TokenSource::Env(name.to_owned()))
        }
    }

    /// Reads the `secret` (`token`, `password`) of config section `section` (`admin`,
    /// `cluster`) from here: the file's text or the variable's value, surrounding whitespace
    /// trimmed.
    ///
    /// # Errors
    /// A message naming the section's field and the file or variable when it cannot be read
    /// or holds nothing but whitespace (never the secret).
    pub(crate) fn read(&self, section: &str, secret: &str) -> Result<String, String> {
        let (text, place) = match self {
            TokenSource::File(path) => (
                std::fs::read_to_string(path)
                    .map_err(|e| format!("[{section}] {secret}_file {}: {e}", path.display()))?,
                format!("[{section}] {secret}_file {}", path.display()),
            ),
            TokenSource::Env(name) => (
                std::env::var(name).map_err(|e| format!("[{section}] {secret}_env {name}: {e}"))?,
                format!("[{section}] {secret}_env {name}"),
            ),
        };
        let found = text.trim();
        if found.is_empty() {
            return Err(format!("{place} holds no {secret}"));
        }
        Ok(found.to_owned())
    }
}
