//! Frame parsing: addresses, protocol and ports from every supported header layout, every cut
//! of a valid frame refused or read (never a panic), and arbitrary bytes fuzzed through the
//! parser, alone and behind valid Ethernet, VLAN and IP headers.

use std::error::Error;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{
    ArpHardwareId, ArpOperation, ArpPacket, EtherType, Ethernet2Header, IpAuthHeader, IpFragOffset,
    IpHeaders, IpNumber, Ipv4Extensions, Ipv4Header, Ipv4Options, Ipv6Extensions,
    Ipv6FragmentHeader, Ipv6Header, Ipv6RawExtHeader, PacketBuilder, PacketBuilderStep, TcpHeader,
    UdpHeader, VlanId,
};
use proptest::collection::vec;
use proptest::prelude::*;
use tollgate_filter::{Malformed, PacketInfo, Protocol, Source, parse_frame};

type TestResult = Result<(), Box<dyn Error>>;

const SRC4: [u8; 4] = [192, 0, 2, 1];
const DST4: [u8; 4] = [198, 51, 100, 2];
const SRC6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const DST6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const PAYLOAD: &[u8] = b"tollgate";

/// Offsets in an untagged frame.
const ETH: usize = Ethernet2Header::LEN;
const IPV4_END: usize = ETH + 20;
const IPV6_END: usize = ETH + 40;

fn eth() -> PacketBuilderStep<Ethernet2Header> {
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
}

fn udp_frame(step: PacketBuilderStep<UdpHeader>) -> Result<Vec<u8>, Box<dyn Error>> {
    let mut frame = Vec::new();
    step.write(&mut frame, PAYLOAD)?;
    Ok(frame)
}

fn tcp_frame(step: PacketBuilderStep<TcpHeader>) -> Result<Vec<u8>, Box<dyn Error>> {
    let mut frame = Vec::new();
    step.write(&mut frame, PAYLOAD)?;
    Ok(frame)
}

fn v4(source: [u8; 4], destination: [u8; 4]) -> (Source, IpAddr) {
    (
        Source::from(Ipv4Addr::from(source)),
        IpAddr::V4(Ipv4Addr::from(destination)),
    )
}

fn v6(source: [u8; 16], destination: [u8; 16]) -> (Source, IpAddr) {
    (
        Source::new(IpAddr::V6(Ipv6Addr::from(source))),
        IpAddr::V6(Ipv6Addr::from(destination)),
    )
}

fn info(
    (source, destination): (Source, IpAddr),
    protocol: Protocol,
    ports: Option<(u16, u16)>,
    frame_len: usize,
) -> PacketInfo {
    PacketInfo {
        source,
        destination,
        protocol,
        source_port: ports.map(|p| p.0),
        destination_port: ports.map(|p| p.1),
        frame_len,
    }
}

fn ipv4_with(options: &[u8], exts: Ipv4Extensions) -> Result<IpHeaders, Box<dyn Error>> {
    let mut header = Ipv4Header::new(0, 64, IpNumber::UDP, SRC4, DST4)?;
    header.options = Ipv4Options::try_from(options)?;
    Ok(IpHeaders::Ipv4(header, exts))
}

fn ipv6_with(exts: Ipv6Extensions) -> IpHeaders {
    IpHeaders::Ipv6(
        Ipv6Header {
            hop_limit: 64,
            source: SRC6,
            destination: DST6,
            ..Ipv6Header::default()
        },
        exts,
    )
}

/// A hop-by-hop (8 bytes) and a destination options header (16 bytes).
fn hop_by_hop_and_destination_options() -> Result<Ipv6Extensions, Box<dyn Error>> {
    Ok(Ipv6Extensions {
        // A Pad1 option and a PadN option of 3 bytes: 6 bytes of options.
        hop_by_hop_options: Some(Ipv6RawExtHeader::new_raw(
            IpNumber::TCP,
            &[0, 1, 3, 0, 0, 0],
        )?),
        destination_options: Some(Ipv6RawExtHeader::new_raw(
            IpNumber::TCP,
            &[1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        )?),
        ..Ipv6Extensions::default()
    })
}

fn fragment(offset: u16, more: bool) -> Result<Ipv6Extensions, Box<dyn Error>> {
    Ok(Ipv6Extensions {
        fragment: Some(Ipv6FragmentHeader::new(
            IpNumber::UDP,
            IpFragOffset::try_new(offset)?,
            more,
            0x1234,
        )),
        ..Ipv6Extensions::default()
    })
}

fn auth() -> Result<IpAuthHeader, Box<dyn Error>> {
    // 12 bytes of fixed fields and a 12-byte ICV.
    Ok(IpAuthHeader::new(IpNumber::UDP, 0x100, 1, &[0xaa; 12])?)
}

fn vlan(id: u16) -> Result<VlanId, Box<dyn Error>> {
    Ok(VlanId::try_new(id)?)
}

/// A valid frame, where its IP headers end, where its transport header ends, and what it says.
struct Case {
    name: &'static str,
    frame: Vec<u8>,
    ip_end: usize,
    transport_end: usize,
    addresses: (Source, IpAddr),
    protocol: Protocol,
    ports: (u16, u16),
}

fn cases() -> Result<Vec<Case>, Box<dyn Error>> {
    Ok(vec![
        Case {
            name: "IPv4/TCP",
            frame: tcp_frame(eth().ipv4(SRC4, DST4, 64).tcp(40000, 443, 7, 1024))?,
            ip_end: IPV4_END,
            transport_end: IPV4_END + 20,
            addresses: v4(SRC4, DST4),
            protocol: Protocol::Tcp,
            ports: (40000, 443),
        },
        Case {
            name: "IPv4/UDP",
            frame: udp_frame(eth().ipv4(SRC4, DST4, 64).udp(5353, 53))?,
            ip_end: IPV4_END,
            transport_end: IPV4_END + 8,
            addresses: v4(SRC4, DST4),
            protocol: Protocol::Udp,
            ports: (5353, 53),
        },
        Case {
            name: "IPv6/TCP",
            frame: tcp_frame(eth().ipv6(SRC6, DST6, 64).tcp(40001, 80, 7, 1024))?,
            ip_end: IPV6_END,
            transport_end: IPV6_END + 20,
            addresses: v6(SRC6, DST6),
            protocol: Protocol::Tcp,
            ports: (40001, 80),
        },
        Case {
            name: "IPv6/UDP",
            frame: udp_frame(eth().ipv6(SRC6, DST6, 64).udp(4500, 500))?,
            ip_end: IPV6_END,
            transport_end: IPV6_END + 8,
            addresses: v6(SRC6, DST6),
            protocol: Protocol::Udp,
            ports: (4500, 500),
        },
        Case {
            name: "VLAN/IPv4/UDP",
            frame: udp_frame(eth().single_vlan(vlan(42)?).ipv4(SRC4, DST4, 64).udp(1, 2))?,
            ip_end: IPV4_END + 4,
            transport_end: IPV4_END + 4 + 8,
            addresses: v4(SRC4, DST4),
            protocol: Protocol::Udp,
            ports: (1, 2),
        },
        Case {
            name: "double VLAN/IPv6/TCP",
            frame: tcp_frame(
                eth()
                    .double_vlan(vlan(100)?, vlan(200)?)
                    .ipv6(SRC6, DST6, 64)
                    .tcp(3, 4, 7, 1024),
            )?,
            ip_end: IPV6_END + 8,
            transport_end: IPV6_END + 8 + 20,
            addresses: v6(SRC6, DST6),
            protocol: Protocol::Tcp,
            ports: (3, 4),
        },
        Case {
            name: "IPv4 with 8 bytes of options/UDP",
            // Record route with room for one address, then end of options and padding.
            frame: udp_frame(
                eth()
                    .ip(ipv4_with(
                        &[7, 7, 4, 0, 0, 0, 0, 0],
                        Ipv4Extensions::default(),
                    )?)
                    .udp(6, 7),
            )?,
            ip_end: IPV4_END + 8,
            transport_end: IPV4_END + 8 + 8,
            addresses: v4(SRC4, DST4),
            protocol: Protocol::Udp,
            ports: (6, 7),
        },
        Case {
            name: "IPv4/AH/UDP",
            frame: udp_frame(
                eth()
                    .ip(ipv4_with(
                        &[],
                        Ipv4Extensions {
                            auth: Some(auth()?),
                        },
                    )?)
                    .udp(8, 9),
            )?,
            ip_end: IPV4_END + 24,
            transport_end: IPV4_END + 24 + 8,
            addresses: v4(SRC4, DST4),
            protocol: Protocol::Udp,
            ports: (8, 9),
        },
        Case {
            name: "IPv6/hop-by-hop/destination options/TCP",
            frame: tcp_frame(
                eth()
                    .ip(ipv6_with(hop_by_hop_and_destination_options()?))
                    .tcp(10, 11, 7, 1024),
            )?,
            ip_end: IPV6_END + 8 + 16,
            transport_end: IPV6_END + 8 + 16 + 20,
            addresses: v6(SRC6, DST6),
            protocol: Protocol::Tcp,
            ports: (10, 11),
        },
        Case {
            name: "IPv6/AH/UDP",
            frame: udp_frame(
                eth()
                    .ip(ipv6_with(Ipv6Extensions {
                        auth: Some(auth()?),
                        ..Ipv6Extensions::default()
                    }))
                    .udp(12, 13),
            )?,
            ip_end: IPV6_END + 24,
            transport_end: IPV6_END + 24 + 8,
            addresses: v6(SRC6, DST6),
            protocol: Protocol::Udp,
            ports: (12, 13),
        },
        Case {
            name: "IPv6 first fragment/UDP",
            frame: udp_frame(eth().ip(ipv6_with(fragment(0, true)?)).udp(14, 15))?,
            ip_end: IPV6_END + 8,
            transport_end: IPV6_END + 8 + 8,
            addresses: v6(SRC6, DST6),
            protocol: Protocol::Udp,
            ports: (14, 15),
        },
    ])
}

#[test]
fn every_layout_gives_addresses_protocol_and_ports() -> TestResult {
    for case in cases()? {
        assert_eq!(
            parse_frame(&case.frame),
            Ok(info(
                case.addresses,
                case.protocol,
                Some(case.ports),
                case.frame.len()
            )),
            "{}",
            case.name
        );
    }
    Ok(())
}

#[test]
fn every_cut_of_a_valid_frame_is_refused_before_the_ip_headers_end_and_read_after() -> TestResult {
    for case in cases()? {
        assert_eq!(
            case.frame.len(),
            case.transport_end + PAYLOAD.len(),
            "{}",
            case.name
        );
        for len in 0..=case.frame.len() {
            let result = parse_frame(&case.frame[..len]);
            if len < case.ip_end {
                assert!(
                    matches!(result, Err(Malformed::Truncated { .. })),
                    "{} cut to {len}: {result:?}",
                    case.name
                );
            } else {
                let ports = (len >= case.transport_end).then_some(case.ports);
                assert_eq!(
                    result,
                    Ok(info(case.addresses, case.protocol, ports, len)),
                    "{} cut to {len}",
                    case.name
                );
            }
        }
    }
    Ok(())
}

#[test]
fn truncation_names_the_layer_cut() -> TestResult {
    let cases = cases()?;
    let layer = |name: &str, len: usize| {
        let case = cases.iter().find(|c| c.name == name);
        case.map(|c| parse_frame(&c.frame[..len]))
    };
    let cut = |layer: &'static str| Some(Err(Malformed::Truncated { layer }));
    assert_eq!(layer("IPv4/UDP", ETH - 1), cut("Ethernet"));
    assert_eq!(layer("VLAN/IPv4/UDP", ETH + 3), cut("VLAN"));
    assert_eq!(layer("IPv4/UDP", IPV4_END - 1), cut("IPv4"));
    assert_eq!(
        layer("IPv4 with 8 bytes of options/UDP", IPV4_END + 4),
        cut("IPv4")
    );
    assert_eq!(
        layer("IPv4/AH/UDP", IPV4_END + 23),
        cut("IP authentication")
    );
    assert_eq!(layer("IPv6/UDP", IPV6_END - 1), cut("IPv6"));
    assert_eq!(
        layer("IPv6/hop-by-hop/destination options/TCP", IPV6_END + 20),
        cut("IPv6 extension")
    );
    assert_eq!(
        layer("IPv6 first fragment/UDP", IPV6_END + 7),
        cut("IPv6 extension")
    );
    assert_eq!(
        layer("IPv6/AH/UDP", IPV6_END + 13),
        cut("IP authentication")
    );
    Ok(())
}

#[test]
fn three_vlan_tags_are_read_too() -> TestResult {
    let frame = udp_frame(
        eth()
            .double_vlan(vlan(100)?, vlan(200)?)
            .ipv4(SRC4, DST4, 64)
            .udp(1, 2),
    )?;
    // Insert an 802.1Q tag (VLAN 5) after the outer tag's TCI.
    let frame = [
        &frame[..ETH + 2],
        &[0x81, 0x00, 0x00, 0x05],
        &frame[ETH + 2..],
    ]
    .concat();
    assert_eq!(
        parse_frame(&frame),
        Ok(info(
            v4(SRC4, DST4),
            Protocol::Udp,
            Some((1, 2)),
            frame.len()
        ))
    );
    Ok(())
}

#[test]
fn non_ip_frames_report_their_innermost_ether_type() -> TestResult {
    let arp = ArpPacket::new(
        ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        ArpOperation::REQUEST,
        &[2, 0, 0, 0, 0, 1],
        &SRC4,
        &[0; 6],
        &DST4,
    )?;
    let mut frame = Vec::new();
    eth().arp(arp.clone()).write(&mut frame)?;
    assert_eq!(
        parse_frame(&frame),
        Err(Malformed::NotIp { ether_type: 0x0806 })
    );

    let mut tagged = Vec::new();
    eth().single_vlan(vlan(7)?).arp(arp).write(&mut tagged)?;
    assert_eq!(
        parse_frame(&tagged),
        Err(Malformed::NotIp { ether_type: 0x0806 })
    );

    // An ARP header cut short is still not IP, rather than a truncated ARP.
    assert_eq!(
        parse_frame(&frame[..ETH + 3]),
        Err(Malformed::NotIp { ether_type: 0x0806 })
    );

    // An 802.3 frame carries a length where the EtherType would be.
    let mut llc = frame.clone();
    llc[12..14].copy_from_slice(&46u16.to_be_bytes());
    assert_eq!(parse_frame(&llc), Err(Malformed::NotIp { ether_type: 46 }));
    Ok(())
}

#[test]
fn impossible_header_fields_are_invalid() -> TestResult {
    let udp4 = udp_frame(eth().ipv4(SRC4, DST4, 64).udp(1, 2))?;
    let udp6 = udp_frame(eth().ipv6(SRC6, DST6, 64).udp(1, 2))?;
    let invalid = |frame: &[u8]| match parse_frame(frame) {
        Err(Malformed::Invalid { layer, reason }) => Some((layer, reason)),
        _ => None,
    };

    let mut ihl_4 = udp4.clone();
    ihl_4[ETH] = 0x44;
    assert_eq!(
        invalid(&ihl_4),
        Some(("IPv4", "header length below 20 bytes"))
    );

    let mut short_total = udp4.clone();
    short_total[ETH + 2..ETH + 4].copy_from_slice(&19u16.to_be_bytes());
    assert_eq!(
        invalid(&short_total),
        Some(("IPv4", "total length shorter than the header"))
    );

    // The IP version must match the EtherType.
    let mut v6_as_v4 = udp6.clone();
    v6_as_v4[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    assert_eq!(invalid(&v6_as_v4), Some(("IPv4", "version is not 4")));
    let mut v4_as_v6 = udp4.clone();
    v4_as_v6.resize(IPV6_END, 0);
    v4_as_v6[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    assert_eq!(invalid(&v4_as_v6), Some(("IPv6", "version is not 6")));

    // A hop-by-hop header anywhere but first.
    let mut late_hop_by_hop = tcp_frame(
        eth()
            .ip(ipv6_with(hop_by_hop_and_destination_options()?))
            .tcp(1, 2, 7, 1024),
    )?;
    // The hop-by-hop header's next header: the destination options header's type, 60.
    assert_eq!(late_hop_by_hop[IPV6_END], 60);
    late_hop_by_hop[IPV6_END + 8] = 0;
    assert_eq!(
        invalid(&late_hop_by_hop),
        Some(("IPv6 extension", "hop-by-hop options not first"))
    );

    let mut empty_auth = udp_frame(
        eth()
            .ip(ipv4_with(
                &[],
                Ipv4Extensions {
                    auth: Some(auth()?),
                },
            )?)
            .udp(1, 2),
    )?;
    empty_auth[IPV4_END + 1] = 0;
    assert_eq!(
        invalid(&empty_auth),
        Some(("IP authentication", "payload length 0"))
    );
    Ok(())
}

#[test]
fn non_first_fragments_keep_their_protocol_but_have_no_ports() -> TestResult {
    let tcp4 = tcp_frame(eth().ipv4(SRC4, DST4, 64).tcp(1, 2, 7, 1024))?;
    let flags_and_offset = ETH + 6..ETH + 8;

    // More fragments, offset 0: the first fragment, which carries the TCP header.
    let mut first = tcp4.clone();
    first[flags_and_offset.clone()].copy_from_slice(&0x2000u16.to_be_bytes());
    assert_eq!(
        parse_frame(&first),
        Ok(info(
            v4(SRC4, DST4),
            Protocol::Tcp,
            Some((1, 2)),
            first.len()
        ))
    );

    // Offset 185 (1480 bytes): the bytes after the IPv4 header are data, even if they look
    // like a TCP header.
    let mut later = tcp4.clone();
    later[flags_and_offset].copy_from_slice(&185u16.to_be_bytes());
    assert_eq!(
        parse_frame(&later),
        Ok(info(v4(SRC4, DST4), Protocol::Tcp, None, later.len()))
    );

    // A later IPv4 fragment of an AH-protected datagram does not start with an AH header.
    let mut auth_later = tcp4.clone();
    auth_later[ETH + 6..ETH + 8].copy_from_slice(&185u16.to_be_bytes());
    auth_later[ETH + 9] = 51;
    auth_later.truncate(IPV4_END + 4);
    auth_later[ETH + 2..ETH + 4].copy_from_slice(&24u16.to_be_bytes());
    assert_eq!(
        parse_frame(&auth_later),
        Ok(info(
            v4(SRC4, DST4),
            Protocol::Other(51),
            None,
            auth_later.len()
        ))
    );

    let later6 = udp_frame(eth().ip(ipv6_with(fragment(185, false)?)).udp(1, 2))?;
    assert_eq!(
        parse_frame(&later6),
        Ok(info(v6(SRC6, DST6), Protocol::Udp, None, later6.len()))
    );
    // The next header of a later IPv6 fragment is not looked for after the fragment header.
    let mut later6_options = later6.clone();
    later6_options[IPV6_END] = 60;
    later6_options.truncate(IPV6_END + 8 + 2);
    later6_options[ETH + 4..ETH + 6].copy_from_slice(&10u16.to_be_bytes());
    assert_eq!(
        parse_frame(&later6_options),
        Ok(info(
            v6(SRC6, DST6),
            Protocol::Other(60),
            None,
            later6_options.len()
        ))
    );
    Ok(())
}

#[test]
fn bytes_past_the_ip_length_are_padding_not_headers() -> TestResult {
    // A UDP datagram shorter than Ethernet's 60-byte minimum, padded, then with an FCS.
    let udp = udp_frame(eth().ipv4(SRC4, DST4, 64).udp(1, 2))?;
    let mut padded = udp.clone();
    padded.resize(60, 0xee);
    padded.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(
        parse_frame(&padded),
        Ok(info(
            v4(SRC4, DST4),
            Protocol::Udp,
            Some((1, 2)),
            padded.len()
        ))
    );

    // An IPv4 total length of 20 says "no payload": the TCP header after it is not read.
    let mut tcp4 = tcp_frame(eth().ipv4(SRC4, DST4, 64).tcp(1, 2, 7, 1024))?;
    tcp4[ETH + 2..ETH + 4].copy_from_slice(&20u16.to_be_bytes());
    assert_eq!(
        parse_frame(&tcp4),
        Ok(info(v4(SRC4, DST4), Protocol::Tcp, None, tcp4.len()))
    );

    // The same for an IPv6 payload length of 8, shorter than a TCP header.
    let mut tcp6 = tcp_frame(eth().ipv6(SRC6, DST6, 64).tcp(1, 2, 7, 1024))?;
    tcp6[ETH + 4..ETH + 6].copy_from_slice(&8u16.to_be_bytes());
    assert_eq!(
        parse_frame(&tcp6),
        Ok(info(v6(SRC6, DST6), Protocol::Tcp, None, tcp6.len()))
    );

    // A payload length of 0 (a jumbogram) runs to the end of the frame.
    let mut jumbo = tcp_frame(eth().ipv6(SRC6, DST6, 64).tcp(1, 2, 7, 1024))?;
    jumbo[ETH + 4..ETH + 6].copy_from_slice(&0u16.to_be_bytes());
    assert_eq!(
        parse_frame(&jumbo),
        Ok(info(
            v6(SRC6, DST6),
            Protocol::Tcp,
            Some((1, 2)),
            jumbo.len()
        ))
    );
    Ok(())
}

#[test]
fn other_protocols_have_no_ports() -> TestResult {
    let mut icmp4 = Vec::new();
    eth()
        .ipv4(SRC4, DST4, 64)
        .icmpv4_echo_request(1, 1)
        .write(&mut icmp4, PAYLOAD)?;
    assert_eq!(
        parse_frame(&icmp4),
        Ok(info(v4(SRC4, DST4), Protocol::Other(1), None, icmp4.len()))
    );

    let mut icmp6 = Vec::new();
    eth()
        .ipv6(SRC6, DST6, 64)
        .icmpv6_echo_request(1, 1)
        .write(&mut icmp6, PAYLOAD)?;
    assert_eq!(
        parse_frame(&icmp6),
        Ok(info(v6(SRC6, DST6), Protocol::Other(58), None, icmp6.len()))
    );

    // A TCP header whose data offset points inside itself is no TCP header.
    let mut bad_tcp = tcp_frame(eth().ipv4(SRC4, DST4, 64).tcp(1, 2, 7, 1024))?;
    bad_tcp[IPV4_END + 12] = 0x40;
    assert_eq!(
        parse_frame(&bad_tcp),
        Ok(info(v4(SRC4, DST4), Protocol::Tcp, None, bad_tcp.len()))
    );
    Ok(())
}

#[test]
fn ipv4_mapped_sources_fold_and_destinations_stay() -> TestResult {
    let mapped = Ipv4Addr::from(SRC4).to_ipv6_mapped().octets();
    let frame = udp_frame(eth().ipv6(mapped, DST6, 64).udp(1, 2))?;
    let parsed = parse_frame(&frame)?;
    assert_eq!(parsed.source.addr(), IpAddr::V4(Ipv4Addr::from(SRC4)));
    assert_eq!(parsed.destination, IpAddr::V6(Ipv6Addr::from(DST6)));
    Ok(())
}

#[test]
fn protocol_numbers_round_trip_with_one_spelling_each() {
    for number in 0..=u8::MAX {
        let protocol = Protocol::from_number(number);
        assert_eq!(protocol.number(), number);
        assert_eq!(
            matches!(protocol, Protocol::Other(_)),
            number != 6 && number != 17
        );
    }
}

#[test]
fn malformed_reads_as_an_error() {
    let errors: [(Malformed, &str); 3] = [
        (
            Malformed::Truncated { layer: "IPv4" },
            "frame ends inside its IPv4 header",
        ),
        (
            Malformed::NotIp { ether_type: 0x0806 },
            "not an IP frame (EtherType 0x0806)",
        ),
        (
            Malformed::Invalid {
                layer: "IPv4",
                reason: "version is not 4",
            },
            "invalid IPv4 header: version is not 4",
        ),
    ];
    for (error, text) in errors {
        let error: Box<dyn Error> = Box::new(error);
        assert_eq!(error.to_string(), text);
        assert!(error.source().is_none());
    }
}

/// What holds of every result: the length is the input's, ports come in pairs and only with
/// TCP or UDP, and protocols have one spelling.
fn check(frame: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(parsed) = parse_frame(frame) {
        prop_assert_eq!(parsed.frame_len, frame.len());
        prop_assert_eq!(
            parsed.source_port.is_some(),
            parsed.destination_port.is_some()
        );
        if parsed.source_port.is_some() {
            prop_assert!(matches!(parsed.protocol, Protocol::Tcp | Protocol::Udp));
        }
        prop_assert_eq!(
            Protocol::from_number(parsed.protocol.number()),
            parsed.protocol
        );
    }
    Ok(())
}

/// Ethernet with 0 to 3 tags of the three tag types.
fn link(ether_type: u16) -> impl Strategy<Value = Vec<u8>> {
    vec(
        (
            prop_oneof![Just(0x8100u16), Just(0x88a8), Just(0x9100)],
            any::<u16>(),
        ),
        0..=3,
    )
    .prop_map(move |tags| {
        let mut frame = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        for (tpid, tci) in tags {
            frame.extend_from_slice(&tpid.to_be_bytes());
            frame.extend_from_slice(&tci.to_be_bytes());
        }
        frame.extend_from_slice(&ether_type.to_be_bytes());
        frame
    })
}

/// Protocol numbers the parser follows, often, and any other, sometimes.
fn next_header() -> impl Strategy<Value = u8> {
    prop_oneof![
        3 => prop::sample::select(vec![0u8, 6, 17, 43, 44, 51, 59, 60]),
        1 => any::<u8>(),
    ]
}

/// A valid IPv4 header with any IHL, lengths, fragment fields and options.
fn ipv4_header() -> impl Strategy<Value = Vec<u8>> {
    (
        5u8..=15,
        prop_oneof![0u16..100, any::<u16>()],
        prop_oneof![Just(0u16), Just(0x2000), Just(0x4000), any::<u16>()],
        next_header(),
        any::<[u8; 8]>(),
        vec(any::<u8>(), 40),
    )
        .prop_map(|(ihl, total_len, fragment, protocol, addresses, options)| {
            let mut header = vec![0x40 | ihl, 0];
            header.extend_from_slice(&total_len.to_be_bytes());
            header.extend_from_slice(&[0, 1]);
            header.extend_from_slice(&fragment.to_be_bytes());
            header.extend_from_slice(&[64, protocol, 0, 0]);
            header.extend_from_slice(&addresses);
            header.extend_from_slice(&options[..usize::from(ihl - 5) * 4]);
            header
        })
}

/// A valid IPv6 header followed by a chain of plausible extension headers, each of the size
/// its length field claims, linked by their next-header fields.
fn ipv6_headers() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<u16>(),
        any::<[u8; 32]>(),
        vec(
            (
                prop::sample::select(vec![0u8, 43, 44, 51, 60]),
                0u8..=2,
                any::<u8>(),
            ),
            0..=4,
        ),
        next_header(),
    )
        .prop_map(|(payload_len, addresses, exts, last)| {
            let kinds: Vec<u8> = exts.iter().map(|e| e.0).chain([last]).collect();
            let mut headers = vec![0x60, 0, 0, 0];
            headers.extend_from_slice(&payload_len.to_be_bytes());
            headers.extend_from_slice(&[kinds[0], 64]);
            headers.extend_from_slice(&addresses);
            for (i, &(kind, len, fill)) in exts.iter().enumerate() {
                let size = match kind {
                    44 => 8,
                    51 => (usize::from(len) + 2) * 4,
                    _ => (usize::from(len) + 1) * 8,
                };
                let start = headers.len();
                headers.resize(start + size, fill);
                headers[start] = kinds[i + 1];
                if kind != 44 {
                    headers[start + 1] = len;
                }
            }
            headers
        })
}

fn deep_frame() -> impl Strategy<Value = Vec<u8>> {
    let network = prop_oneof![
        (link(0x0800), ipv4_header()).prop_map(|(l, n)| [l, n].concat()),
        (link(0x86dd), ipv6_headers()).prop_map(|(l, n)| [l, n].concat()),
        // The EtherType and the version disagree.
        (link(0x0800), ipv6_headers()).prop_map(|(l, n)| [l, n].concat()),
        (link(0x86dd), ipv4_header()).prop_map(|(l, n)| [l, n].concat()),
    ];
    (
        network,
        vec(any::<u8>(), 0..200),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(headers, rest, cut)| {
            let frame = [headers, rest].concat();
            // Sometimes cut the frame anywhere, headers included.
            let len = if cut.index(4) == 0 {
                cut.index(frame.len() + 1)
            } else {
                frame.len()
            };
            frame[..len].to_vec()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn arbitrary_bytes_never_panic(frame in vec(any::<u8>(), 0..200)) {
        check(&frame)?;
    }

    #[test]
    fn arbitrary_bytes_behind_valid_headers_never_panic(frame in deep_frame()) {
        check(&frame)?;
    }
}
