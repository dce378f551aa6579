//! A `ShouldRateLimit` request as the policy reads it: the proxy moves the gRPC message's
//! strings in, nothing is copied.

/// One `(key, value)` entry of a descriptor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The entry's key (`remote_address`, `path`, a header's descriptor key, ...).
    pub key: String,
    /// Its value.
    pub value: String,
}

impl Entry {
    /// An entry of `key` and `value`.
    #[must_use]
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Entry {
        Entry {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// One descriptor: an ordered list of entries, matched against a domain's tree entry by entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Descriptor {
    /// The entries, outermost first.
    pub entries: Vec<Entry>,
}

impl Descriptor {
    /// A descriptor of `(key, value)` pairs.
    ///
    /// # Examples
    /// ```
    /// use tollgate_filter::Descriptor;
    /// let d = Descriptor::of(&[("api_key", "k1"), ("path", "/v1/users")]);
    /// assert_eq!(d.entries[1].value, "/v1/users");
    /// ```
    #[must_use]
    pub fn of(pairs: &[(&str, &str)]) -> Descriptor {
        Descriptor {
            entries: pairs.iter().map(|(k, v)| Entry::new(*k, *v)).collect(),
        }
    }
}

/// A rate-limit request: a domain, its descriptors, and the weight of each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Request {
    /// The configuration domain the descriptors are looked up in.
    pub domain: String,
    /// The descriptors, each decided on its own; the answer has one status per descriptor.
    pub descriptors: Vec<Descriptor>,
    /// How many hits this request counts for; 0 means 1 (Envoy sends 0 from both its filters).
    pub hits_addend: u64,
}

impl Request {
    /// The weight counted for each limited descriptor: `hits_addend`, or 1 where it is 0.
    #[must_use]
    pub fn weight(&self) -> u64 {
        self.hits_addend.max(1)
    }
}
