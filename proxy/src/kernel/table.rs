//! The proxy's nftables table: created (replacing any of that name) at start, written to by
//! the updater, deleted at stop.

use super::nft::{self, NftError};
use super::ruleset::Ruleset;

/// The table in the kernel, as the proxy set it up.
#[derive(Debug)]
pub struct Table {
    ruleset: Ruleset,
}

impl Table {
    /// Creates the table of `ruleset` in one transaction, replacing a table of that name
    /// (one a crashed proxy left, say).
    ///
    /// # Errors
    /// [`NftError`]: nft is missing, or refused (no CAP_NET_ADMIN, no nftables in the kernel).
    pub fn create(ruleset: Ruleset) -> Result<Table, NftError> {
        nft::run(&ruleset.create())?;
        Ok(Table { ruleset })
    }

    /// The table of `ruleset`, made by a transaction that already ran (see
    /// [`super::Current::replace`]).
    pub(crate) fn made(ruleset: Ruleset) -> Table {
        Table { ruleset }
    }

    /// What the table holds.
    #[must_use]
    pub fn ruleset(&self) -> &Ruleset {
        &self.ruleset
    }

    /// Runs one transaction on the table (see [`Ruleset::add`]).
    ///
    /// # Errors
    /// [`NftError`] if it did not commit; then nothing of it did.
    pub fn apply(&self, text: &str) -> Result<(), NftError> {
        nft::run(text)
    }

    /// Deletes the table, and with it every rule and element.
    ///
    /// # Errors
    /// [`NftError`] if nft could not (the table stays until the next start replaces it).
    pub fn delete(&self) -> Result<(), NftError> {
        nft::run(&self.ruleset.delete())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KernelConfig;

    #[test]
    fn a_transaction_nft_refuses_is_an_error() {
        let table = Table::made(Ruleset::new(&KernelConfig::default(), [], []));
        // Not nft's language: refused before it reaches the kernel (or nft is missing).
        assert!(table.apply("not a transaction").is_err());
    }
}
