//! Request bodies, read only for callers who may send them.
//!
//! A body is parsed after its caller's token is checked (one `whoami` call
//! to the controller), so nobody without a token makes the daemon parse
//! anything; its nesting is measured first and refused past
//! [`MAX_DEPTH`] (the YAML parser's time grows with the square of the
//! depth: 120,000 levels of `[` took it 27 s); and the parse runs on a
//! blocking thread, never on the async workers that answer `/healthz` and
//! every other request.

use axum::http::HeaderMap;
use serde::de::DeserializeOwned;

use super::who::Who;
use super::{AppError, AppState, Result, bad, call};
use crate::plane::controller::Call;

/// The deepest nesting of lists and maps a body may have. A job spec needs
/// about 5; JSON's own parser stops at 128.
pub(super) const MAX_DEPTH: usize = 64;

/// The deepest nesting of `[` and `{` in `body` outside quoted strings
/// (YAML's and JSON's flow collections; block collections nest by
/// indentation, which grows a body with the square of its depth and so
/// stays shallow within the size limit).
pub(super) fn depth(body: &[u8]) -> usize {
    let (mut depth, mut deepest, mut quote, mut escaped) = (0usize, 0usize, None::<u8>, false);
    for &b in body {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if b == b'\\' && q == b'"' {
                    escaped = true;
                } else if b == q {
                    quote = None;
                }
            }
            None => match b {
                b'"' | b'\'' => quote = Some(b),
                b'[' | b'{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    deepest
}

/// Refuses a body nested deeper than [`MAX_DEPTH`].
pub(super) fn shallow(body: &[u8]) -> std::result::Result<(), String> {
    let d = depth(body);
    if d > MAX_DEPTH {
        return Err(format!("the body nests lists and maps {d} deep; the most is {MAX_DEPTH}"));
    }
    Ok(())
}

/// Checks that `who` may call the API at all, then parses `body` with
/// `parse` off the async workers.
pub(super) async fn authed<T: Send + 'static>(
    st: &AppState,
    who: &Who,
    headers: &HeaderMap,
    body: axum::body::Bytes,
    parse: fn(&[u8], bool) -> std::result::Result<T, String>,
) -> Result<T> {
    call(st, who, |reply| Call::WhoAmI { reply }).await?;
    let yaml = super::is_yaml(headers);
    tokio::task::spawn_blocking(move || {
        shallow(&body)?;
        parse(&body, yaml)
    })
    .await
    .map_err(|e| AppError(crate::plane::controller::ApiError::new(500, format!("parsing the body: {e}"))))?
    .map_err(bad)
}

/// [`authed`] for one value of `T`.
pub(super) async fn authed_as<T: DeserializeOwned + Send + 'static>(
    st: &AppState,
    who: &Who,
    headers: &HeaderMap,
    body: axum::body::Bytes,
) -> Result<T> {
    authed(st, who, headers, body, super::parse::<T>).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_measured_outside_quotes() {
        assert_eq!(depth(b"command: [echo, hi]"), 1);
        assert_eq!(depth(br#"{"a": [{"b": []}]}"#), 4);
        assert_eq!(depth(br#"{"command": "[[[[[[ \" [[[["}"#), 1, "brackets in a string do not count");
        assert_eq!(depth(b"command: 'it''s [[[['"), 0);
        let deep = format!("command: {}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(shallow(deep.as_bytes()).expect_err("too deep").contains("100000 deep"));
        assert!(shallow(b"command: [[[x]]]").is_ok());
    }
}
