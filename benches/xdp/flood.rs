//! The spoofed floods: every frame a new source, built in memory for the user-space path and
//! written into the frame by the sender program for the kernel paths, by the same formula.

use std::net::Ipv6Addr;

/// The receiving interface's MAC address, which every frame is sent to (the stack drops a
/// frame for another host before netfilter sees it).
pub(crate) const RECEIVER_MAC: &str = "02:00:00:00:00:01";
/// The receiving interface's addresses (frames to another address would be routed, not
/// delivered).
pub(crate) const RECEIVER_V4: &str = "10.9.0.1";
pub(crate) const RECEIVER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
/// The /64 the IPv6 flood rotates in.
pub(crate) const ROTATED_64: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, 0);
/// The UDP port every datagram goes to (the proxy's listener in the nftables ruleset).
pub(crate) const PORT: u16 = 9;

/// Odd multipliers: `i` times one of them is a bijection, so no source repeats.
const MIX64: u64 = 0x9E37_79B9_7F4A_7C15;
const MIX32: u32 = 2_654_435_761;

/// A flood.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flood {
    /// IPv6 datagrams, frame `i` from the host `i * MIX64` of one /64: the /64's aggregate
    /// crosses its limit, no /128 does.
    Rotation64,
    /// IPv4 datagrams, frame `i` from `11.0.0.0 + (i * MIX32 mod 2^24)`: random sources over
    /// 65,536 /24s, none of them over a limit (what no per-source limit contains: the cost of
    /// counting cold keys).
    RandomV4,
}

impl Flood {
    pub(crate) const ALL: [Flood; 2] = [Flood::Rotation64, Flood::RandomV4];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Flood::Rotation64 => "IPv6, a /64 rotation",
            Flood::RandomV4 => "IPv4, random sources",
        }
    }

    /// The sender's `-D` for this flood.
    pub(crate) fn define(self) -> &'static str {
        match self {
            Flood::Rotation64 => "-DV6",
            Flood::RandomV4 => "-DV4",
        }
    }

    /// Frame `i` of the flood: Ethernet, IP, an 8-byte UDP header and no payload.
    pub(crate) fn frame(self, i: u64) -> Vec<u8> {
        let mut frame = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        match self {
            Flood::RandomV4 => {
                frame.extend_from_slice(&[0x08, 0x00]);
                // As the sender: the low 32 bits of i, times MIX32.
                let host = (i as u32).wrapping_mul(MIX32);
                let mut ip = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0];
                ip.extend_from_slice(&[11, (host >> 16) as u8, (host >> 8) as u8, host as u8]);
                ip.extend_from_slice(&[10, 9, 0, 1]);
                let sum = checksum(&ip);
                ip[10..12].copy_from_slice(&sum.to_be_bytes());
                frame.extend_from_slice(&ip);
            }
            Flood::Rotation64 => {
                frame.extend_from_slice(&[0x86, 0xdd]);
                frame.extend_from_slice(&[0x60, 0, 0, 0, 0, 8, 17, 64]);
                frame.extend_from_slice(&ROTATED_64.octets()[..8]);
                // As the sender: a u64 stored in the CPU's (little-endian) order.
                frame.extend_from_slice(&i.wrapping_mul(MIX64).to_le_bytes());
                frame.extend_from_slice(&RECEIVER_V6.octets());
            }
        }
        frame.extend_from_slice(&[0x30, 0x39]);
        frame.extend_from_slice(&PORT.to_be_bytes());
        frame.extend_from_slice(&[0, 8, 0, 0]);
        frame
    }
}

/// The IPv4 header checksum (RFC 1071) of `header`, its checksum field zero.
fn checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], pair[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The sender: an XDP program that `BPF_PROG_TEST_RUN` runs in live-frames mode, one run per
/// frame. Each run writes the next source into its frame (`sent` counts the runs: frame `i`
/// gets source `i`, as [`Flood::frame`] builds it; -DV4 fixes the IPv4 header checksum too)
/// and redirects the frame out of the interface of index IFINDEX, whose veth peer receives
/// it. Built with -g: the map is described in BTF.
pub(crate) const SENDER: &str = r#"
#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name
typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;
struct xdp_md { u32 data; u32 data_end; };
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_redirect)(u32 ifindex, u64 flags) = (void *)23;
struct {
	__uint(type, 2);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} sent SEC(".maps");
SEC("xdp") int send(struct xdp_md *ctx)
{
	u8 *data = (void *)(long)ctx->data;
	u8 *end = (void *)(long)ctx->data_end;
	u32 zero = 0;
	u64 *next = bpf_map_lookup_elem(&sent, &zero);
	if (!next)
		return 1;
	u64 i = *next;
	*next = i + 1;
	u8 *ip = data + 14;
#ifdef V6
	if (ip + 40 > end)
		return 1;
	*(u64 *)(ip + 16) = i * 0x9E3779B97F4A7C15ULL;
#else
	if (ip + 20 > end)
		return 1;
	u32 host = (u32)i * 2654435761u;
	ip[13] = host >> 16;
	ip[14] = host >> 8;
	ip[15] = host;
	ip[10] = 0;
	ip[11] = 0;
	u32 sum = 0;
#pragma unroll
	for (int k = 0; k < 20; k += 2)
		sum += ((u32)ip[k] << 8) | ip[k + 1];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = ~sum;
	ip[10] = sum >> 8;
	ip[11] = sum;
#endif
	return bpf_redirect(IFINDEX, 0);
}
char LICENSE[] SEC("license") = "GPL";
"#;

/// What the receiving interface runs on the nftables path: nothing but a pass, so that the
/// veth takes redirected frames (a veth receives them only with an XDP program or GRO on).
pub(crate) const PASS: &str = r#"
#define SEC(name) __attribute__((section(name), used))
SEC("xdp") int pass(void *ctx) { return 2; }
char LICENSE[] SEC("license") = "GPL";
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_source_repeats_and_the_checksum_holds() {
        let a = Flood::RandomV4.frame(1);
        let b = Flood::RandomV4.frame(2);
        assert_ne!(a[26..30], b[26..30]);
        assert_eq!(checksum(&a[14..34]), 0);
        // 45 00 00 1c 00 00 00 00 40 11 .. .. 0b 00 00 00 0a 09 00 01, by hand: !0x9a37.
        assert_eq!(Flood::RandomV4.frame(0)[24..26], [0x65, 0xc8]);
        assert_eq!(a[26], 11);
        let c = Flood::Rotation64.frame(1);
        assert_eq!(c[22..30], ROTATED_64.octets()[..8]);
        assert_ne!(c[30..38], Flood::Rotation64.frame(2)[30..38]);
    }
}
