//! Listening sockets, set up with socket2 for the options std does not expose: SO_REUSEPORT,
//! the backlog, IPV6_V6ONLY (an IPv6 listener takes IPv6 only, so a separate IPv4 listener on
//! the same port does not clash), and non-blocking mode for tokio.

use std::io;

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::io::unix::AsyncFd;
use tokio::net::UdpSocket;

use crate::config::Listener;

fn socket(config: &Listener, kind: Type, protocol: Protocol) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(config.listen), kind, Some(protocol))?;
    if config.listen.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    if config.reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&config.listen.into())?;
    Ok(socket)
}

/// A non-blocking TCP listener for `config`, with its backlog and TCP_NODELAY, which accepted
/// sockets inherit (one setsockopt per listener, not per connection): the proxy relays
/// whatever it reads at once; batching is the endpoints' business.
///
/// # Errors
/// The socket call that failed (address in use, permission, ...).
pub(crate) fn tcp_listener(config: &Listener) -> io::Result<AsyncFd<std::net::TcpListener>> {
    let socket = socket(config, Type::STREAM, Protocol::TCP)?;
    socket.set_tcp_nodelay(true)?;
    socket.listen(i32::try_from(config.backlog).unwrap_or(i32::MAX))?;
    // `AsyncFd::new` is deprecated because a type whose `as_raw_fd` can change or close behind
    // the registration would be unsound; its replacement is an `unsafe fn`, which this
    // workspace forbids. A `std::net::TcpListener` owns its descriptor and always returns the
    // same one, and the `AsyncFd` owns the listener: the condition `register` asks for holds.
    #[allow(deprecated)]
    AsyncFd::new(std::net::TcpListener::from(socket))
}

/// A UDP socket bound for `config`.
///
/// # Errors
/// The socket call that failed.
pub(crate) fn udp_socket(config: &Listener) -> io::Result<UdpSocket> {
    UdpSocket::from_std(socket(config, Type::DGRAM, Protocol::UDP)?.into())
}

/// Makes the next close of `stream` a reset (RST) instead of an orderly FIN: SO_LINGER with a
/// zero timeout discards unsent data and aborts.
pub(crate) fn reset_on_close<S: std::os::fd::AsFd>(stream: &S) {
    let _ = SockRef::from(stream).set_linger(Some(std::time::Duration::ZERO));
}

/// Whether an accept error means the process or system is out of a resource (files, buffers,
/// memory): accepting again at once would fail again, so the listener backs off.
#[must_use]
pub(crate) fn is_resource_exhaustion(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_running_out_of_a_resource_makes_the_listener_back_off() {
        for errno in [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM] {
            assert!(is_resource_exhaustion(&io::Error::from_raw_os_error(errno)));
        }
        // A client that gave up, a signal, nothing to accept: accept again at once.
        for errno in [libc::ECONNABORTED, libc::EINTR, libc::EAGAIN] {
            assert!(!is_resource_exhaustion(&io::Error::from_raw_os_error(
                errno
            )));
        }
    }
}
