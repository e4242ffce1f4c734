//! Who may talk to the operator UI.
//!
//! Owns: the rules every request passes before a route sees it —
//! - on a loopback address without a token, the `Host` header must name
//!   the loopback address itself (`127.0.0.1:PORT`, `localhost:PORT`,
//!   `[::1]:PORT`), which defeats DNS rebinding: a page of another site
//!   cannot reach the server through a name of its own;
//! - with a token (required on any other address), every request carries it:
//!   `Authorization: Bearer TOKEN`, or the `stratum_ui_token` cookie that
//!   opening `/?token=TOKEN` sets (HttpOnly, SameSite=Strict);
//! - a state-changing request (anything but GET and HEAD) must be JSON
//!   (`Content-Type: application/json`, which a cross-site form cannot
//!   send) and, when the browser names its `Origin`, come from the page's
//!   own origin — no cross-site request forgery.
//!
//! Must never: log or echo a token, or let a request through on a rule it
//! could not check (a missing `Host` on loopback is refused).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// The name of the cookie that carries the token.
pub const COOKIE: &str = "stratum_ui_token";

/// The rules of one server.
#[derive(Clone, Debug)]
pub struct Guard {
    token: Option<String>,
    /// The `Host` values accepted; empty: any (a token protects the server).
    hosts: Vec<String>,
}

impl Guard {
    /// A server on the loopback port `port`: only its own loopback names as
    /// `Host`, and `token` when one is given.
    pub fn loopback(port: u16, token: Option<String>) -> Guard {
        Guard {
            token,
            hosts: vec![
                format!("127.0.0.1:{port}"),
                format!("localhost:{port}"),
                format!("[::1]:{port}"),
            ],
        }
    }

    /// A server reachable from other machines: every request needs `token`.
    pub fn token(token: String) -> Guard {
        Guard {
            token: Some(token),
            hosts: Vec::new(),
        }
    }
}

fn refuse(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"version": 1, "error": {"type": kind, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// Equal in time independent of where the first difference is.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn cookie_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
}

fn query_token(req: &Request) -> Option<&str> {
    req.uri()
        .query()?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "token")
        .map(|(_, v)| v)
}

/// The middleware: applies the rules of `guard` to every request.
pub async fn check(State(guard): State<Guard>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let host = header_str(headers, header::HOST).unwrap_or("");
    if !guard.hosts.is_empty() && !guard.hosts.iter().any(|h| h == host) {
        return refuse(
            StatusCode::FORBIDDEN,
            "host_refused",
            "this server answers only to its loopback address; open it as http://127.0.0.1:PORT/",
        );
    }
    let mut set_cookie = None;
    if let Some(token) = &guard.token {
        let bearer =
            header_str(headers, header::AUTHORIZATION).and_then(|v| v.strip_prefix("Bearer "));
        let from_query = (req.method() == Method::GET)
            .then(|| query_token(&req))
            .flatten();
        let ok = [bearer, cookie_token(headers), from_query]
            .into_iter()
            .flatten()
            .any(|t| same(t, token));
        if !ok {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "token_required",
                "this server needs its token: open /?token=TOKEN (as `stratumc ui` printed it) or send `Authorization: Bearer TOKEN`",
            );
        }
        if from_query.is_some_and(|t| same(t, token)) {
            set_cookie = Some(format!(
                "{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
            ));
        }
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let json = header_str(headers, header::CONTENT_TYPE)
            .is_some_and(|t| t.starts_with("application/json"));
        if !json {
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "json_required",
                "a decision is a JSON request (Content-Type: application/json)",
            );
        }
        if let Some(origin) = header_str(headers, header::ORIGIN) {
            let own = ["http://", "https://"]
                .iter()
                .any(|scheme| origin == format!("{scheme}{host}"));
            if !own {
                return refuse(
                    StatusCode::FORBIDDEN,
                    "origin_refused",
                    "a state-changing request must come from the UI's own page",
                );
            }
        }
    }
    let mut response = next.run(req).await;
    if let Some(c) = set_cookie
        && let Ok(v) = c.parse()
    {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "a=1; stratum_ui_token=t0k; b=2".parse().unwrap(),
        );
        assert_eq!(cookie_token(&h), Some("t0k"));
    }
}
