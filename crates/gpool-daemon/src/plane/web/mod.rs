//! The web dashboard (docs/dashboard.md): a small single-page app served by
//! the daemon itself. Every page (`/`, `/queue`, `/jobs/{id}`, `/nodes`,
//! `/usage`, `/login`) is the same HTML shell; the script reads the path
//! and draws the page from the public API (`/api/v1`) with the token the
//! login form keeps in the browser's session storage, so a page shows
//! exactly what the API lets its user see. Every asset is compiled into the
//! binary: no web server, no network and no JavaScript build step.

use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX: &str = include_str!("assets/index.html");
/// (name, content type, body).
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", "text/javascript; charset=utf-8", include_str!("assets/app.js")),
    ("app.css", "text/css; charset=utf-8", include_str!("assets/app.css")),
    ("uPlot.iife.min.js", "text/javascript; charset=utf-8", include_str!("assets/vendor/uPlot.iife.min.js")),
    ("uPlot.min.css", "text/css; charset=utf-8", include_str!("assets/vendor/uPlot.min.css")),
];

/// Scripts and styles from this origin only; uPlot sizes its canvases
/// through the style attribute.
const CSP: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The pages, each a URL that can be shared.
pub const PAGES: &[&str] = &["/", "/login", "/queue", "/nodes", "/usage", "/jobs/{id}"];

pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut r = Router::new();
    for p in PAGES {
        r = r.route(p, get(page));
    }
    r.route("/ui/{file}", get(asset))
}

/// A short hash of every asset, so that a new binary's assets are fetched
/// again while the same binary's stay cached.
fn version() -> &'static str {
    static V: OnceLock<String> = OnceLock::new();
    V.get_or_init(|| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for (name, _, body) in ASSETS {
            name.hash(&mut h);
            body.hash(&mut h);
        }
        format!("{:012x}", h.finish() & 0xffff_ffff_ffff)
    })
}

fn index() -> &'static str {
    static PAGE: OnceLock<String> = OnceLock::new();
    PAGE.get_or_init(|| INDEX.replace("{{v}}", version()))
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        index(),
    )
        .into_response()
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, kind, body)) => (
            [
                (header::CONTENT_TYPE, *kind),
                (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            *body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_every_asset_with_the_version_and_nothing_from_elsewhere() {
        let page = index();
        for (name, _, _) in ASSETS {
            assert!(page.contains(&format!("/ui/{name}?v={}", version())), "{name} missing from index.html");
        }
        assert!(!page.contains("http://") && !page.contains("https://"), "no asset from the network");
        assert!(!page.contains("{{"), "every placeholder filled");
    }
}
