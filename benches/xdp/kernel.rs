//! The kernel paths: a veth pair in this process's own network namespace (tg1 sends, tg0
//! receives), the programs built with clang, the XDP program and the proxy's nftables table.

use std::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use aya::maps::{Array, MapData, PerCpuArray};
use aya::programs::{TestRun, TestRunAttrs, TestRunOptions, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use tollgate::config::KernelConfig;
use tollgate::kernel::{Element, Ruleset, Table};

use crate::flood::{self, Flood, PASS, PORT, RECEIVER_MAC, RECEIVER_V4, RECEIVER_V6, SENDER};
use crate::{HOST_LIMIT, NET_LIMIT, Round, WINDOW, schedstat, thread_cpu};

/// The sketch: 8 MiB of map, 2,048 blocks of one page (`proxy/src/xdp/layout.rs`: 512
/// cells of 8 bytes a block, 85 columns of each row and slice).
const BLOCKS: u32 = 2048;
const ENTRIES: u32 = BLOCKS * 512;
const WIDTH: u32 = BLOCKS * 85;
/// The `rules` map's levels (bank 0): /32, /24, /128, /64, /48.
const LIMITS: [u32; 5] = [HOST_LIMIT, NET_LIMIT, HOST_LIMIT, NET_LIMIT, 0];
/// The nftables table.
const TABLE: &str = "tollgate_bench";
/// Frames a live-frames batch sends.
const BATCH: u32 = 64;

type Failure = Box<dyn Error>;

/// The veth pair and the programs.
pub(crate) struct Bed {
    tollgate: Vec<u8>,
    pass: Vec<u8>,
    /// One sender per flood, in [`Flood::ALL`]'s order.
    senders: Vec<Ebpf>,
    /// `ksoftirqd/0`'s schedstat file.
    softirq: Option<String>,
}

/// Runs `script` with sh; its output in the error if it fails.
fn sh(script: &str) -> Result<(), Failure> {
    let output = Command::new("sh").args(["-c", script]).output()?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{script}`: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
        .into())
    }
}

/// Compiles C `source` (a file) into an object with clang's BPF target and `defines`.
fn compile(source: &Path, defines: &[String], dir: &Path, name: &str) -> Result<Vec<u8>, Failure> {
    let object = dir.join(format!("{name}.o"));
    let clang = std::env::var("TOLLGATE_CLANG").unwrap_or_else(|_| "clang".to_owned());
    let output = Command::new(&clang)
        .args([
            "-target", "bpf", "-mcpu=v3", "-O2", "-g", "-Wall", "-Werror",
        ])
        .args(defines)
        .arg("-c")
        .arg(source)
        .arg("-o")
        .arg(&object)
        .output()
        .map_err(|e| format!("{clang} not found ({e}): `apt-get install clang`"))?;
    if !output.status.success() {
        return Err(format!(
            "{clang} {}: {}",
            source.display(),
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(std::fs::read(object)?)
}

/// The pid of `ksoftirqd/0`, from `/proc/*/comm`.
fn ksoftirqd() -> Option<String> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            (comm.trim() == "ksoftirqd/0").then(|| {
                entry
                    .path()
                    .join("schedstat")
                    .to_string_lossy()
                    .into_owned()
            })
        })
}

impl Bed {
    /// Makes the veth pair and builds the programs.
    ///
    /// # Errors
    /// What is missing: clang, nft, ip, or the permission.
    pub(crate) fn new() -> Result<Bed, Failure> {
        Command::new("nft")
            .arg("--version")
            .output()
            .map_err(|e| format!("nft not found ({e})"))?;
        // rp_filter off: the IPv4 flood's sources have no route back (a host's loose mode
        // would drop them before netfilter).
        sh(&format!(
            "ip link set lo up && ip link add tg0 type veth peer name tg1 \
             && ip link set tg0 address {RECEIVER_MAC} \
             && ip addr add {RECEIVER_V4}/24 dev tg0 && ip addr add {RECEIVER_V6}/64 dev tg0 nodad \
             && ip link set tg0 up && ip link set tg1 up \
             && for f in all default tg0; do echo 0 > /proc/sys/net/ipv4/conf/$f/rp_filter; done"
        ))?;
        // `ip -o link show tg1` begins with the index: "7: tg1@tg0: ...".
        let shown = Command::new("ip")
            .args(["-o", "link", "show", "tg1"])
            .output()?;
        let shown = String::from_utf8_lossy(&shown.stdout);
        let ifindex = shown
            .split(':')
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned();
        let dir = tempfile::tempdir()?;
        let write = |name: &str, text: &str| -> Result<std::path::PathBuf, Failure> {
            let path = dir.path().join(name);
            std::fs::write(&path, text)?;
            Ok(path)
        };
        let sender = write("sender.c", SENDER)?;
        let pass = write("pass.c", PASS)?;
        let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("../proxy/bpf/tollgate.bpf.c");
        let tollgate = compile(&program, &[], dir.path(), "tollgate")?;
        let pass = compile(&pass, &[], dir.path(), "pass")?;
        let mut senders = Vec::new();
        for flood in Flood::ALL {
            let defines = [format!("-DIFINDEX={ifindex}"), flood.define().to_owned()];
            let object = compile(&sender, &defines, dir.path(), "sender")?;
            let mut ebpf = Ebpf::load(&object)?;
            let send: &mut Xdp = ebpf.program_mut("send").ok_or("no send")?.try_into()?;
            send.load()?;
            senders.push(ebpf);
        }
        Ok(Bed {
            tollgate,
            pass,
            senders,
            softirq: ksoftirqd(),
        })
    }

    /// CPU time of this thread and ksoftirqd/0.
    fn cpu(&self) -> Duration {
        thread_cpu() + self.softirq.as_deref().map_or(Duration::ZERO, schedstat)
    }

    /// Sends `frames` frames of `flood` out of tg1: the wall and CPU time it took.
    fn send(&mut self, flood: Flood, frames: u64) -> Result<(Duration, Duration), Failure> {
        let index = Flood::ALL.iter().position(|&f| f == flood).unwrap_or(0);
        let template = flood.frame(0);
        let cpu = self.cpu();
        let sender = &mut self.senders[index];
        let mut sent: Array<&mut MapData, u64> =
            Array::try_from(sender.map_mut("sent").ok_or("no sent map")?)?;
        sent.set(0, 0, 0)?;
        let send: &Xdp = sender.program("send").ok_or("no send")?.try_into()?;
        let started = Instant::now();
        send.test_run(TestRunOptions {
            data_in: Some(&template),
            repeat: u32::try_from(frames)?,
            attrs: TestRunAttrs::new().xdp_live_frames(BATCH),
            ..TestRunOptions::new()
        })?;
        let wall = started.elapsed();
        Ok((wall, self.cpu().saturating_sub(cpu)))
    }

    /// The XDP path: a fresh program on tg0 with the policy's limits, `frames` frames.
    pub(crate) fn xdp(&mut self, flood: Flood, frames: u64) -> Result<Round, Failure> {
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("cells", ENTRIES)
            .load(&self.tollgate)?;
        let program: &mut Xdp = ebpf
            .program_mut("tollgate")
            .ok_or("no tollgate")?
            .try_into()?;
        program.load()?;
        let mut config: Array<MapData, [u8; 48]> =
            Array::try_from(ebpf.take_map("config").ok_or("no config map")?)?;
        // struct config in layout.h: seed, window (ticks of 1,024 ns), width, fixed_tick (0:
        // the program's clock), bank, lists (0: no allow tries to look up).
        let window = u64::try_from(WINDOW.as_nanos())? >> 10;
        let mut bytes = [0u8; 48];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip([
            0x0123_4567_89ab_cdef,
            window,
            u64::from(WIDTH),
            0,
            0,
            0,
        ]) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        config.set(0, bytes, 0)?;
        let mut rules: Array<MapData, [u32; 2]> =
            Array::try_from(ebpf.take_map("rules").ok_or("no rules map")?)?;
        for (level, limit) in (0..).zip(LIMITS) {
            rules.set(level, [limit, 0], 0)?;
        }
        let counters: PerCpuArray<MapData, u64> =
            PerCpuArray::try_from(ebpf.take_map("counters").ok_or("no counters map")?)?;
        let program: &mut Xdp = ebpf
            .program_mut("tollgate")
            .ok_or("no tollgate")?
            .try_into()?;
        let link = program.attach("tg0", XdpMode::Driver)?;
        let (wall, cpu) = self.send(flood, frames)?;
        let sum =
            |index: u32| -> Result<u64, Failure> { Ok(counters.get(&index, 0)?.iter().sum()) };
        let (passed, dropped) = (sum(0)?, sum(1)?);
        let program: &mut Xdp = ebpf
            .program_mut("tollgate")
            .ok_or("no tollgate")?
            .try_into()?;
        program.detach(link)?;
        Ok(Round {
            sent: frames,
            handled: passed + dropped,
            dropped,
            wall,
            cpu,
            // A fresh sketch and one /64: every frame passed came before the first drop.
            late: (flood == Flood::Rotation64 && dropped > 0)
                .then(|| passed as i64 - i64::from(NET_LIMIT)),
            load: None,
        })
    }

    /// The nftables path: the proxy's table guarding a UDP listener on port 9, the /64 in its
    /// set (for the IPv4 flood, nothing), `frames` frames.
    pub(crate) fn nftables(&mut self, flood: Flood, frames: u64) -> Result<Round, Failure> {
        let mut pass = Ebpf::load(&self.pass)?;
        let program: &mut Xdp = pass.program_mut("pass").ok_or("no pass")?.try_into()?;
        program.load()?;
        let link = program.attach("tg0", XdpMode::Driver)?;
        let config = KernelConfig {
            table: TABLE.to_owned(),
            max_elements: 1024,
            ..KernelConfig::default()
        };
        let listener: SocketAddr = (IpAddr::from([0, 0, 0, 0]), PORT).into();
        let table = Table::create(Ruleset::new(&config, [], [listener]))?;
        let load = if flood == Flood::Rotation64 {
            let element = Element {
                network: IpAddr::V6(flood::ROTATED_64),
                len: 64,
                timeout: Duration::from_secs(600),
                weight: 1.0,
            };
            let text = table.ruleset().add(&[element], false);
            let started = Instant::now();
            table.apply(&text)?;
            Some(started.elapsed())
        } else {
            None
        };
        let (refused_before, delivered_before) = (refused()?, delivered()?);
        let (wall, cpu) = self.send(flood, frames)?;
        let dropped = refused()? - refused_before;
        let handled = dropped + delivered()? - delivered_before;
        table.delete()?;
        let program: &mut Xdp = pass.program_mut("pass").ok_or("no pass")?.try_into()?;
        program.detach(link)?;
        Ok(Round {
            sent: frames,
            handled,
            dropped,
            wall,
            cpu,
            late: None,
            load,
        })
    }
}

/// Packets the table's rules refused (their counters).
fn refused() -> Result<u64, Failure> {
    let output = Command::new("nft")
        .args(["-j", "list", "chain", "inet", TABLE, "input"])
        .output()?;
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let mut packets = 0;
    for item in json["nftables"].as_array().into_iter().flatten() {
        for expr in item["rule"]["expr"].as_array().into_iter().flatten() {
            packets += expr["counter"]["packets"].as_u64().unwrap_or(0);
        }
    }
    Ok(packets)
}

/// Datagrams that reached UDP in this namespace, either family (delivered, to no port, or in
/// error): what got past the table.
fn delivered() -> Result<u64, Failure> {
    let snmp = std::fs::read_to_string("/proc/net/snmp")?;
    let mut lines = snmp.lines().filter(|line| line.starts_with("Udp:"));
    let (names, values) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    let wanted = ["InDatagrams", "NoPorts", "InErrors"];
    let mut total: u64 = names
        .split_whitespace()
        .zip(values.split_whitespace())
        .filter(|(name, _)| wanted.contains(name))
        .filter_map(|(_, value)| value.parse::<u64>().ok())
        .sum();
    let snmp6 = std::fs::read_to_string("/proc/net/snmp6")?;
    for line in snmp6.lines() {
        let mut fields = line.split_whitespace();
        let (Some(name), Some(value)) = (fields.next(), fields.next()) else {
            continue;
        };
        if wanted.iter().any(|w| name == format!("Udp6{w}")) {
            total += value.parse::<u64>().unwrap_or(0);
        }
    }
    Ok(total)
}
