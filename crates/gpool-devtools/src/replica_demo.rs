//! `gpool-devtools replica-demo`: a small HTTP/1.1 server to try services with and to
//! test the proxy against, with no Python or image needed. It listens on
//! `$PORT`, answers `GET /health` at once, `/stream` with five server-sent
//! events 100 ms apart (chunked), and anything else after `--delay`
//! (a model's think time) with which job answered. One thread a connection,
//! keep-alive.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use anyhow::Context;

#[derive(clap::Args, Debug)]
pub(crate) struct ReplicaDemoArgs {
    /// Time to answer each request (not /health), e.g. 50ms, or 0.
    #[arg(long, default_value = "50ms", value_parser = |s: &str| gpool_api::quantity::parse_duration(s).map_err(|e| e.to_string()))]
    delay: Duration,
    /// Port to listen on (default: $PORT, which gpool gives each replica).
    #[arg(long, env = "PORT")]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    bind: String,
}

pub(crate) fn run(a: ReplicaDemoArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind((a.bind.as_str(), a.port))
        .with_context(|| format!("cannot listen on {}:{}", a.bind, a.port))?;
    let who = std::env::var("GPOOL_JOB_ID").unwrap_or_else(|_| std::process::id().to_string());
    eprintln!("replica-demo: job {who} listening on {}:{} (answers after {:?})", a.bind, a.port, a.delay);
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let who = who.clone();
        let delay = a.delay;
        std::thread::spawn(move || {
            let _ = serve(stream, &who, delay);
        });
    }
    Ok(())
}

fn serve(stream: TcpStream, who: &str, delay: Duration) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut out = stream.try_clone()?;
    let mut r = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("/").to_string());
        let mut length = 0usize;
        let mut close = false;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h)? == 0 {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = v.trim().parse().unwrap_or(0),
                    "connection" => close = v.trim().eq_ignore_ascii_case("close"),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length.min(1 << 20)];
        r.read_exact(&mut body)?;
        if path == "/stream" {
            out.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")?;
            for i in 0..5 {
                let ev = format!("data: event {i} from job {who}\n\n");
                write!(out, "{:x}\r\n{ev}\r\n", ev.len())?;
                out.flush()?;
                std::thread::sleep(Duration::from_millis(100));
            }
            out.write_all(b"0\r\n\r\n")?;
        } else {
            if path != "/health" {
                std::thread::sleep(delay);
            }
            let text = format!("job {who} answered {method} {path}\n");
            write!(out, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{text}", text.len())?;
        }
        out.flush()?;
        if close {
            return Ok(());
        }
    }
}
