//! `gpool attach ID` and `gpool run --pty`: the terminal of an interactive
//! job, here, as `srun --pty` gives it. This terminal is put in raw mode, so
//! every key (Ctrl-C, Ctrl-Z, Ctrl-D) goes to the job's own terminal and
//! acts there; the window size follows this one's (`SIGWINCH`). `~.` at the
//! start of a line detaches, as in ssh: the job goes on, and ends once no
//! client has been attached for its grace period (`--detach-grace`).
//!
//! The frames (`gpool_api::terminal`) travel over two HTTP streams: the
//! output is read from `GET /terminals/S/output`, the keystrokes, window
//! sizes and a ping every [`PING_EVERY`] are sent on `POST /terminals/S/input`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use gpool_api as api;
use gpool_api::terminal::{AttachView, Frame, read_frame};

use crate::client::{Client, Connect};

/// How often the client says it is still there.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(5);

#[derive(Args, Debug)]
pub(crate) struct AttachArgs {
    /// The interactive job (started by `gpool run --pty`).
    #[arg(value_name = "ID")]
    job: crate::job_ref::JobRef,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn run(a: AttachArgs) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    let id = crate::job_ref::resolve(&client, &[a.job], None)?.first().copied().unwrap_or(0);
    session(&client, id)
}

/// `gpool run --pty`, once the job is submitted: waits for it to run, then attaches.
pub(crate) fn when_running(client: &Client, id: u64) -> anyhow::Result<()> {
    eprintln!("gpool: job {id} submitted; waiting for resources");
    let job = wait_running(client, id)?;
    if job.state.is_terminal() {
        return ended(&job);
    }
    session(client, id)
}

/// The job's status as the command's, once it has ended.
fn ended(job: &api::JobView) -> anyhow::Result<()> {
    match crate::verbs::wait::status_of(job) {
        Some(status) => Err(status.into()),
        None => Ok(()),
    }
}

/// Waits until job `id` runs or has ended, following its events.
fn wait_running(client: &Client, id: u64) -> anyhow::Result<api::JobView> {
    struct Until<'c> {
        client: &'c Client,
        id: u64,
        buf: Vec<u8>,
        found: Option<api::JobView>,
    }
    impl Write for Until<'_> {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.buf.extend_from_slice(data);
            let event = self.buf.split(|b| *b == b'\n').any(|l| l.starts_with(b"data:"));
            if let Some(end) = self.buf.iter().rposition(|b| *b == b'\n') {
                self.buf.drain(..=end);
            }
            if event {
                let job: api::JobView = self
                    .client
                    .get(&format!("/jobs/{}", self.id))
                    .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
                if job.state == api::JobState::Running || job.state.is_terminal() {
                    self.found = Some(job);
                    return Err(std::io::Error::other("found"));
                }
            }
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let job: api::JobView = client.get(&format!("/jobs/{id}"))?;
    if job.state == api::JobState::Running || job.state.is_terminal() {
        return Ok(job);
    }
    let mut until = Until { client, id, buf: Vec::new(), found: None };
    let streamed = client.stream(&format!("/events?job={id}&after=0"), &mut until);
    match until.found {
        Some(job) => Ok(job),
        None => {
            streamed?;
            anyhow::bail!("the event stream closed before job {id} started; try gpool attach {id}")
        }
    }
}

/// This terminal in raw mode, restored when dropped.
struct Raw(rustix::termios::Termios);

impl Raw {
    fn enter() -> Option<Raw> {
        let stdin = std::io::stdin();
        if !rustix::termios::isatty(&stdin) {
            return None;
        }
        let saved = rustix::termios::tcgetattr(&stdin).ok()?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &raw).ok()?;
        Some(Raw(saved))
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(std::io::stdin(), rustix::termios::OptionalActions::Now, &self.0);
    }
}

/// This terminal's size, if it is one.
fn window() -> Option<Frame> {
    let size = rustix::termios::tcgetwinsize(std::io::stdout())
        .or_else(|_| rustix::termios::tcgetwinsize(std::io::stdin()))
        .ok()?;
    (size.ws_row > 0 && size.ws_col > 0).then_some(Frame::Resize { rows: size.ws_row, cols: size.ws_col })
}

/// `~.` at the start of a line: the ssh escape that detaches.
#[derive(Debug)]
pub(crate) struct Escape {
    line_start: bool,
    tilde: bool,
}

impl Default for Escape {
    fn default() -> Escape {
        Escape { line_start: true, tilde: false }
    }
}

impl Escape {
    /// The keys to send, and whether `~.` came (what follows it is dropped).
    pub(crate) fn filter(&mut self, keys: &[u8]) -> (Vec<u8>, bool) {
        let mut out = Vec::with_capacity(keys.len());
        for &b in keys {
            if std::mem::take(&mut self.tilde) {
                match b {
                    b'.' => return (out, true),
                    // `~~` sends one `~`.
                    b'~' => {
                        out.push(b'~');
                        self.line_start = false;
                        continue;
                    }
                    _ => out.push(b'~'),
                }
            } else if self.line_start && b == b'~' {
                self.tilde = true;
                continue;
            }
            out.push(b);
            self.line_start = b == b'\r' || b == b'\n';
        }
        (out, false)
    }
}

/// Frames to the job, from several threads, in whole frames, into the
/// current connection's input stream (a new one after a reconnection; what
/// was typed while none was open is lost, as on a dropped ssh link).
#[derive(Clone)]
struct Keys {
    pipe: Arc<Mutex<UnixStream>>,
    closed: Arc<AtomicBool>,
}

impl Keys {
    /// The keys, and the first connection's input stream.
    fn new() -> std::io::Result<(Keys, UnixStream)> {
        let (body, ours) = UnixStream::pair()?;
        Ok((Keys { pipe: Arc::new(Mutex::new(ours)), closed: Arc::default() }, body))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, UnixStream> {
        self.pipe.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn send(&self, f: &Frame) -> std::io::Result<()> {
        self.lock().write_all(&f.encode())
    }

    /// Ends the current connection's input; returns the next one's.
    fn renew(&self) -> std::io::Result<UnixStream> {
        let (body, ours) = UnixStream::pair()?;
        let old = std::mem::replace(&mut *self.lock(), ours);
        let _ = old.shutdown(std::net::Shutdown::Both);
        Ok(body)
    }

    /// Ends the input for good (the session is over here).
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.lock().shutdown(std::net::Shutdown::Both);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// How the output of one connection ended.
enum Shown {
    Exit(api::terminal::ExitFrame),
    TakenOver,
    /// The stream ended without a word: the connection broke.
    Ended,
}

/// How a session ended here.
enum Ended {
    Exit(api::terminal::ExitFrame),
    Detached,
    TakenOver,
    /// The job ended while no connection was open.
    Job(Box<api::JobView>),
}

/// Attaches to running interactive job `id` until it ends or this client
/// detaches; a connection lost meanwhile (the control plane or the node's
/// agent restarted, a standby took over) is opened again within the job's grace.
fn session(client: &Client, id: u64) -> anyhow::Result<()> {
    let mut view: AttachView = client.post_empty(&format!("/jobs/{id}/attach"))?;
    let tty = rustix::termios::isatty(std::io::stdin());
    if tty {
        eprintln!(
            "gpool: attached to job {id} on {}; ~. detaches (the job then ends after {} s with no terminal)",
            view.node, view.detach_grace_s
        );
    }
    for url in &view.exposed {
        eprintln!("gpool: exposed at {url}");
    }
    let (keys, mut body) = Keys::new().context("a pipe for the keystrokes")?;
    let detached = Arc::new(AtomicBool::new(false));
    // Each connection starts with this window's size (before any ping), which
    // the first one's job starts at.
    let first_size = || {
        if let Some(size) = window() {
            let _ = keys.send(&size);
        }
    };
    first_size();
    let raw = Raw::enter();
    spawn_keys(keys.clone(), Arc::clone(&detached))?;
    spawn_pings(keys.clone())?;
    spawn_window(keys.clone())?;
    let outcome = loop {
        let out = std::thread::scope(|s| -> anyhow::Result<_> {
            let input = format!("/terminals/{}/input", view.session);
            s.spawn(move || client.post_reader(&input, body));
            let out = show_output(client, &view.session);
            // Whatever ended the output ends this connection's input, so the scope can end.
            Ok((out, keys.renew()?))
        });
        let (out, next) = match out {
            Ok(o) => o,
            Err(e) => break Err(e),
        };
        body = next;
        match out {
            Ok(Shown::Exit(exit)) => break Ok(Ended::Exit(exit)),
            // Not taken back: the two clients would take it from each other forever.
            Ok(Shown::TakenOver) => break Ok(Ended::TakenOver),
            _ if detached.load(Ordering::SeqCst) => break Ok(Ended::Detached),
            lost => match rejoin(client, id, view.detach_grace_s, lost.err()) {
                Ok(Rejoin::Attached(v)) => {
                    eprint!("\r\n[gpool: attached again to job {id} on {}]\r\n", v.node);
                    view = v;
                    first_size();
                }
                Ok(Rejoin::JobEnded(job)) => break Ok(Ended::Job(job)),
                Err(e) => break Err(e),
            },
        }
    };
    keys.close();
    drop(raw);
    match outcome? {
        Ended::Exit(exit) => {
            if let Some(why) = &exit.error {
                eprintln!("gpool: {why}");
            }
            match exit.status() {
                0 => Ok(()),
                code => {
                    Err(crate::verbs::wait::JobStatus { code, message: format!("job {id} ended with status {code}") }
                        .into())
                }
            }
        }
        Ended::Detached => {
            eprintln!(
                "gpool: detached from job {id}; gpool attach {id} within {} s rejoins it, else it ends",
                view.detach_grace_s
            );
            Ok(())
        }
        Ended::TakenOver => {
            eprintln!("gpool: another client attached to job {id}; this one is detached");
            Ok(())
        }
        Ended::Job(job) => ended(&job),
    }
}

enum Rejoin {
    Attached(AttachView),
    JobEnded(Box<api::JobView>),
}

/// After a connection broke without the job's status: the job's end, or a
/// new session on it, tried each second for up to `grace_s` (the job lives
/// that long with no client); else why not.
fn rejoin(client: &Client, id: u64, grace_s: u64, why: Option<anyhow::Error>) -> anyhow::Result<Rejoin> {
    let why = why.map_or_else(String::new, |e| format!(" ({e:#})"));
    eprint!(
        "\r\n[gpool: the connection to job {id}'s terminal was lost{why}; attaching again for up to {grace_s} s]\r\n"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(grace_s);
    let mut last = String::new();
    while std::time::Instant::now() < deadline {
        match client.get::<api::JobView>(&format!("/jobs/{id}")) {
            Ok(job) if job.state.is_terminal() => return Ok(Rejoin::JobEnded(Box::new(job))),
            Ok(job) if job.state == api::JobState::Running => match client.post_empty(&format!("/jobs/{id}/attach")) {
                Ok(v) => return Ok(Rejoin::Attached(v)),
                Err(e) => last = format!("{e:#}"),
            },
            Ok(job) => last = format!("job {id} is {}", job.state.as_str()),
            // The control plane is away (restarting, failing over): it comes back.
            Err(e) => last = format!("{e:#}"),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    anyhow::bail!("could not attach to job {id} again within {grace_s} s ({last}); gpool attach {id} tries once more")
}

/// Writes the job's output here until its exit frame (returned) or the stream's end.
fn show_output(client: &Client, session: &str) -> anyhow::Result<Shown> {
    let mut from = client.reader(&format!("/terminals/{session}/output"))?;
    let mut out = std::io::stdout().lock();
    loop {
        match read_frame(&mut from)? {
            None => return Ok(Shown::Ended),
            Some(Frame::Output(bytes)) => {
                out.write_all(&bytes)?;
                out.flush()?;
            }
            Some(Frame::Notice(text)) => eprint!("\r\n[{text}]\r\n"),
            Some(Frame::Exit(exit)) => return Ok(Shown::Exit(exit)),
            Some(Frame::TakenOver) => return Ok(Shown::TakenOver),
            Some(_) => {}
        }
    }
}

/// Keystrokes from standard input, until `~.` or its end. Standard input
/// that is not a terminal (`< script`, `/dev/null`) ends with the terminal's
/// end-of-input character, as ssh sends it, so the job reads its end too.
fn spawn_keys(keys: Keys, detached: Arc<AtomicBool>) -> std::io::Result<()> {
    let tty = rustix::termios::isatty(std::io::stdin());
    std::thread::Builder::new().name("keys".into()).spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut escape = Escape::default();
        let mut buf = [0u8; 4096];
        loop {
            let n = match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    if !tty {
                        // The first ends a last line without its newline (or is the end
                        // itself at a line's start); the second is the end for whoever reads next.
                        let _ = keys.send(&Frame::Input(b"\x04\x04".to_vec()));
                    }
                    return;
                }
                Ok(n) => n,
            };
            let (send, detach) = escape.filter(&buf[..n]);
            // Keys typed while no connection is open are lost; the next connection takes the next ones.
            if !send.is_empty() {
                let _ = keys.send(&Frame::Input(send));
            }
            if detach {
                detached.store(true, Ordering::SeqCst);
                keys.close();
                return;
            }
        }
    })?;
    Ok(())
}

/// A ping every [`PING_EVERY`], until the session is over here.
fn spawn_pings(keys: Keys) -> std::io::Result<()> {
    std::thread::Builder::new().name("ping".into()).spawn(move || {
        while !keys.is_closed() {
            let _ = keys.send(&Frame::Ping);
            std::thread::sleep(PING_EVERY);
        }
    })?;
    Ok(())
}

/// The window's new size on each `SIGWINCH`.
fn spawn_window(keys: Keys) -> std::io::Result<()> {
    let (mut woken, wake) = UnixStream::pair()?;
    signal_hook::low_level::pipe::register(signal_hook::consts::SIGWINCH, wake)?;
    std::thread::Builder::new().name("window".into()).spawn(move || {
        let mut b = [0u8; 1];
        while woken.read(&mut b).is_ok_and(|n| n > 0) && !keys.is_closed() {
            if let Some(size) = window() {
                let _ = keys.send(&size);
            }
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tilde_dot_at_a_line_start_detaches_and_nothing_else_does() {
        let cases: [(&[&[u8]], &[u8], bool); 6] = [
            (&[b"~."], b"", true),
            (&[b"ls\r~."], b"ls\r", true),
            (&[b"ls\r~", b"."], b"ls\r", true),
            (&[b"a~."], b"a~.", false),
            (&[b"~~."], b"~.", false),
            (&[b"~x"], b"~x", false),
        ];
        for (chunks, sent, detaches) in cases {
            let mut e = Escape::default();
            let mut got = Vec::new();
            let mut detached = false;
            for c in chunks {
                let (out, d) = e.filter(c);
                got.extend(out);
                detached |= d;
            }
            assert_eq!((got.as_slice(), detached), (sent, detaches), "{chunks:?}");
        }
    }
}
