//! Issue 16: the web dashboard in a real browser. The real daemon runs on a
//! simulated inventory with jobs in every state; a headless Chromium
//! (tests/cdp) logs in, reads the overview's GPU counts, a pending job's
//! reason, holds and releases it from the queue, a job's charts and its
//! live log lines, cancels a job from its page, and sees that another
//! user's token does not show it. No page
//! logs a console error. Each page's screenshot goes to docs/img.

mod cdp;
mod common;

use std::path::PathBuf;
use std::time::Duration;

use cdp::Browser;
use common::*;
use serde_json::{Value, json};

fn shots() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/img")
}

/// The text of the overview card `label`.
fn card(b: &mut Browser, label: &str) -> String {
    let v = b.eval(&format!("(document.querySelector('[data-testid=\"{label}\"]') || {{}}).textContent || ''"));
    v.as_str().unwrap_or_default().to_string()
}

#[test]
fn the_dashboard_shows_the_cluster_the_queue_and_a_job_live_and_cancels_from_the_page() {
    let s = Scratch::new("dashboard");
    // A budget the usage page shows; far above what the test spends.
    let budgets = s.0.join("budgets.yaml");
    std::fs::write(&budgets, "- {queue: default, dollarsPerMonth: 5000, mode: soft, alertAt: [80]}\n")
        .expect("budgets");
    let d = Daemon::start(
        &s.0.join("data"),
        "8xH100-80GB",
        &["--sample-interval", "500ms", "--budgets", budgets.to_str().expect("path")],
    );
    let job = |name: &str, cmd: &str, gpus: u32, load: Option<&str>| {
        let mut spec = json!({"name": name, "command": ["sh", "-c", cmd]});
        if gpus > 0 {
            spec["resources"] = json!({"nvidia.com/gpu": gpus});
        }
        if let Some(l) = load {
            spec["env"] = json!({"GPOOL_SIM_LOAD": l});
        }
        d.submit(spec)
    };
    let ok = job("quick", "true", 0, None);
    let failed = job("broken", "exit 3", 0, None);
    let gone = job("gone", "sleep 600", 0, None);
    let (s_, v) = d.req("POST", &format!("/api/v1/jobs/{gone}/cancel"), &d.token, None);
    assert_eq!(s_, 200, "{v}");
    let train =
        job("train", "i=0; while true; do i=$((i+1)); echo \"step $i\"; sleep 0.3; done", 2, Some("util=90 mem=40000"));
    let idle = job("notebook", "sleep 600", 1, Some("util=1 mem=2000"));
    let big = job("big", "sleep 600", 8, None);
    d.wait_ended(&[ok, failed, gone], Duration::from_secs(30));
    // The readings have come: 2 GPUs busy, 1 held and idle, 5 free.
    d.until("/api/v1/overview", Duration::from_secs(30), |o| {
        let g = &o["gpus"][0];
        g["busy"] == 2 && g["idle"] == 1 && g["free"] == 5
    });
    let reason = d.job(big)["reason"].as_str().expect("a pending job says why").to_string();

    let mut b = Browser::start(&s.0.join("chromium"));
    // Log in.
    b.goto(&format!("{}/", d.url));
    b.wait_for("location.pathname === '/login' && document.getElementById('token')", Duration::from_secs(20));
    let login = format!(
        "document.getElementById('token').value = {}; document.querySelector('form.login').requestSubmit(); true",
        Value::from(d.token.clone())
    );
    b.eval(&login);
    b.wait_for(
        "location.pathname === '/' && document.querySelector('[data-testid=\"GPUs busy\"]')",
        Duration::from_secs(20),
    );
    // The overview's counts are the cluster's.
    assert_eq!(
        [card(&mut b, "GPUs busy"), card(&mut b, "GPUs idle"), card(&mut b, "GPUs free"), card(&mut b, "GPUs down")],
        ["2", "1", "5", "0"]
    );
    assert_eq!(card(&mut b, "Jobs pending"), "1");
    assert_eq!(card(&mut b, "Jobs running"), "2");
    b.wait_for("document.querySelectorAll('.heat .cell').length === 8", Duration::from_secs(10));
    b.wait_for("document.body.innerText.includes('GPU-hours and cost per team') && !document.body.innerText.includes('Loading usage')", Duration::from_secs(20));
    b.screenshot(&shots().join("dashboard-overview.png"));

    // The queue: the pending job with the scheduler's reason; the running ones.
    b.goto(&format!("{}/queue", d.url));
    b.wait_for(&format!("document.body.innerText.includes({})", Value::from(reason.clone())), Duration::from_secs(20));
    b.wait_for("document.querySelectorAll('tbody tr').length === 3", Duration::from_secs(10));
    b.screenshot(&shots().join("dashboard-queue.png"));
    // Held from the page, then released.
    let click = |b: &mut Browser, label: String| {
        b.eval(&format!("document.querySelector('button[aria-label=\"{label}\"]').click(); true"));
    };
    click(&mut b, format!("Hold job {big}"));
    b.wait_for(&format!("document.body.innerText.includes('gpool release {big}')"), Duration::from_secs(20));
    assert!(d.job(big)["reason"].as_str().is_some_and(|r| r.starts_with("held by")), "{}", d.job(big));
    click(&mut b, format!("Release job {big}"));
    b.wait_for(&format!("document.querySelector('button[aria-label=\"Hold job {big}\"]')"), Duration::from_secs(20));

    // A job: its charts, and its log followed live.
    b.goto(&format!("{}/jobs/{train}", d.url));
    b.wait_for("document.querySelectorAll('.uplot').length === 2", Duration::from_secs(30));
    b.wait_for("/step \\d+/.test(document.querySelector('pre.logs').textContent)", Duration::from_secs(20));
    let seen = |b: &mut Browser| -> u64 {
        let text = b.eval("document.querySelector('pre.logs').textContent");
        text.as_str()
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("step ")?.parse().ok())
            .max()
            .unwrap_or(0)
    };
    let first = seen(&mut b);
    b.wait_for(
        &format!("/step {}\\b/.test(document.querySelector('pre.logs').textContent)", first + 5),
        Duration::from_secs(20),
    );
    b.wait_for("document.querySelector('ul.timeline li')", Duration::from_secs(10));
    b.screenshot(&shots().join("dashboard-job.png"));

    // Cancelled from the page.
    b.eval("window.confirm = () => true; [...document.querySelectorAll('button')].find(x => x.textContent === 'Cancel job').click(); true");
    d.wait_ended(&[train], Duration::from_secs(30));
    assert_eq!(d.job(train)["state"], "cancelled");

    // Nodes and usage.
    b.goto(&format!("{}/nodes", d.url));
    b.wait_for("document.querySelectorAll('section table tbody tr').length === 8", Duration::from_secs(20));
    b.screenshot(&shots().join("dashboard-nodes.png"));
    let admin = d.get("/api/v1/whoami")["user"].as_str().expect("the admin's name").to_string();
    b.goto(&format!("{}/usage?by=user&since=1d", d.url));
    b.wait_for(
        &format!(
            "document.querySelector('tbody tr') && document.body.innerText.includes({}) \
             && document.body.innerText.includes('queue default') && document.querySelector('meter') \
             && document.querySelector('.charts .uplot')",
            Value::from(admin)
        ),
        Duration::from_secs(20),
    );
    b.screenshot(&shots().join("dashboard-usage.png"));
    assert!(b.errors.is_empty(), "console errors: {:#?}", b.errors);

    // Another user's token sees neither the job nor it in the queue.
    let bob = d.token_for("bob");
    b.eval(&format!("sessionStorage.setItem('gpool.token', {}); true", Value::from(bob)));
    b.goto(&format!("{}/jobs/{idle}", d.url));
    b.wait_for(
        "document.querySelector('main .error') && /not found/i.test(document.querySelector('main .error').textContent)",
        Duration::from_secs(20),
    );
    b.goto(&format!("{}/queue", d.url));
    b.wait_for("document.body.innerText.includes('Queue (0 jobs)')", Duration::from_secs(20));
    // The only errors: the browser's note of the 404 that said "not found".
    assert!(
        b.errors.iter().all(|e| e.contains("404") && e.contains(&format!("/api/v1/jobs/{idle}"))),
        "{:#?}",
        b.errors
    );
}
