//! A TCP proxy on loopback between an agent and a control plane, which a
//! chaos run can cut: while cut, its open connections are shut and new ones
//! are accepted and closed at once, as when a node's network goes away.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) struct Proxy {
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    /// Forwards a free port of 127.0.0.1 to `upstream`.
    pub(crate) fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let cut = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, o, s) = (cut.clone(), open.clone(), stop.clone());
        std::thread::Builder::new().name("proxy".into()).spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                if c.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(a), Ok(b)) = (client.try_clone(), server.try_clone()) {
                    let mut held = o.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    held.retain(|t| t.peer_addr().is_ok());
                    held.push(a);
                    held.push(b);
                }
                pipe(client.try_clone(), server.try_clone());
                pipe(server.try_clone(), client.try_clone());
            }
        })?;
        Ok(Proxy { addr, cut, open, stop })
    }

    /// Cuts (`true`) or restores (`false`) the link.
    pub(crate) fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
        if cut {
            for s in self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.set_cut(true);
        // Wake the accept loop so it sees the stop.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Copies one direction until either side closes.
fn pipe(from: std::io::Result<TcpStream>, to: std::io::Result<TcpStream>) {
    let (Ok(mut from), Ok(mut to)) = (from, to) else { return };
    let _ = std::thread::Builder::new().name("proxy-pipe".into()).spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
        let _ = from.shutdown(Shutdown::Read);
    });
}
