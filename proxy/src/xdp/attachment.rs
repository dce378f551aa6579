//! The XDP program as the running proxy holds it: loaded with the policy's kernel rules,
//! attached to `[xdp] interfaces`, its sketch rotated, its rules swapped at reloads and its
//! cells read for `/explain`.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use tokio::sync::watch;
use tollgate_filter::{Cidr, Filter, ListKind};
use tollgate_sketch::Tick;

use super::layout::{self, Config, Geometry, Level, TICK_SHIFT};
use super::lists::{self, ALLOW_ENTRIES, KernelLists, Synced};
use super::metrics::{Cleared, XdpMetrics};
use super::program::{Counters, Program, XdpError};
use super::rules::{self, KernelRules};
use crate::config::{XdpConfig, XdpMode};

/// Blocks cleared by one run of the clearing program, between two looks at the clock:
/// 10,880 cells, one syscall (`Program::clear_blocks`).
const CHUNK_BLOCKS: u32 = 64;

/// The kernel's clock in ticks: `CLOCK_MONOTONIC_COARSE`, the clock the program reads
/// through `bpf_ktime_get_coarse_ns`, shifted as the program shifts it.
pub(crate) fn kernel_tick() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    // The monotonic clock starts at boot: both fields are non-negative.
    let nanos = u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000
        + u64::try_from(now.tv_nsec).unwrap_or(0);
    nanos >> TICK_SHIFT
}

/// A duration in ticks (at least one).
fn ticks(duration: Duration) -> u64 {
    (u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX) >> TICK_SHIFT)
        .clamp(1, layout::MAX_WINDOW)
}

/// The ring of drop events, waiting for its reader.
struct Events(RingBuf<MapData>);

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Events")
    }
}

/// The kernel's estimate of one source at one level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KernelEstimate {
    /// The level (the source's prefix counted).
    pub(crate) level: Level,
    /// The sliding estimate: attempts in the window, the previous window's share included.
    pub(crate) estimate: u64,
    /// The level's limit.
    pub(crate) limit: u32,
}

impl KernelEstimate {
    /// Whether the kernel drops the source's next attempt (it counts that attempt too).
    pub(crate) fn drops_next(&self) -> bool {
        self.estimate >= u64::from(self.limit)
    }
}

/// The program loaded and attached for the running proxy.
#[derive(Debug)]
pub(crate) struct Attachment {
    program: Mutex<Program>,
    /// The window in ticks.
    window: u64,
    /// The window as the config says it.
    window_duration: Duration,
    width: u32,
    seed: u64,
    /// The rules in force.
    rules: Mutex<KernelRules>,
    /// The rule each level's limit comes from, for drop events.
    names: Mutex<[Option<String>; Level::ALL.len()]>,
    /// The allow tries and the lists they hold (taken before `program`).
    lists: Mutex<KernelLists>,
    /// The drop events, until their reader takes them.
    events: Mutex<Option<Events>>,
    interfaces: Vec<String>,
    mode: XdpMode,
    ports: Vec<u16>,
    metrics: Arc<XdpMetrics>,
}

impl Attachment {
    /// Loads the program with `policy`'s kernel rules and allow lists (the file's: the
    /// run-time entries come with the first [`Attachment::sync_lists_of`]), counts attempts
    /// to `ports` only and attaches it to every interface of `config`.
    ///
    /// # Errors
    /// A program missing from this build, refused by the kernel, or an interface it cannot
    /// attach to (those attached already are detached).
    pub(crate) fn start(
        config: &XdpConfig,
        policy: &tollgate_filter::Config,
        ports: Vec<u16>,
        metrics: Arc<XdpMetrics>,
    ) -> Result<Attachment, XdpError> {
        let rules = KernelRules::of(policy, config.window);
        let geometry = Geometry::of_memory(config.memory);
        let window = ticks(rules.window);
        let seed = rand::random();
        let mut program = Program::load(
            geometry,
            Config {
                seed,
                window,
                width: geometry.width,
                fixed_tick: 0,
                bank: 0,
                lists: 0,
            },
        )?;
        program.swap_limits(rules.limits)?;
        program.guard_ports(Some(&ports))?;
        let mut kernel_lists = KernelLists::new(ALLOW_ENTRIES);
        let synced = kernel_lists.sync(&mut program, &policy.allow, &policy.deny, &[])?;
        let events = program.take_events();
        for interface in &config.interfaces {
            program.attach(interface, config.mode == XdpMode::Native)?;
        }
        let attachment = Attachment {
            program: Mutex::new(program),
            window,
            window_duration: rules.window,
            width: geometry.width,
            seed,
            names: Mutex::new(rules::names(policy, &rules)),
            rules: Mutex::new(rules),
            lists: Mutex::new(kernel_lists),
            events: Mutex::new(events.map(Events)),
            interfaces: config.interfaces.clone(),
            mode: config.mode,
            ports,
            metrics,
        };
        if let Some(synced) = synced {
            attachment.lists_synced(synced);
        }
        Ok(attachment)
    }

    fn program(&self) -> MutexGuard<'_, Program> {
        self.program.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rules in force.
    pub(crate) fn rules(&self) -> KernelRules {
        *self.rules.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the start log says: interfaces, mode, ports, window, levels.
    pub(crate) fn describe(&self) -> String {
        let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
        format!(
            "XDP mode: attached to {} ({}), guarding port(s) {}, window {:?}, {} cells per row; \
             kernel limits {}",
            self.interfaces.join(", "),
            self.mode.as_str(),
            ports.join(", "),
            self.window_duration,
            self.width,
            self.rules().describe()
        )
    }

    /// Writes `policy`'s kernel rules (over the window the program started with: its slices
    /// hold counts of that length) and swaps them in at once (see [`Program::swap_limits`]),
    /// then brings the allow tries in step with `policy`'s lists (and the run-time entries
    /// last brought in).
    ///
    /// # Errors
    /// The kernel's refusal of a map update; the rules in force are then unchanged.
    pub(crate) fn reload(&self, policy: &tollgate_filter::Config) -> Result<KernelRules, XdpError> {
        let rules = KernelRules::of(policy, Some(self.window_duration));
        {
            let mut in_force = self.rules.lock().unwrap_or_else(|e| e.into_inner());
            if *in_force != rules {
                self.program().swap_limits(rules.limits)?;
                *in_force = rules;
            }
            *self.names.lock().unwrap_or_else(|e| e.into_inner()) = rules::names(policy, &rules);
        }
        let mut kernel_lists = self.kernel_lists();
        let runtime = kernel_lists.runtime();
        self.sync_locked(&mut kernel_lists, &policy.allow, &policy.deny, &runtime);
        Ok(rules)
    }

    fn kernel_lists(&self) -> MutexGuard<'_, KernelLists> {
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Per family (IPv4, IPv6), whether the program counts without dropping because that
    /// family's allow lists did not fit (see [`KernelLists::undropped`]).
    pub(crate) fn undropped(&self) -> std::sync::Arc<[std::sync::atomic::AtomicBool; 2]> {
        self.kernel_lists().undropped()
    }

    /// Brings the allow tries in step with the lists `filter` decides by at `now`: its
    /// policy's and the run-time entries in force; cheap when they are those of the last
    /// call. The lists are read once the tries are held, so of two calls the later one reads
    /// the later lists.
    pub(crate) fn sync_lists_of(&self, filter: &Filter, now: Tick) {
        let mut kernel_lists = self.kernel_lists();
        let policy = filter.policy();
        let runtime = lists::runtime(&filter.lists().entries(now));
        self.sync_locked(
            &mut kernel_lists,
            &policy.config().allow,
            &policy.config().deny,
            &runtime,
        );
    }

    /// Brings the allow tries in step with the file's lists `allow` and `deny` and the
    /// run-time entries `runtime`. A refusal is logged and counted (the entries not taken out
    /// stay, and are tried again at the next call).
    fn sync_locked(
        &self,
        kernel_lists: &mut KernelLists,
        allow: &[Cidr],
        deny: &[Cidr],
        runtime: &[(Cidr, ListKind)],
    ) {
        let synced = kernel_lists.sync(&mut self.program(), allow, deny, runtime);
        match synced {
            Ok(Some(synced)) => self.lists_synced(synced),
            Ok(None) => {}
            Err(err) => {
                self.metrics.errors.inc();
                tracing::warn!(%err, "XDP mode: bringing the kernel's allow lists in step");
            }
        }
    }

    /// Says what a sync did: the gauges, and a line when entries are (or are no longer) left
    /// out.
    fn lists_synced(&self, synced: Synced) {
        tracing::debug!(
            put = synced.put,
            taken = synced.taken,
            held = synced.held,
            "XDP mode: allow lists brought into the kernel"
        );
        let held = i64::try_from(synced.held).unwrap_or(i64::MAX);
        let left_out = synced.left_out[0] + synced.left_out[1];
        let before = self.metrics.allow_left_out.get();
        self.metrics.allow_entries.set(held);
        self.metrics
            .allow_left_out
            .set(i64::try_from(left_out).unwrap_or(i64::MAX));
        if left_out > 0 && i64::try_from(left_out).ok() != Some(before) {
            tracing::warn!(
                ipv4 = synced.left_out[0],
                ipv6 = synced.left_out[1],
                max = ALLOW_ENTRIES,
                "XDP mode: the allow lists need more kernel entries than a family's trie holds: \
                 that family is counted at the driver but never dropped there (the proxy still \
                 decides every attempt it sees)"
            );
        } else if left_out == 0 && before > 0 {
            tracing::info!("XDP mode: the allow lists fit the kernel again: drops resume");
        }
    }

    /// The rule `level`'s kernel limit comes from, if the level is counted.
    pub(crate) fn rule_name(&self, level: Level) -> Option<String> {
        self.names.lock().unwrap_or_else(|e| e.into_inner())[level.index() as usize].clone()
    }

    /// The ring of drop events, once (see `xdp::events::follow`).
    pub(crate) fn take_events(&self) -> Option<RingBuf<MapData>> {
        let events = self.events.lock().unwrap_or_else(|e| e.into_inner()).take();
        events.map(|Events(ring)| ring)
    }

    /// Clears the slice the kernel counts in during window `index + 1`, during window
    /// `index`.
    ///
    /// Race-free: during window `k` the program adds only to slice `k % 3` and reads slice
    /// `(k - 1) % 3`; this clears slice `(k + 1) % 3`, which no frame touches until window
    /// `k + 1`. Both sides tell windows by the same clock (`CLOCK_MONOTONIC_COARSE`, see
    /// [`kernel_tick`]), and this looks at it before every chunk of 64 blocks (one run of the
    /// clearing program, `proxy/bpf/clear.h`: 10,880 cells in one syscall), stopping once
    /// less than a quarter of window `k` is left: a chunk's writes (tens of microseconds) end
    /// long before window `k + 1` begins, so a zero written here never meets an increment.
    /// The cells a stopped clear did not reach keep counts of window `k - 2`: the kernel
    /// overestimates there during window `k + 1` (it errs towards dropping, never towards
    /// passing a source over its limit). Should this thread stall for a quarter window
    /// inside one chunk, the clock read after it says so (`Cleared::Late`, counted).
    ///
    /// # Errors
    /// The kernel's refusal of a run of the clearing program.
    pub(crate) fn clear_for(&self, index: u64) -> Result<Cleared, XdpError> {
        let slice = layout::slice_to_clear(index);
        let next_window = (index + 1).saturating_mul(self.window);
        let stop_at = next_window - self.window / 4;
        // A slice's cells are a run in each page-sized block (`layout::slice_cells`).
        let blocks = layout::blocks(self.width);
        let mut first = 0;
        while first < blocks {
            if kernel_tick() >= stop_at {
                return Ok(Cleared::Stopped);
            }
            let chunk = CHUNK_BLOCKS.min(blocks - first);
            self.program().clear_blocks(slice, first, chunk)?;
            first += chunk;
        }
        Ok(if kernel_tick() >= next_window {
            Cleared::Late
        } else {
            Cleared::Done
        })
    }

    /// The kernel's estimate of `addr` at every level of its family with a limit.
    ///
    /// # Errors
    /// The kernel's refusal of a lookup.
    pub(crate) fn estimates(&self, addr: IpAddr) -> Result<Vec<KernelEstimate>, XdpError> {
        let rules = self.rules();
        let at = layout::position(kernel_tick(), self.window);
        let program = self.program();
        let mut found = Vec::new();
        for (level, limit) in Level::ALL.into_iter().zip(rules.limits) {
            let Some(h) = layout::hash(self.seed, level, addr) else {
                continue;
            };
            if limit == 0 {
                continue;
            }
            let least = |slice: u32| -> Result<u64, XdpError> {
                let mut least = u64::MAX;
                for index in layout::cells(h, slice, self.width) {
                    least = least.min(u64::from(program.cell(index)?));
                }
                Ok(least)
            };
            let current = least(at.current)?;
            let previous = least(at.previous)?;
            found.push(KernelEstimate {
                level,
                estimate: layout::estimate(current, previous, at, self.window),
                limit,
            });
        }
        Ok(found)
    }

    /// The program's counters, summed over CPUs.
    ///
    /// # Errors
    /// The kernel's refusal of the lookup.
    pub(crate) fn counters(&self) -> Result<Counters, XdpError> {
        self.program().counters()
    }

    /// Reads the kernel's counters into the metrics.
    pub(crate) fn refresh_metrics(&self) {
        match self.counters() {
            Ok(counters) => self.metrics.observe(counters),
            Err(_) => {
                self.metrics.errors.inc();
            }
        }
    }

    /// Detaches the program from every interface; the names detached.
    ///
    /// # Errors
    /// The first refusal (the rest are detached all the same; all are when the attachment
    /// is dropped).
    pub(crate) fn detach(&self) -> Result<Vec<String>, XdpError> {
        self.metrics.active.set(0);
        self.program().detach()
    }

    /// The program, for tests that read and write its cells.
    #[cfg(test)]
    pub(crate) fn with_program<T>(&self, f: impl FnOnce(&mut Program) -> T) -> T {
        f(&mut self.program())
    }

    /// The window's length in ticks and the sketch's width.
    #[cfg(test)]
    pub(crate) fn shape(&self) -> (u64, u32) {
        (self.window, self.width)
    }

    /// The ports the program counts attempts to.
    pub(crate) fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// The XDP mode's metrics.
    pub(crate) fn metrics(&self) -> &XdpMetrics {
        &self.metrics
    }

    /// The window's length in ticks.
    fn window(&self) -> u64 {
        self.window
    }
}

/// Clears the slice after next once per window, until `stopped` (see
/// [`Attachment::clear_for`]); each clear runs on a blocking thread (a syscall per chunk of
/// 64 blocks).
pub(crate) async fn rotate(attachment: Arc<Attachment>, mut stopped: watch::Receiver<bool>) {
    let mut cleared = None;
    loop {
        let at = layout::position(kernel_tick(), attachment.window());
        if cleared != Some(at.index) {
            cleared = Some(at.index);
            let clearing = Arc::clone(&attachment);
            let outcome = tokio::task::spawn_blocking(move || clearing.clear_for(at.index)).await;
            match outcome {
                Ok(Ok(how)) => {
                    if how != Cleared::Done {
                        tracing::warn!(
                            result = ?how,
                            "XDP mode: a slice of the kernel's sketch was not cleared in time \
                             (the kernel overestimates there for one window)"
                        );
                    }
                    attachment.metrics.cleared(how);
                }
                Ok(Err(err)) => {
                    attachment.metrics.errors.inc();
                    tracing::warn!(%err, "XDP mode: clearing a slice of the kernel's sketch");
                }
                Err(_) => return,
            }
            continue;
        }
        // Until just past the next window's start (the coarse clock ticks every jiffy).
        let wait = Duration::from_nanos(at.remaining << TICK_SHIFT) + Duration::from_millis(5);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
    }
}
