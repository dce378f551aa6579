//! The upstreams every proxy under test talks to, inside the tool so nothing else is needed: a
//! TCP echo server (tasks on the tool's runtime: it serves thousands of short connections), a
//! TCP sink, a UDP sink and a UDP echo (plain threads: one busy socket each, where a thread
//! reading in a loop costs the least). The sinks count what reaches them, so the load tool's
//! bulk and UDP scenarios measure delivery, not what the client managed to hand to its kernel.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener as StdListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::runtime::Runtime;

/// How long a sink or echo connection may sit idle before it is dropped, unless the caller
/// says otherwise ([`Upstreams::start_with_idle`]).
pub const DEFAULT_IDLE: Duration = Duration::from_secs(10);
/// How often the sink threads look at the stop flag.
const POLL: Duration = Duration::from_millis(50);
/// Accept queue of the upstream listeners: deep enough that bursts from a proxy never overflow.
const BACKLOG: u32 = 4096;

/// The running upstreams; dropping it stops the threads (the echo tasks end with the runtime).
#[derive(Debug)]
pub struct Upstreams {
    /// The TCP echo server.
    pub echo: SocketAddr,
    /// The TCP sink.
    pub sink: SocketAddr,
    /// The UDP sink.
    pub udp: SocketAddr,
    /// The UDP echo: each datagram goes back to its sender.
    pub udp_echo: SocketAddr,
    counters: Arc<Counters>,
    threads: Vec<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Counters {
    stop: AtomicBool,
    sink_bytes: AtomicU64,
    datagrams: AtomicU64,
}

impl Upstreams {
    /// Binds the four upstreams on 127.0.0.1 and starts serving; idle connections are dropped
    /// after [`DEFAULT_IDLE`].
    ///
    /// # Errors
    /// A socket could not be bound or a thread started.
    pub fn start(runtime: &Runtime) -> io::Result<Upstreams> {
        Upstreams::start_with_idle(runtime, DEFAULT_IDLE)
    }

    /// As [`Upstreams::start`], with echo and sink connections dropped after `idle` without
    /// data (an attack that holds connections idle must not be ended by the upstream first).
    ///
    /// # Errors
    /// A socket could not be bound or a thread started.
    pub fn start_with_idle(runtime: &Runtime, idle: Duration) -> io::Result<Upstreams> {
        let counters = Arc::new(Counters::default());
        let echo = {
            let _context = runtime.enter();
            let socket = TcpSocket::new_v4()?;
            socket.set_reuseaddr(true)?;
            socket.bind(loopback())?;
            let listener = socket.listen(BACKLOG)?;
            let address = listener.local_addr()?;
            runtime.spawn(async move {
                // Ends when the runtime shuts down.
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(echo(stream, idle));
                }
            });
            address
        };
        let sink = tcp_listener()?;
        let udp = udp_socket()?;
        let udp_echo = udp_socket()?;
        let addresses = (
            sink.local_addr()?,
            udp.local_addr()?,
            udp_echo.local_addr()?,
        );
        sink.set_nonblocking(true)?;
        let threads = vec![
            spawn("sink", {
                let counters = Arc::clone(&counters);
                move || tcp_sink(&sink, &counters, idle)
            })?,
            spawn("udp-sink", {
                let counters = Arc::clone(&counters);
                move || udp_sink(&udp, &counters)
            })?,
            spawn("udp-echo", {
                let counters = Arc::clone(&counters);
                move || udp_echo_loop(&udp_echo, &counters)
            })?,
        ];
        Ok(Upstreams {
            echo,
            sink: addresses.0,
            udp: addresses.1,
            udp_echo: addresses.2,
            counters,
            threads,
        })
    }

    /// Bytes the TCP sink has read so far.
    pub fn sink_bytes(&self) -> u64 {
        // Relaxed: a counter read after the transfer it counts has been acknowledged end to end.
        self.counters.sink_bytes.load(Ordering::Relaxed)
    }

    /// Datagrams the UDP sink has received so far.
    pub fn datagrams(&self) -> u64 {
        // Relaxed: a counter; a slightly stale read only delays the sender's window by a loop.
        self.counters.datagrams.load(Ordering::Relaxed)
    }
}

impl Drop for Upstreams {
    fn drop(&mut self) {
        // Relaxed: the threads poll the flag; joining them is the synchronisation.
        self.counters.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    thread::Builder::new().name(name.to_owned()).spawn(body)
}

fn tcp_listener() -> io::Result<StdListener> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&loopback().into())?;
    socket.listen(i32::try_from(BACKLOG).unwrap_or(i32::MAX))?;
    Ok(socket.into())
}

/// The UDP sink's socket, with a receive buffer as large as the system allows (the sink should
/// not be where datagrams are lost).
fn udp_socket() -> io::Result<UdpSocket> {
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    let _ = socket.set_recv_buffer_size(8 << 20);
    socket.bind(&loopback().into())?;
    socket.set_read_timeout(Some(POLL))?;
    Ok(socket.into())
}

/// Echoes until end of stream, an error, or `idle` without data.
async fn echo(mut stream: TcpStream, idle: Duration) {
    let _ = stream.set_nodelay(true);
    let mut buffer = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(idle, stream.read(&mut buffer)).await;
        let Ok(Ok(n @ 1..)) = read else { return };
        if stream.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

/// Accepts until stopped (polling: the listener is non-blocking), a thread per connection.
fn tcp_sink(listener: &StdListener, counters: &Arc<Counters>, idle: Duration) {
    // Relaxed: a stop flag, polled; `Drop` joins the thread, which is the synchronisation.
    while !counters.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let counters = Arc::clone(counters);
                let _ = spawn("sink-conn", move || {
                    let _ = drain(stream, &counters, idle);
                });
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => thread::sleep(POLL / 10),
            Err(_) => thread::sleep(POLL),
        }
    }
}

/// Reads and discards until end of stream, an error, `idle` without data, or the stop flag.
fn drain(mut stream: std::net::TcpStream, counters: &Counters, idle: Duration) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(idle))?;
    let mut buffer = vec![0u8; 256 << 10];
    // Relaxed: a stop flag, polled; `Drop` joins the thread, which is the synchronisation.
    while !counters.stop.load(Ordering::Relaxed) {
        let n = stream.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        // Relaxed: a counter.
        counters.sink_bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// Counts datagrams until stopped.
fn udp_sink(socket: &UdpSocket, counters: &Counters) {
    let mut buffer = [0u8; 2048];
    // Relaxed: a stop flag, polled; `Drop` joins the thread, which is the synchronisation.
    while !counters.stop.load(Ordering::Relaxed) {
        if socket.recv(&mut buffer).is_ok() {
            // Relaxed: a counter.
            counters.datagrams.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Sends every datagram back to where it came from, until stopped.
fn udp_echo_loop(socket: &UdpSocket, counters: &Counters) {
    let mut buffer = [0u8; 2048];
    // Relaxed: a stop flag, polled; `Drop` joins the thread, which is the synchronisation.
    while !counters.stop.load(Ordering::Relaxed) {
        if let Ok((n, from)) = socket.recv_from(&mut buffer) {
            let _ = socket.send_to(&buffer[..n], from);
        }
    }
}
