//! The state file's bytes: [`encode`] and [`decode`], nothing else (no file, no policy).
//!
//! All integers are little-endian.
//!
//! ```text
//! header (32 bytes)
//!   0  magic          8   "TGSTATE\0"
//!   8  version        u32 1, or 2 with the descriptor section (FORMAT_VERSION)
//!   12 reserved       u32 0
//!   16 body length    u64 bytes after the header, exactly
//!   24 checksum       u64 xxh3-64 of the body
//! body
//!   saved at          u64 Unix time in milliseconds (wall clock) when the save began
//!   tick              u64 the proxy's tick then, in nanoseconds (below 2^62)
//!   section*          u32 tag, u32 section version, u64 length, then `length` bytes:
//!                     tag 1 (sketches, version 1), then tag 2 (run-time lists, version 1),
//!                     then in a version 2 file only, tag 3 (descriptor sketches, version 1)
//! sketches v1
//!   count             u32
//!   per sketch        u8 kind (0 limits, 1 penalties, 2 penalties read shifted),
//!                     u8 retired (0 or 1), u8 windows (0 to 2), u8 0,
//!                     u64 period ns, u64 memory share bytes, u64 retired until (tick ns, 0
//!                     unless retired), u32 depth, u32 width, u32 front registers,
//!                     u32 front weight, u64 window ns, u64 seed,
//!                     per window: u64 index, u64 fronts, u64 events,
//!                                 depth x width u32 counts, registers u32 front bits
//! run-time lists v1
//!   count             u32
//!   per entry         u8 action (0 allow, 1 deny), u8 family (4 or 6), 4 or 16 address
//!                     bytes, u8 prefix length, u64 expiry (Unix ms), u16 reason length,
//!                     reason (UTF-8)
//! descriptor sketches v1 (the rate-limit service's, `[rls]`; same tick)
//!   count             u32
//!   per sketch        as in the sketches section (kind 0: one per unit, its window)
//! ```
//!
//! A proxy without `[rls]` writes version 1, which every build since the first reads; one
//! with it writes version 2. This build reads both (a version 1 file has no descriptor
//! counts).
//!
//! The encoding is canonical: [`decode`] accepts exactly the bytes [`encode`] makes of some
//! state, so `encode(decode(bytes)) == bytes` (the fuzz target checks it). Every length is
//! checked against the bytes left before anything is allocated for it: no input makes the
//! decoder allocate more than the input's size, or panic.

use std::borrow::Borrow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use tollgate_filter::{Cidr, Prefix, SavedKind, SavedSketch};
use tollgate_sketch::{Shape, Tick, WindowSnapshot};
use xxhash_rust::xxh3::xxh3_64;

/// The first 8 bytes of every state file.
pub(crate) const MAGIC: [u8; 8] = *b"TGSTATE\0";
/// The newest format version this build reads and writes (2: with the descriptor section);
/// it reads and writes 1 too (see the module docs).
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The header's length.
pub const HEADER_LEN: usize = 32;
/// The latest tick a file may hold (about 146 years): a clock resumed from it cannot reach
/// the end of the tick range.
pub(crate) const MAX_TICK: u64 = 1 << 62;

const SKETCHES: u32 = 1;
const SKETCHES_VERSION: u32 = 1;
const LISTS: u32 = 2;
const LISTS_VERSION: u32 = 1;
const DESCRIPTORS: u32 = 3;
const DESCRIPTORS_VERSION: u32 = 1;

/// Everything a state file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// Unix time in milliseconds when the save began.
    pub saved_at_unix_ms: u64,
    /// The proxy's tick then: a restart resumes its clock from it (plus the wall-clock time
    /// since `saved_at_unix_ms`).
    pub tick: Tick,
    /// The policy's sketches.
    pub sketches: Vec<SavedSketch>,
    /// Allow and deny entries added at run time.
    pub lists: Vec<ListEntry>,
    /// The rate-limit service's sketches (`[rls]`), at the same tick; `None` in a version 1
    /// file (a proxy without `[rls]` writes one).
    pub descriptors: Option<Vec<SavedSketch>>,
}

/// One allow or deny entry added at run time (not from the config file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListEntry {
    /// The network.
    pub cidr: Cidr,
    /// Deny (`true`) or allow.
    pub deny: bool,
    /// When it ends, Unix time in milliseconds.
    pub expires_unix_ms: u64,
    /// Why it was added (at most 65,535 bytes are kept).
    pub reason: String,
}

/// Why bytes are not a state file this build can read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FormatError {
    /// Shorter than the header.
    Short {
        /// The length found.
        len: usize,
    },
    /// Another magic: not a Tollgate state file.
    Magic {
        /// The first bytes found.
        found: [u8; 8],
    },
    /// Another format version.
    Version {
        /// The version found.
        found: u32,
    },
    /// The header's reserved word is not 0.
    Reserved {
        /// Its value.
        found: u32,
    },
    /// The body is not as long as the header says (a cut or padded file).
    Length {
        /// The length the header gives.
        declared: u64,
        /// The bytes after the header.
        actual: u64,
    },
    /// The body's checksum does not match (a damaged file).
    Checksum {
        /// The checksum the header gives.
        stored: u64,
        /// The body's.
        computed: u64,
    },
    /// A field that cannot hold what it holds (past the checksum: written wrong, not damaged).
    Invalid {
        /// Which field and why.
        what: String,
        /// Its byte offset in the file.
        offset: usize,
    },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Short { len } => write!(
                f,
                "{len} bytes, shorter than the {HEADER_LEN}-byte header (a cut file)"
            ),
            FormatError::Magic { found } => write!(
                f,
                "not a Tollgate state file (it starts {:?}, not {:?})",
                found.escape_ascii().to_string(),
                MAGIC.escape_ascii().to_string()
            ),
            FormatError::Version { found } => write!(
                f,
                "format version {found}; this build reads versions 1 to {FORMAT_VERSION}"
            ),
            FormatError::Reserved { found } => {
                write!(f, "header word at offset 12 is {found}, not 0")
            }
            FormatError::Length { declared, actual } => write!(
                f,
                "the header says {declared} bytes follow it, {actual} do (a cut or padded file)"
            ),
            FormatError::Checksum { stored, computed } => write!(
                f,
                "checksum mismatch: the header says {stored:#018x}, the body's is \
                 {computed:#018x} (a damaged file)"
            ),
            FormatError::Invalid { what, offset } => write!(f, "at byte {offset}: {what}"),
        }
    }
}

impl std::error::Error for FormatError {}

/// The file's bytes for `state`.
#[must_use]
pub fn encode(state: &State) -> Vec<u8> {
    encode_parts(
        state.saved_at_unix_ms,
        state.tick,
        &state.sketches,
        &state.lists,
        state.descriptors.as_deref(),
        0,
    )
}

/// The file's bytes for a state of these parts, taking `sketches` one at a time (each may be
/// dropped once written: a save then holds the file's bytes and one sketch's copy, not a copy
/// of every sketch as well). `capacity` is reserved up front (the file's expected size), so
/// the buffer is not copied as it grows.
#[must_use]
pub(crate) fn encode_parts<S: Borrow<SavedSketch>>(
    saved_at_unix_ms: u64,
    tick: Tick,
    sketches: impl IntoIterator<Item = S>,
    lists: &[ListEntry],
    descriptors: Option<&[SavedSketch]>,
    capacity: usize,
) -> Vec<u8> {
    let mut file = Vec::with_capacity(capacity);
    file.extend_from_slice(&MAGIC);
    put_u32(&mut file, if descriptors.is_some() { 2 } else { 1 });
    put_u32(&mut file, 0);
    // Body length and checksum, filled in below.
    put_u64(&mut file, 0);
    put_u64(&mut file, 0);
    put_u64(&mut file, saved_at_unix_ms);
    put_u64(&mut file, tick.as_nanos());
    section(&mut file, SKETCHES, SKETCHES_VERSION, |out| {
        let at = out.len();
        put_u32(out, 0);
        let mut count = 0u32;
        for sketch in sketches {
            sketch_bytes(out, sketch.borrow());
            count = count.saturating_add(1);
        }
        out[at..at + 4].copy_from_slice(&count.to_le_bytes());
    });
    section(&mut file, LISTS, LISTS_VERSION, |out| {
        put_u32(out, len_u32(lists.len()));
        for entry in lists {
            entry_bytes(out, entry);
        }
    });
    if let Some(descriptors) = descriptors {
        section(&mut file, DESCRIPTORS, DESCRIPTORS_VERSION, |out| {
            put_u32(out, len_u32(descriptors.len()));
            for sketch in descriptors {
                sketch_bytes(out, sketch);
            }
        });
    }
    let body_len = (file.len() - HEADER_LEN) as u64;
    let checksum = xxh3_64(&file[HEADER_LEN..]);
    file[16..24].copy_from_slice(&body_len.to_le_bytes());
    file[24..32].copy_from_slice(&checksum.to_le_bytes());
    file
}

/// The state in `bytes`.
///
/// # Errors
/// [`FormatError`] saying what is wrong and where: never a panic, whatever the bytes.
pub fn decode(bytes: &[u8]) -> Result<State, FormatError> {
    if bytes.len() < HEADER_LEN {
        return Err(FormatError::Short { len: bytes.len() });
    }
    let mut header = Reader {
        data: &bytes[..HEADER_LEN],
        pos: 0,
    };
    let magic = header.array::<8>("magic")?;
    if magic != MAGIC {
        return Err(FormatError::Magic { found: magic });
    }
    let version = header.u32("version")?;
    if !(1..=FORMAT_VERSION).contains(&version) {
        return Err(FormatError::Version { found: version });
    }
    let reserved = header.u32("reserved")?;
    if reserved != 0 {
        return Err(FormatError::Reserved { found: reserved });
    }
    let declared = header.u64("body length")?;
    let stored = header.u64("checksum")?;
    let body = &bytes[HEADER_LEN..];
    if declared != body.len() as u64 {
        return Err(FormatError::Length {
            declared,
            actual: body.len() as u64,
        });
    }
    let computed = xxh3_64(body);
    if computed != stored {
        return Err(FormatError::Checksum { stored, computed });
    }
    let mut r = Reader {
        data: bytes,
        pos: HEADER_LEN,
    };
    let saved_at_unix_ms = r.u64("saved-at time")?;
    let at = r.pos;
    let tick = r.u64("tick")?;
    if tick >= MAX_TICK {
        return Err(r.invalid(at, format!("tick {tick} ns is past 2^62 ns")));
    }
    let mut sketches = r.section(SKETCHES, SKETCHES_VERSION, "sketches")?;
    let count = sketches.u32("sketch count")?;
    let mut saved = Vec::new();
    for _ in 0..count {
        saved.push(sketches.sketch()?);
    }
    sketches.end("sketches")?;
    let mut lists = r.section(LISTS, LISTS_VERSION, "run-time lists")?;
    let count = lists.u32("list entry count")?;
    let mut entries = Vec::new();
    for _ in 0..count {
        entries.push(lists.entry()?);
    }
    lists.end("run-time lists")?;
    let descriptors = if version >= 2 {
        let mut section = r.section(DESCRIPTORS, DESCRIPTORS_VERSION, "descriptor sketches")?;
        let count = section.u32("descriptor sketch count")?;
        let mut saved = Vec::new();
        for _ in 0..count {
            saved.push(section.sketch()?);
        }
        section.end("descriptor sketches")?;
        Some(saved)
    } else {
        None
    };
    r.end("body")?;
    Ok(State {
        saved_at_unix_ms,
        tick: Tick::from_nanos(tick),
        sketches: saved,
        lists: entries,
        descriptors,
    })
}

/// Writes a section: its tag, version and length, then what `write` puts.
fn section(out: &mut Vec<u8>, tag: u32, version: u32, write: impl FnOnce(&mut Vec<u8>)) {
    put_u32(out, tag);
    put_u32(out, version);
    let at = out.len();
    put_u64(out, 0);
    write(out);
    let len = (out.len() - at - 8) as u64;
    out[at..at + 8].copy_from_slice(&len.to_le_bytes());
}

fn sketch_bytes(out: &mut Vec<u8>, sketch: &SavedSketch) {
    let kind = match sketch.kind {
        SavedKind::Limits => 0,
        SavedKind::Penalties => 1,
        SavedKind::ShiftedPenalties => 2,
    };
    // A policy saves at most two windows per sketch (the previous and the current one).
    let windows = u8::try_from(sketch.windows.len()).unwrap_or(u8::MAX);
    out.extend_from_slice(&[kind, u8::from(sketch.retired_until.is_some()), windows, 0]);
    put_u64(out, duration_nanos(sketch.period));
    put_u64(out, sketch.bytes);
    put_u64(out, sketch.retired_until.map_or(0, Tick::as_nanos));
    let shape = sketch.shape;
    put_u32(out, len_u32(shape.depth));
    put_u32(out, len_u32(shape.width));
    put_u32(out, len_u32(shape.registers));
    put_u32(out, shape.front_weight);
    put_u64(out, shape.window_nanos);
    put_u64(out, shape.seed);
    for window in &sketch.windows {
        put_u64(out, window.window_index());
        put_u64(out, window.fronts());
        put_u64(out, window.events());
        for &count in window.counts() {
            put_u32(out, count);
        }
        for &bits in window.front_bits() {
            put_u32(out, bits);
        }
    }
}

fn entry_bytes(out: &mut Vec<u8>, entry: &ListEntry) {
    out.push(u8::from(entry.deny));
    match entry.cidr.addr {
        IpAddr::V4(addr) => {
            out.push(4);
            out.extend_from_slice(&addr.octets());
        }
        IpAddr::V6(addr) => {
            out.push(6);
            out.extend_from_slice(&addr.octets());
        }
    }
    out.push(entry.cidr.prefix.len());
    put_u64(out, entry.expires_unix_ms);
    let reason = truncated(&entry.reason, usize::from(u16::MAX));
    // `truncated` keeps at most u16::MAX bytes.
    put_u16(out, u16::try_from(reason.len()).unwrap_or(u16::MAX));
    out.extend_from_slice(reason.as_bytes());
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn truncated(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A count or size of something held in memory, as the file's u32 (sketch sizes are far
/// below 2^32 cells: 32 GiB of counters).
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn put_u16(out: &mut Vec<u8>, value: u16) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

/// A cursor over the file; `pos` is the offset in the whole file, for messages.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn invalid(&self, offset: usize, what: String) -> FormatError {
        FormatError::Invalid { what, offset }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], FormatError> {
        let left = self.data.len() - self.pos;
        if n > left {
            return Err(self.invalid(
                self.pos,
                format!("{what}: needs {n} bytes, {left} are left"),
            ));
        }
        let bytes = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], FormatError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u8(&mut self, what: &str) -> Result<u8, FormatError> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16, FormatError> {
        self.array(what).map(u16::from_le_bytes)
    }

    fn u32(&mut self, what: &str) -> Result<u32, FormatError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, FormatError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Fails unless every byte was read.
    fn end(&self, what: &str) -> Result<(), FormatError> {
        let left = self.data.len() - self.pos;
        if left == 0 {
            Ok(())
        } else {
            Err(self.invalid(self.pos, format!("{left} bytes left over after the {what}")))
        }
    }

    /// The next section, which must be `tag` at `version`: a reader over its bytes alone.
    fn section(&mut self, tag: u32, version: u32, what: &str) -> Result<Reader<'a>, FormatError> {
        let at = self.pos;
        let found = self.u32("section tag")?;
        if found != tag {
            return Err(self.invalid(at, format!("section tag {found}, expected {tag} ({what})")));
        }
        let found = self.u32("section version")?;
        if found != version {
            return Err(self.invalid(
                at + 4,
                format!("{what} section version {found}; this build reads version {version}"),
            ));
        }
        let len = self.u64("section length")?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        let start = self.pos;
        let bytes = self.take(len, what)?;
        Ok(Reader {
            // The reader's offsets stay those of the whole file.
            data: &self.data[..start + bytes.len()],
            pos: start,
        })
    }

    fn sketch(&mut self) -> Result<SavedSketch, FormatError> {
        let at = self.pos;
        let kind = match self.u8("sketch kind")? {
            0 => SavedKind::Limits,
            1 => SavedKind::Penalties,
            2 => SavedKind::ShiftedPenalties,
            other => return Err(self.invalid(at, format!("sketch kind {other}, not 0 to 2"))),
        };
        let retired = self.u8("retired flag")?;
        if retired > 1 {
            return Err(self.invalid(at + 1, format!("retired flag {retired}, not 0 or 1")));
        }
        let windows = self.u8("window count")?;
        if windows > 2 {
            return Err(self.invalid(at + 2, format!("{windows} windows, at most 2")));
        }
        let pad = self.u8("padding")?;
        if pad != 0 {
            return Err(self.invalid(at + 3, format!("padding byte {pad}, not 0")));
        }
        let period = Duration::from_nanos(self.u64("period")?);
        let bytes = self.u64("memory share")?;
        let until_at = self.pos;
        let until = self.u64("retired until")?;
        let retired_until = match (retired, until) {
            (1, until) => Some(Tick::from_nanos(until)),
            (_, 0) => None,
            (_, until) => {
                return Err(self.invalid(
                    until_at,
                    format!("retired-until tick {until} on a sketch not retired"),
                ));
            }
        };
        let shape_at = self.pos;
        let depth = self.u32("depth")?;
        let width = self.u32("width")?;
        let registers = self.u32("front registers")?;
        let front_weight = self.u32("front weight")?;
        let window_nanos = self.u64("window length")?;
        let seed = self.u64("seed")?;
        // u32 to usize: Tollgate builds for 64-bit targets (and 32-bit ones hold u32).
        let shape = Shape {
            depth: depth as usize,
            width: width as usize,
            registers: registers as usize,
            window_nanos,
            seed,
            front_weight,
        };
        let cells = u64::from(depth) * u64::from(width);
        let mut saved = Vec::with_capacity(usize::from(windows));
        for _ in 0..windows {
            let window_at = self.pos;
            let index = self.u64("window index")?;
            let fronts = self.u64("fronts")?;
            let events = self.u64("events")?;
            let counts = self.u32s(cells, "counts")?;
            let front = self.u32s(u64::from(registers), "front bits")?;
            let window = WindowSnapshot::from_parts(shape, index, counts, front, fronts, events)
                .map_err(|err| self.invalid(window_at, format!("window {index}: {err}")))?;
            saved.push(window);
        }
        if saved.len() == 2
            && saved[0].window_index().checked_add(1) != Some(saved[1].window_index())
        {
            return Err(self.invalid(shape_at, "two windows that do not follow each other".into()));
        }
        Ok(SavedSketch {
            kind,
            period,
            bytes,
            retired_until,
            shape,
            windows: saved,
        })
    }

    /// `n` u32 values, checked against the bytes left before anything is allocated.
    fn u32s(&mut self, n: u64, what: &str) -> Result<Vec<u32>, FormatError> {
        let len = n
            .checked_mul(4)
            .and_then(|len| usize::try_from(len).ok())
            .unwrap_or(usize::MAX);
        let bytes = self.take(len, what)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    fn entry(&mut self) -> Result<ListEntry, FormatError> {
        let at = self.pos;
        let deny = match self.u8("list action")? {
            0 => false,
            1 => true,
            other => return Err(self.invalid(at, format!("list action {other}, not 0 or 1"))),
        };
        let addr = match self.u8("address family")? {
            4 => IpAddr::V4(Ipv4Addr::from(self.array::<4>("IPv4 address")?)),
            6 => IpAddr::V6(Ipv6Addr::from(self.array::<16>("IPv6 address")?)),
            other => {
                return Err(self.invalid(at + 1, format!("address family {other}, not 4 or 6")));
            }
        };
        let prefix_at = self.pos;
        let len = self.u8("prefix length")?;
        let prefix = match addr {
            IpAddr::V4(_) => Prefix::v4(u32::from(len)),
            IpAddr::V6(_) => Prefix::v6(u32::from(len)),
        }
        .map_err(|err| self.invalid(prefix_at, err.to_string()))?;
        let expires_unix_ms = self.u64("expiry")?;
        let reason_len = self.u16("reason length")?;
        let reason_at = self.pos;
        let reason = self.take(usize::from(reason_len), "reason")?;
        let reason = std::str::from_utf8(reason)
            .map_err(|err| self.invalid(reason_at, format!("reason: {err}")))?
            .to_owned();
        Ok(ListEntry {
            cidr: Cidr { addr, prefix },
            deny,
            expires_unix_ms,
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use proptest::prelude::*;
    use tollgate_filter::{Config, Event, Policy, Source, Transport};

    use super::*;

    /// A state with every kind of sketch, windows in them, and list entries of both families.
    fn state() -> State {
        let config = Config::parse(
            "[sketch]\nmemory = \"64KiB\"\n[[rule]]\nname = \"r\"\n\
             limits = [{ rate = \"2/10s\" }]\npenalty = \"1m\"\n",
        )
        .unwrap();
        let policy = Policy::compile(config, None).unwrap();
        let now = Tick::from_nanos(75_000_000_000);
        for last in 0..40u8 {
            let event = Event {
                source: Source::from(Ipv4Addr::new(192, 0, 2, last % 8)),
                transport: Transport::Tcp,
                bytes: 60,
            };
            let _ = policy.decide(&event, now);
        }
        let cidr = |text: &str| Cidr::parse(text).unwrap();
        let mut sketches = policy.save(now);
        // A retired one too, with both of its windows.
        let later = now + Duration::from_secs(10);
        let _ = policy.decide(
            &Event {
                source: Source::from(Ipv4Addr::new(192, 0, 2, 1)),
                transport: Transport::Tcp,
                bytes: 60,
            },
            later,
        );
        let mut retired = policy.save(later).swap_remove(0);
        retired.retired_until = Some(later + Duration::from_secs(30));
        sketches.push(retired);
        State {
            saved_at_unix_ms: 1_795_000_000_000,
            tick: now,
            sketches,
            lists: vec![
                ListEntry {
                    cidr: cidr("198.51.100.0/24"),
                    deny: true,
                    expires_unix_ms: 1_795_000_600_000,
                    reason: "scanner, ticket 42".into(),
                },
                ListEntry {
                    cidr: cidr("2001:db8::/48"),
                    deny: false,
                    expires_unix_ms: u64::MAX,
                    reason: "partner ✓".into(),
                },
            ],
            descriptors: None,
        }
    }

    #[test]
    fn a_state_reads_back_as_it_was() {
        let state = state();
        let windows: Vec<usize> = state.sketches.iter().map(|s| s.windows.len()).collect();
        // Limits, the two penalty sketches (a mark goes to one), the retired one.
        assert_eq!(windows, [1, 1, 0, 2]);
        let bytes = encode(&state);
        assert_eq!(decode(&bytes), Ok(state));
        assert_eq!(&bytes[..8], b"TGSTATE\0");
    }

    #[test]
    fn the_file_is_the_sketch_memory_and_a_little() {
        let state = state();
        let cells: usize = state
            .sketches
            .iter()
            .map(|s| s.windows.len() * (s.shape.depth * s.shape.width + s.shape.registers))
            .sum();
        let overhead = encode(&state).len() - cells * 4;
        // Header, two section heads, 72 bytes a sketch, 24 a window, the list entries.
        assert!(overhead < 500, "{overhead} bytes beside the cells");
    }

    #[test]
    fn damage_is_refused_with_what_is_wrong() {
        let good = encode(&state());
        let refuse = |bytes: &[u8]| decode(bytes).unwrap_err();
        let mut flipped = good.clone();
        flipped[HEADER_LEN + 100] ^= 1;
        assert!(matches!(refuse(&flipped), FormatError::Checksum { .. }));
        assert!(refuse(&flipped).to_string().contains("a damaged file"));
        let cut = &good[..good.len() - 1];
        let declared = (good.len() - HEADER_LEN) as u64;
        assert_eq!(
            refuse(cut),
            FormatError::Length {
                declared,
                actual: declared - 1
            }
        );
        assert_eq!(refuse(&good[..20]), FormatError::Short { len: 20 });
        let mut version = good.clone();
        version[8] = 3;
        assert_eq!(refuse(&version), FormatError::Version { found: 3 });
        assert_eq!(
            refuse(&version).to_string(),
            "format version 3; this build reads versions 1 to 2"
        );
        // A version 1 file claiming to be 2 lacks the descriptor section.
        let mut claimed = good.clone();
        claimed[8] = 2;
        assert!(matches!(refuse(&claimed), FormatError::Invalid { .. }));
        let foreign = b"# not a state file, a config: [proxy]\n";
        assert!(matches!(refuse(foreign), FormatError::Magic { .. }));
        assert!(
            refuse(foreign)
                .to_string()
                .starts_with("not a Tollgate state file (it starts \"# not a \"")
        );
    }

    /// The rate-limit service's sketches: a descriptor policy's, one key counted.
    fn descriptor_sketches() -> Vec<SavedSketch> {
        let text = "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";
        let config = tollgate_filter::DescriptorConfig::parse(&[("api.yaml", text)]).unwrap();
        let policy = tollgate_filter::DescriptorPolicy::new(&config, 64 << 10, None).unwrap();
        let request = tollgate_filter::Request {
            domain: "api".into(),
            descriptors: vec![tollgate_filter::Descriptor::of(&[("api_key", "k")])],
            hits_addend: 3,
        };
        let now = Tick::from_nanos(75_000_000_000);
        let _ = policy.decide(&request, now);
        policy.save(now)
    }

    #[test]
    fn descriptor_counts_make_a_version_2_file_and_a_version_1_file_still_reads() {
        let old = state();
        let v1 = encode(&old);
        assert_eq!(v1[8], 1, "without [rls], version 1 as before");
        assert_eq!(decode(&v1).unwrap().descriptors, None);
        let new = State {
            descriptors: Some(descriptor_sketches()),
            ..old
        };
        let v2 = encode(&new);
        assert_eq!(v2[8], 2);
        assert_eq!(new.descriptors.as_ref().map(Vec::len), Some(1));
        assert_eq!(decode(&v2), Ok(new.clone()));
        // Version 1's bytes are version 2's up to the descriptor section.
        assert_eq!(v1[12..16], v2[12..16]);
        assert_eq!(v1[HEADER_LEN..], v2[HEADER_LEN..v1.len()]);
        // A version 2 file's descriptor section damaged past the checksum is refused by name.
        let bytes = resealed(&new, |body| {
            let at = v1.len() - HEADER_LEN;
            body[at] = 9;
        });
        assert!(
            decode(&bytes)
                .unwrap_err()
                .to_string()
                .contains("section tag 9, expected 3 (descriptor sketches)"),
            "{:?}",
            decode(&bytes)
        );
    }

    /// `state` encoded with its body rewritten by `edit` and the header fixed up, so only the
    /// body's own checks stand in the way.
    fn resealed(state: &State, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut bytes = encode(state);
        let mut body = bytes.split_off(HEADER_LEN);
        edit(&mut body);
        bytes[16..24].copy_from_slice(&(body.len() as u64).to_le_bytes());
        bytes[24..32].copy_from_slice(&xxh3_64(&body).to_le_bytes());
        bytes.extend_from_slice(&body);
        bytes
    }

    #[test]
    fn a_body_that_checks_out_is_still_checked_field_by_field() {
        let state = state();
        let tick = resealed(&state, |body| {
            body[8..16].copy_from_slice(&u64::MAX.to_le_bytes())
        });
        assert_eq!(
            decode(&tick).unwrap_err().to_string(),
            format!("at byte 40: tick {} ns is past 2^62 ns", u64::MAX)
        );
        // The sketches section's version.
        let section = resealed(&state, |body| body[20] = 7);
        assert_eq!(
            decode(&section).unwrap_err().to_string(),
            "at byte 52: sketches section version 7; this build reads version 1"
        );
        // A sketch's depth raised: its counts no longer fit in the section.
        let depth = resealed(&state, |body| body[16 + 16 + 4 + 4 + 24] = 0xff);
        let err = decode(&depth).unwrap_err().to_string();
        assert!(err.contains("counts: needs"), "{err}");
        let trailing = resealed(&state, |body| body.push(0));
        assert!(
            decode(&trailing)
                .unwrap_err()
                .to_string()
                .contains("1 bytes left over after the body")
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn random_bytes_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            prop_assert!(decode(&bytes).is_err());
        }

        #[test]
        fn random_bytes_after_a_good_header_are_refused(
            body in proptest::collection::vec(any::<u8>(), 0..4096),
        ) {
            let mut bytes = encode(&state());
            bytes.truncate(HEADER_LEN);
            bytes[16..24].copy_from_slice(&(body.len() as u64).to_le_bytes());
            bytes.extend_from_slice(&body);
            prop_assert!(decode(&bytes).is_err());
        }

        #[test]
        fn a_resealed_body_with_damage_never_panics_and_reads_back_canonically(
            at in any::<prop::sample::Index>(),
            flip in 1..=255u8,
            cut in any::<prop::sample::Index>(),
        ) {
            // Past the checksum, so the body's own parser meets the damage.
            let state = state();
            let body_len = encode(&state).len() - HEADER_LEN;
            let (at, cut) = (at.index(body_len), cut.index(body_len + 1));
            for edit in [0, 1] {
                let bytes = resealed(&state, |body| {
                    if edit == 0 {
                        body[at] ^= flip;
                    } else {
                        body.truncate(cut);
                    }
                });
                if let Ok(decoded) = decode(&bytes) {
                    prop_assert_eq!(encode(&decoded), bytes);
                }
            }
        }

        #[test]
        fn every_truncation_and_every_flipped_byte_is_refused(
            at in any::<prop::sample::Index>(),
            flip in 1..=255u8,
        ) {
            let good = encode(&state());
            let at = at.index(good.len());
            prop_assert!(decode(&good[..at]).is_err(), "cut to {} bytes", at);
            let mut damaged = good.clone();
            damaged[at] ^= flip;
            prop_assert!(decode(&damaged).is_err(), "byte {} ^ {:#x}", at, flip);
        }
    }

    #[test]
    fn a_header_with_no_body_is_a_cut_file_not_a_short_one() {
        // Exactly the header: long enough to read it, so the message names the missing body.
        let good = encode(&state());
        let declared = (good.len() - HEADER_LEN) as u64;
        assert_eq!(
            decode(&good[..HEADER_LEN]),
            Err(FormatError::Length {
                declared,
                actual: 0
            })
        );
    }

    #[test]
    fn a_reason_past_65535_bytes_is_cut_on_a_character_boundary_and_reads_back() {
        // The limit falls inside the three bytes of '✓': the cut goes back to before it.
        let mut state = state();
        state.lists[0].reason = format!("{}✓ and more", "a".repeat(65_534));
        let decoded = decode(&encode(&state)).unwrap();
        assert_eq!(decoded.lists[0].reason, "a".repeat(65_534));
        assert_eq!(decoded.lists[1], state.lists[1]);
    }

    #[test]
    fn a_refused_field_is_named_at_its_own_byte() {
        // The first sketch starts at body byte 36 (file byte 68): the saved-at time and tick,
        // the section's head, the sketch count.
        let state = state();
        let refused = |edit: fn(&mut Vec<u8>)| decode(&resealed(&state, edit)).unwrap_err();
        assert_eq!(
            refused(|body| body[37] = 2).to_string(),
            "at byte 69: retired flag 2, not 0 or 1"
        );
        assert_eq!(
            refused(|body| body[38] = 3).to_string(),
            "at byte 70: 3 windows, at most 2"
        );
        assert_eq!(
            refused(|body| body[39] = 1).to_string(),
            "at byte 71: padding byte 1, not 0"
        );
        // With no sketch, the first list entry starts at body byte 56 (file byte 88).
        let lists_only = State {
            sketches: Vec::new(),
            ..state
        };
        let bytes = resealed(&lists_only, |body| body[57] = 5);
        assert_eq!(
            decode(&bytes).unwrap_err().to_string(),
            "at byte 89: address family 5, not 4 or 6"
        );
    }
}
