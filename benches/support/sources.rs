//! Client source addresses on loopback: all of 127.0.0.0/8 is loopback on Linux, so a socket
//! bound to 127.x.y.z before it connects is a distinct client to the proxy.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use tokio::net::{TcpSocket, TcpStream};

/// Addresses [`source`] hands out per /16: 250 per /24, over 256 /24s.
pub const PER_16: u64 = 250 * 256;

/// Source address `i` of a rotation over `count` addresses of 127.`net`.0.0/16, from
/// 127.`net`.0.1: 250 per /24, so no address ends in .0 or .255.
///
/// # Examples
/// ```
/// use tollgate_benches::sources::source;
///
/// assert_eq!(source(1, 250, 10_000).to_string(), "127.1.1.1");
/// ```
#[must_use]
pub fn source(net: u8, i: u64, count: u64) -> IpAddr {
    let j = i % count.clamp(1, PER_16);
    // Both fit a byte: j < 64_000, so j / 250 < 256 and j % 250 + 1 <= 250.
    let third = u8::try_from(j / 250).unwrap_or(u8::MAX);
    let fourth = u8::try_from(j % 250 + 1).unwrap_or(u8::MAX);
    IpAddr::V4(Ipv4Addr::new(127, net, third, fourth))
}

/// A TCP connection from `source` (any port) to `target`, without Nagle.
///
/// # Errors
/// The bind or the connect failed (a refusal is `ConnectionRefused` or `ConnectionReset`).
pub async fn connect_from(source: IpAddr, target: SocketAddr) -> io::Result<TcpStream> {
    let socket = match source {
        IpAddr::V4(_) => TcpSocket::new_v4()?,
        IpAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(source, 0))?;
    let stream = socket.connect(target).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_rotate_within_the_range_and_skip_0_and_255() {
        assert_eq!(source(1, 0, 10_000).to_string(), "127.1.0.1");
        assert_eq!(source(1, 249, 10_000).to_string(), "127.1.0.250");
        assert_eq!(source(1, 250, 10_000).to_string(), "127.1.1.1");
        assert_eq!(source(1, 9_999, 10_000).to_string(), "127.1.39.250");
        assert_eq!(source(1, 10_000, 10_000), source(1, 0, 10_000));
        assert_eq!(source(9, 63_999, u64::MAX).to_string(), "127.9.255.250");
    }
}
