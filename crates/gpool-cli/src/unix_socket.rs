//! HTTP over the local daemon's Unix socket, for ureq: a connector that
//! opens the socket whatever the URL's host, and its transport. On that
//! socket the daemon learns who we are from the kernel, so no token is sent.
//!
//! ureq's transport API is `unversioned` (outside its semver promise);
//! Cargo.lock pins the version this was written against.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use ureq::unversioned::transport::{Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, Transport};

/// Opens `path` for every request.
#[derive(Debug, Clone)]
pub(crate) struct UnixConnector {
    pub(crate) path: PathBuf,
}

impl<In: Transport> Connector<In> for UnixConnector {
    type Out = UnixTransport;

    fn connect(&self, details: &ConnectionDetails, _: Option<In>) -> Result<Option<UnixTransport>, ureq::Error> {
        let stream = UnixStream::connect(&self.path)
            .map_err(|e| ureq::Error::Io(std::io::Error::new(e.kind(), format!("{}: {e}", self.path.display()))))?;
        let config = details.config;
        let buffers = LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size());
        Ok(Some(UnixTransport { stream, buffers }))
    }
}

/// A connection to the socket.
#[derive(Debug)]
pub(crate) struct UnixTransport {
    stream: UnixStream,
    buffers: LazyBuffers,
}

/// The timeout to set for the next read or write; `Err` when it is spent.
fn limit(t: NextTimeout) -> Result<Option<std::time::Duration>, ureq::Error> {
    match t.not_zero() {
        None => Ok(None),
        Some(d) if d.is_zero() => Err(ureq::Error::Timeout(t.reason)),
        Some(d) => Ok(Some(*d)),
    }
}

fn timed_out(e: std::io::Error, t: NextTimeout) -> ureq::Error {
    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) {
        ureq::Error::Timeout(t.reason)
    } else {
        ureq::Error::Io(e)
    }
}

impl Transport for UnixTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let t = timeout.for_write();
        self.stream.set_write_timeout(limit(t)?)?;
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output).map_err(|e| timed_out(e, t))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let t = timeout.for_read();
        self.stream.set_read_timeout(limit(t)?)?;
        let input = self.buffers.input_append_buf();
        let amount = loop {
            match self.stream.read(input) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r.map_err(|e| timed_out(e, t))?,
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        // Open if nothing is waiting and the peer has not closed: a read
        // that would block.
        if self.stream.set_nonblocking(true).is_err() {
            return false;
        }
        let mut byte = [0u8];
        let open = matches!(self.stream.read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        open && self.stream.set_nonblocking(false).is_ok()
    }
}

/// Resolves every host to 127.0.0.1 without asking the name service: the
/// connector opens the socket whatever the address. ureq resolves the URL's
/// host (`localhost`) before it connects, and a machine with no /etc/hosts
/// (a minimal Debian, a container) has no `localhost`.
#[derive(Debug)]
struct NoLookup;

impl ureq::unversioned::resolver::Resolver for NoLookup {
    fn resolve(
        &self,
        _: &ureq::http::Uri,
        _: &ureq::config::Config,
        _: NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        let mut addrs = self.empty();
        addrs.push(std::net::SocketAddr::from(([127, 0, 0, 1], 80)));
        Ok(addrs)
    }
}

/// An agent that sends every request to the socket at `path`.
pub(crate) fn agent(path: PathBuf, config: ureq::config::Config) -> ureq::Agent {
    ureq::Agent::with_parts(config, UnixConnector { path }, NoLookup)
}
