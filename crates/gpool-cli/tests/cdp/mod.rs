//! A headless Chromium driven over the Chrome DevTools Protocol, for the
//! dashboard's browser tests: the system's `chromium` (Debian's package,
//! which scripts/test.sh installs), one page, JavaScript evaluated in it,
//! screenshots, and every console error and uncaught exception recorded.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

pub(crate) struct Browser {
    child: Child,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next: u64,
    /// Console errors, uncaught exceptions and failed loads, as Chromium said them.
    pub(crate) errors: Vec<String>,
}

fn chromium() -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"] {
        for dir in path.split(':') {
            let p = Path::new(dir).join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "no chromium on PATH: install it (apt-get install chromium; scripts/test.sh does) to run the dashboard's browser tests"
    )
}

impl Browser {
    /// Starts Chromium headless with its profile in `dir`, at 1280×900.
    pub(crate) fn start(dir: &Path) -> Browser {
        let mut child = Command::new(chromium())
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--remote-debugging-port=0",
                "--window-size=1280,900",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", dir.display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let browser_ws = rx.recv_timeout(Duration::from_secs(60)).expect("chromium says where DevTools listens");
        let port = browser_ws
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .and_then(|h| h.rsplit(':').next())
            .expect("port")
            .to_string();
        let targets: Value = ureq::get(&format!("http://127.0.0.1:{port}/json/list"))
            .call()
            .expect("DevTools targets")
            .body_mut()
            .read_json()
            .expect("targets JSON");
        let page = targets
            .as_array()
            .and_then(|t| t.iter().find(|t| t["type"] == "page"))
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .expect("a page target")
            .to_string();
        let (ws, _) = tungstenite::connect(page.as_str()).expect("connect to the page");
        let mut b = Browser { child, ws, next: 1, errors: Vec::new() };
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            b.call(domain, json!({}));
        }
        b
    }

    fn record(&mut self, msg: &Value) {
        let p = &msg["params"];
        match msg["method"].as_str() {
            Some("Runtime.consoleAPICalled") if p["type"] == "error" => {
                let args: Vec<String> = p["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| a["value"].as_str().map_or_else(|| a["description"].to_string(), str::to_string))
                    .collect();
                self.errors.push(format!("console.error: {}", args.join(" ")));
            }
            Some("Runtime.exceptionThrown") => {
                let d = &p["exceptionDetails"];
                self.errors.push(format!("exception: {} {}", d["text"], d["exception"]["description"]));
            }
            Some("Log.entryAdded") if p["entry"]["level"] == "error" => {
                self.errors.push(format!("log: {} ({})", p["entry"]["text"], p["entry"]["url"]));
            }
            _ => {}
        }
    }

    /// Sends one command and waits for its answer; events read meanwhile are recorded.
    pub(crate) fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.send(Message::text(msg)).expect("send to chromium");
        loop {
            let m = self.ws.read().expect("read from chromium");
            let Message::Text(text) = m else { continue };
            let v: Value = serde_json::from_str(text.as_str()).expect("CDP JSON");
            if v["id"].as_u64() == Some(id) {
                assert!(v["error"].is_null(), "{method}: {}", v["error"]);
                return v["result"].clone();
            }
            self.record(&v);
        }
    }

    /// Evaluates `expr` in the page (awaiting a promise) and returns its value.
    pub(crate) fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true, "userGesture": true}),
        );
        assert!(r["exceptionDetails"].is_null(), "{expr}: {}", r["exceptionDetails"]);
        r["result"]["value"].clone()
    }

    /// Opens `url` and waits until the document has loaded.
    pub(crate) fn goto(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for("document.readyState === 'complete'", Duration::from_secs(30));
    }

    /// Waits until `expr` is true in the page, saying what the page showed if it never is.
    pub(crate) fn wait_for(&mut self, expr: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if self.eval(&format!("Boolean({expr})")) == json!(true) {
                return;
            }
            if Instant::now() > deadline {
                let text = self.eval("document.body ? document.body.innerText.slice(0, 3000) : ''");
                panic!("not within {limit:?}: {expr}\nthe page said:\n{}", text.as_str().unwrap_or_default());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG of the page as it shows now.
    pub(crate) fn screenshot(&mut self, to: &Path) {
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("screenshot data"))
            .expect("base64 PNG");
        std::fs::write(to, png).expect("write the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
