//! The compiled XDP program, loaded through aya: its maps configured, attached to interfaces,
//! its verdicts, cells and counters read back. Every map access is one of aya's safe
//! lookups or updates (a `bpf()` syscall each): the workspace forbids `unsafe`, so the
//! `BPF_F_MMAPABLE` cells are not mapped into the proxy's memory.

use std::fmt;
#[cfg(test)]
use std::time::Duration;

use std::net::IpAddr;

use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, MapData, MapError, PerCpuArray, RingBuf};
use aya::programs::xdp::XdpLinkId;
use aya::programs::{ProgramError, TestRun, TestRunOptions, Xdp, XdpMode};
use aya::{Ebpf, EbpfError, EbpfLoader};

use super::layout::{self, BANKS, CONFIG_BYTES, Config, EVENT_RING_BYTES, Level, PORT_WORDS};

/// The object `build.rs` compiled, or `None` when it found no clang.
#[cfg(tollgate_xdp)]
const OBJECT: Option<&[u8]> = Some(aya::include_bytes_aligned!(concat!(
    env!("OUT_DIR"),
    "/tollgate.bpf.o"
)));
#[cfg(not(tollgate_xdp))]
const OBJECT: Option<&[u8]> = None;

/// The program's object: the embedded one; in tests, the file `TOLLGATE_XDP_OBJECT` names
/// when set, so a variant of the C program (a check broken on purpose) runs under the same
/// test binary without rebuilding it.
fn object() -> Option<std::borrow::Cow<'static, [u8]>> {
    #[cfg(test)]
    if let Some(path) = std::env::var_os("TOLLGATE_XDP_OBJECT") {
        return std::fs::read(&path).ok().map(std::borrow::Cow::Owned);
    }
    OBJECT.map(std::borrow::Cow::Borrowed)
}

/// What the XDP mode says at start when this binary carries no program.
pub(crate) const MISSING: &str = "XDP mode unavailable: this tollgate was built without its XDP \
     program (no clang on the build machine); install clang (Debian: `apt-get install clang`) \
     and rebuild (`TOLLGATE_CLANG=clang cargo build --release -p tollgate`)";

/// The program's section and function name in the object.
const NAME: &str = "tollgate";

/// The clearing program's function name (`proxy/bpf/clear.h`): loaded beside the counting
/// program, never attached, run by [`Program::clear_blocks`].
const CLEAR: &str = "tollgate_clear";

/// Bytes of the clearing program's input: the slice, the first block, the number of blocks
/// (little-endian u32 each), padded to the shortest frame `BPF_PROG_TEST_RUN` takes (an
/// Ethernet header's 14 bytes).
const CLEAR_INPUT: usize = 16;

/// Per-CPU counters of the program, summed (`COUNTER_*` in layout.h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// Attempts counted and under every limit.
    pub(crate) passed: u64,
    /// Attempts over a limit.
    pub(crate) dropped: u64,
    /// Frames cut short or with an impossible header (passed).
    pub(crate) malformed: u64,
    /// Frames that are not attempts (passed, uncounted).
    pub(crate) ignored: u64,
    /// Attempts from allowed networks (passed, uncounted).
    pub(crate) allowed: u64,
    /// Drop events the ring had no room for.
    pub(crate) events_lost: u64,
}

/// What the program did with a frame.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// `XDP_PASS`.
    Pass,
    /// `XDP_DROP`.
    Drop,
    /// Any other return value (the program has none).
    Other(u32),
}

#[cfg(test)]
impl Verdict {
    fn of(value: u32) -> Verdict {
        match value {
            1 => Verdict::Drop,
            2 => Verdict::Pass,
            other => Verdict::Other(other),
        }
    }
}

/// Why the program could not be loaded or driven.
#[derive(Debug)]
pub(crate) enum XdpError {
    /// Built without the program (see [`MISSING`]).
    Missing,
    /// The object or its maps were refused.
    Object(EbpfError),
    /// The program was refused (the verifier's log included) or could not run.
    Program(ProgramError),
    /// A map could not be read or written.
    Map(MapError),
}

impl fmt::Display for XdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            XdpError::Missing => f.write_str(MISSING),
            XdpError::Object(err) => write!(f, "loading the XDP object: {err}"),
            // aya's load error carries the verifier's whole log in its message.
            XdpError::Program(err) => write!(f, "the XDP program: {err}"),
            XdpError::Map(err) => write!(f, "an XDP map: {err}"),
        }
    }
}

impl std::error::Error for XdpError {}

impl From<EbpfError> for XdpError {
    fn from(err: EbpfError) -> XdpError {
        XdpError::Object(err)
    }
}

impl From<ProgramError> for XdpError {
    fn from(err: ProgramError) -> XdpError {
        XdpError::Program(err)
    }
}

impl From<MapError> for XdpError {
    fn from(err: MapError) -> XdpError {
        XdpError::Map(err)
    }
}

/// The program loaded into the kernel (verified), with its maps.
pub(crate) struct Program {
    ebpf: Ebpf,
    cells: Array<MapData, u32>,
    config: Array<MapData, [u8; CONFIG_BYTES]>,
    /// What `config` holds now.
    current: Config,
    rules: Array<MapData, [u32; 2]>,
    skipped_ports: Array<MapData, u32>,
    counters: PerCpuArray<MapData, u64>,
    /// The allowed networks of each family (`xdp::lists`): 1 allowed, 0 counted.
    allow_v4: LpmTrie<MapData, [u8; 4], u32>,
    allow_v6: LpmTrie<MapData, [u8; 16], u32>,
    /// The drop events, until [`Program::take_events`] hands them to their reader.
    events: Option<RingBuf<MapData>>,
    /// The interfaces attached to, with their links.
    links: Vec<(String, XdpLinkId)>,
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("cells", &self.cells.len())
            .finish_non_exhaustive()
    }
}

/// Takes the map `name` out of `ebpf` as a `T`.
fn take<T>(ebpf: &mut Ebpf, name: &str) -> Result<T, XdpError>
where
    T: TryFrom<aya::maps::Map, Error = MapError>,
{
    let map = ebpf.take_map(name).ok_or_else(|| {
        XdpError::Map(MapError::InvalidName {
            name: name.to_owned(),
        })
    })?;
    Ok(T::try_from(map)?)
}

impl Program {
    /// Loads the program with a sketch of `geometry`, its config set to `config` and no rule.
    ///
    /// # Errors
    /// [`XdpError::Missing`] without a program; the kernel's refusal otherwise (the verifier's
    /// log in [`XdpError::Program`]).
    pub(crate) fn load(geometry: layout::Geometry, config: Config) -> Result<Program, XdpError> {
        Program::load_with_ring(geometry, config, EVENT_RING_BYTES)
    }

    /// [`Program::load`] with a ring of `ring_bytes` for the drop events (a power of two,
    /// whole pages).
    ///
    /// # Errors
    /// As [`Program::load`].
    pub(crate) fn load_with_ring(
        geometry: layout::Geometry,
        config: Config,
        ring_bytes: u32,
    ) -> Result<Program, XdpError> {
        let object = object().ok_or(XdpError::Missing)?;
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("cells", geometry.entries())
            .map_max_entries("events", ring_bytes)
            .load(&object)?;
        let xdp: &mut Xdp = ebpf
            .program_mut(NAME)
            .ok_or(XdpError::Program(ProgramError::NotLoaded))?
            .try_into()?;
        xdp.load()?;
        let clear: &mut Xdp = ebpf
            .program_mut(CLEAR)
            .ok_or(XdpError::Program(ProgramError::NotLoaded))?
            .try_into()?;
        clear.load()?;
        let mut program = Program {
            cells: take(&mut ebpf, "cells")?,
            config: take(&mut ebpf, "config")?,
            current: config,
            rules: take(&mut ebpf, "rules")?,
            skipped_ports: take(&mut ebpf, "skipped_ports")?,
            counters: take(&mut ebpf, "counters")?,
            allow_v4: take(&mut ebpf, "allow_v4")?,
            allow_v6: take(&mut ebpf, "allow_v6")?,
            events: Some(take(&mut ebpf, "events")?),
            links: Vec::new(),
            ebpf,
        };
        program.configure(config)?;
        Ok(program)
    }

    /// Replaces the program's config.
    ///
    /// # Errors
    /// The kernel's refusal of the map update.
    pub(crate) fn configure(&mut self, config: Config) -> Result<(), XdpError> {
        self.config.set(0, config.to_bytes(), 0)?;
        self.current = config;
        Ok(())
    }

    /// The config in force.
    pub(crate) fn config(&self) -> Config {
        self.current
    }

    /// Sets `level`'s limit (attempts per sliding window) in the bank in force; 0 stops
    /// counting at that level.
    ///
    /// # Errors
    /// The kernel's refusal of the map update.
    #[cfg(test)]
    pub(crate) fn set_limit(&mut self, level: Level, limit: u32) -> Result<(), XdpError> {
        let index = self.current.bank * Level::ALL.len() as u32 + level.index();
        Ok(self.rules.set(index, [limit, 0], 0)?)
    }

    /// Replaces every level's limit at once (indexed as [`Level::ALL`]): they are written
    /// whole into the bank not in force, then `config.bank` is flipped. The program reads
    /// the bank once per frame, so a frame is decided by the old rules or the new ones,
    /// never a mix. The bank written here was last in force one swap ago: a frame still
    /// reading it would have to have been decided for as long as the time between two
    /// reloads (a frame takes well under a microsecond).
    ///
    /// # Errors
    /// The kernel's refusal of a map update; the rules in force are then unchanged.
    pub(crate) fn swap_limits(&mut self, limits: [u32; Level::ALL.len()]) -> Result<(), XdpError> {
        let bank = (self.current.bank + 1) % BANKS;
        for (level, limit) in Level::ALL.iter().zip(limits) {
            let index = bank * Level::ALL.len() as u32 + level.index();
            self.rules.set(index, [limit, 0], 0)?;
        }
        self.configure(Config {
            bank,
            ..self.current
        })
    }

    /// The limit of `level` in force.
    ///
    /// # Errors
    /// The kernel's refusal of the lookup.
    #[cfg(test)]
    pub(crate) fn limit(&self, level: Level) -> Result<u32, XdpError> {
        let index = self.current.bank * Level::ALL.len() as u32 + level.index();
        Ok(self.rules.get(&index, 0)?[0])
    }

    /// Counts attempts to `ports` only (every port when `None`; the loader's map counts
    /// every port until this is called).
    ///
    /// # Errors
    /// The kernel's refusal of a map update.
    pub(crate) fn guard_ports(&mut self, ports: Option<&[u16]>) -> Result<(), XdpError> {
        let mut skipped = vec![if ports.is_some() { u32::MAX } else { 0 }; PORT_WORDS as usize];
        for &port in ports.unwrap_or_default() {
            skipped[usize::from(port >> 5)] &= !(1 << (port & 31));
        }
        for (word, bits) in (0..PORT_WORDS).zip(skipped) {
            self.skipped_ports.set(word, bits, 0)?;
        }
        Ok(())
    }

    /// Puts the network `addr`/`len` (host bits cleared) into its family's allow trie, or
    /// changes its entry: `allowed`, its sources pass uncounted; otherwise they are counted
    /// (a deny entry inside an allowed network, see `xdp::lists`). The program looks a trie up
    /// only while `config.lists` says it holds entries.
    ///
    /// # Errors
    /// The kernel's refusal (the trie full, out of memory).
    pub(crate) fn list(&mut self, addr: IpAddr, len: u8, allowed: bool) -> Result<(), XdpError> {
        let value = u32::from(allowed);
        match addr {
            IpAddr::V4(v4) => {
                self.allow_v4
                    .insert(&Key::new(u32::from(len), v4.octets()), value, 0)?
            }
            IpAddr::V6(v6) => {
                self.allow_v6
                    .insert(&Key::new(u32::from(len), v6.octets()), value, 0)?
            }
        }
        Ok(())
    }

    /// Takes the network `addr`/`len` out of its family's allow trie.
    ///
    /// # Errors
    /// The kernel's refusal (no such entry).
    pub(crate) fn unlist(&mut self, addr: IpAddr, len: u8) -> Result<(), XdpError> {
        match addr {
            IpAddr::V4(v4) => self
                .allow_v4
                .remove(&Key::new(u32::from(len), v4.octets()))?,
            IpAddr::V6(v6) => self
                .allow_v6
                .remove(&Key::new(u32::from(len), v6.octets()))?,
        }
        Ok(())
    }

    /// The longest match of `addr` in its family's allow trie: `Some(true)` allowed,
    /// `Some(false)` counted, `None` no entry holds it.
    #[cfg(test)]
    pub(crate) fn listed(&self, addr: IpAddr) -> Option<bool> {
        let found = match addr {
            IpAddr::V4(v4) => self.allow_v4.get(&Key::new(32, v4.octets()), 0),
            IpAddr::V6(v6) => self.allow_v6.get(&Key::new(128, v6.octets()), 0),
        };
        found.ok().map(|value| value == 1)
    }

    /// The ring of drop events, once (`xdp::events` reads it).
    pub(crate) fn take_events(&mut self) -> Option<RingBuf<MapData>> {
        self.events.take()
    }

    /// Attaches the program to `interface`, natively (in the driver) or generically (in the
    /// stack, for drivers without XDP); it stays attached until [`Program::detach`] or the
    /// program is dropped. The attachment is a BPF link held by this process (kernels from
    /// 5.9 on): when the process ends, crashed or not, the kernel closes it and the program
    /// leaves the interface, so nothing blocks the next start.
    ///
    /// # Errors
    /// An unknown interface, or the kernel's refusal (a driver without native XDP, another
    /// program attached there already).
    pub(crate) fn attach(&mut self, interface: &str, native: bool) -> Result<(), XdpError> {
        let xdp: &mut Xdp = self
            .ebpf
            .program_mut(NAME)
            .ok_or(XdpError::Program(ProgramError::NotLoaded))?
            .try_into()?;
        let mode = if native {
            XdpMode::Driver
        } else {
            XdpMode::Skb
        };
        let link = xdp.attach(interface, mode)?;
        self.links.push((interface.to_owned(), link));
        Ok(())
    }

    /// Detaches the program from every interface it was attached to; the names of those
    /// detached.
    ///
    /// # Errors
    /// The first refusal; the program is detached from the others all the same (and from
    /// that one when it is dropped).
    pub(crate) fn detach(&mut self) -> Result<Vec<String>, XdpError> {
        let xdp: &mut Xdp = self
            .ebpf
            .program_mut(NAME)
            .ok_or(XdpError::Program(ProgramError::NotLoaded))?
            .try_into()?;
        let mut detached = Vec::new();
        let mut first = None;
        for (interface, link) in self.links.drain(..) {
            match xdp.detach(link) {
                Ok(()) => detached.push(interface),
                Err(err) => {
                    first.get_or_insert(err);
                }
            }
        }
        match first {
            Some(err) => Err(err.into()),
            None => Ok(detached),
        }
    }

    #[cfg(test)]
    fn xdp(&self) -> Result<&Xdp, XdpError> {
        let program = self
            .ebpf
            .program(NAME)
            .ok_or(XdpError::Program(ProgramError::NotLoaded))?;
        Ok(<&Xdp>::try_from(program)?)
    }

    /// Runs the program once on `frame` (`BPF_PROG_TEST_RUN`), as the driver would.
    ///
    /// # Errors
    /// The kernel's refusal of the run (a frame shorter than an Ethernet header, for one).
    #[cfg(test)]
    pub(crate) fn run(&self, frame: &[u8]) -> Result<Verdict, XdpError> {
        Ok(self.run_repeated(frame, 1)?.0)
    }

    /// Runs the program `repeat` times on `frame`: the last verdict and the kernel's mean time
    /// per run.
    ///
    /// # Errors
    /// As [`Program::run`].
    #[cfg(test)]
    pub(crate) fn run_repeated(
        &self,
        frame: &[u8],
        repeat: u32,
    ) -> Result<(Verdict, Duration), XdpError> {
        let result = self.xdp()?.test_run(TestRunOptions {
            data_in: Some(frame),
            repeat,
            ..TestRunOptions::new()
        })?;
        Ok((Verdict::of(result.return_value), result.duration))
    }

    /// The cell at `index` of the `cells` map.
    ///
    /// # Errors
    /// An index past the map.
    pub(crate) fn cell(&self, index: u32) -> Result<u32, XdpError> {
        Ok(self.cells.get(&index, 0)?)
    }

    /// Sets the cell at `index` (tests fill the sketch with it).
    ///
    /// # Errors
    /// An index past the map.
    #[cfg(test)]
    pub(crate) fn set_cell(&mut self, index: u32, value: u32) -> Result<(), XdpError> {
        Ok(self.cells.set(index, value, 0)?)
    }

    /// Zeroes the cells of `slice` in `blocks` blocks from block `first`, in one run of the
    /// clearing program (`BPF_PROG_TEST_RUN`: one syscall for `blocks * DEPTH * COLUMNS`
    /// cells, where a map update takes one per cell); the cells it zeroed, fewer
    /// only if the blocks run past the map.
    ///
    /// # Errors
    /// The kernel's refusal of the run.
    pub(crate) fn clear_blocks(
        &self,
        slice: u32,
        first: u32,
        blocks: u32,
    ) -> Result<u32, XdpError> {
        let mut input = [0u8; CLEAR_INPUT];
        for (chunk, word) in input.chunks_exact_mut(4).zip([slice, first, blocks]) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        let program = self
            .ebpf
            .program(CLEAR)
            .ok_or(XdpError::Program(ProgramError::NotLoaded))?;
        let result = <&Xdp>::try_from(program)?.test_run(TestRunOptions {
            data_in: Some(&input),
            ..TestRunOptions::new()
        })?;
        Ok(result.return_value)
    }

    /// One per-CPU counter (`COUNTER_*` in layout.h), CPU by CPU.
    ///
    /// # Errors
    /// The kernel's refusal of the lookup.
    #[cfg(test)]
    pub(crate) fn counter_per_cpu(&self, index: u32) -> Result<Vec<u64>, XdpError> {
        Ok(self.counters.get(&index, 0)?.iter().copied().collect())
    }

    /// The counters, summed over CPUs.
    ///
    /// # Errors
    /// The kernel's refusal of the lookup.
    pub(crate) fn counters(&self) -> Result<Counters, XdpError> {
        let sum = |index: u32| -> Result<u64, XdpError> {
            Ok(self.counters.get(&index, 0)?.iter().sum())
        };
        Ok(Counters {
            passed: sum(0)?,
            dropped: sum(1)?,
            malformed: sum(2)?,
            ignored: sum(3)?,
            allowed: sum(4)?,
            events_lost: sum(5)?,
        })
    }
}
