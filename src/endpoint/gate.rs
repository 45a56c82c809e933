//! The endpoint's gate: who a request's bearer token belongs to (the two data-directory
//! tokens or a named one, read again whenever `tokens.json` changes), whether that role may
//! do what the request asks, and the actor the audit log then records.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::clock::{Clock as _, SystemClock, Timestamp};
use crate::endpoint::api_error::ApiError;
use crate::endpoint::auth::{Tokens, Verdict, bearer};
use crate::endpoint::tokens::Role;
use crate::endpoint::tokens::{TokenBook, TokenUsage};
use crate::wire;

/// How often the endpoint writes down when its tokens were last used.
pub const USAGE_FLUSH: std::time::Duration = std::time::Duration::from_mins(1);

/// The endpoint's gate: its two data-directory tokens and the named tokens of its
/// `tokens.json`, read again whenever that file changes (so `token revoke` applies to the
/// next request).
pub struct Gate {
    tokens: Tokens,
    dir: Option<PathBuf>,
    book: std::sync::Mutex<(Option<FileStamp>, Arc<TokenBook>)>,
    /// Uses since the last [`Gate::flush_usage`]: kept in memory, written in batches.
    usage: std::sync::Mutex<TokenUsage>,
}

/// What identifies one version of a file: its size, change time and inode.
type FileStamp = (u64, i64, i64, u64);

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gate(..)")
    }
}

impl Gate {
    /// A gate of `tokens` and, when `dir` is given, the named tokens kept there.
    pub fn new(tokens: Tokens, dir: Option<PathBuf>) -> Gate {
        Gate {
            tokens,
            dir,
            book: std::sync::Mutex::new((None, Arc::new(TokenBook::default()))),
            usage: std::sync::Mutex::new(TokenUsage::default()),
        }
    }

    /// The same tokens, with the named tokens kept in `dir`.
    #[must_use]
    pub fn with_dir(&self, dir: &Path) -> Gate {
        Gate::new(self.tokens.clone(), Some(dir.to_path_buf()))
    }

    /// What `presented` is at `now`.
    pub fn check(&self, presented: &str, now: Timestamp) -> Verdict {
        let book = self.book();
        let verdict = self.tokens.check(presented, &book, now);
        if let Verdict::Valid(who) = &verdict
            && let Ok(mut usage) = self.usage.lock()
        {
            usage.record(&who.name, now);
        }
        verdict
    }

    /// Writes the uses recorded since the last call into the data directory's
    /// `token-usage.json` (for `gpuboard token ls`); nothing when there were none. The
    /// endpoint calls it every [`USAGE_FLUSH`] and once at shutdown, never per request.
    pub fn flush_usage(&self) -> Result<(), crate::endpoint::tokens::TokenBookError> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let pending = match self.usage.lock() {
            Ok(mut u) => std::mem::take(&mut *u),
            Err(_) => return Ok(()),
        };
        if pending.last_used.is_empty() {
            return Ok(());
        }
        pending.merge_into(dir)
    }

    /// The named tokens as the file holds them now. A file that cannot be read keeps no
    /// named token valid (the two data-directory tokens still work) and is logged.
    fn book(&self) -> Arc<TokenBook> {
        use std::os::unix::fs::MetadataExt as _;
        let Some(dir) = &self.dir else {
            return Arc::new(TokenBook::default());
        };
        let stamp = std::fs::metadata(TokenBook::path(dir))
            .ok()
            .map(|m| (m.len(), m.ctime(), m.ctime_nsec(), m.ino()));
        let Ok(mut cached) = self.book.lock() else {
            return Arc::new(TokenBook::default());
        };
        if cached.0 != stamp {
            let book = match TokenBook::load(dir) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!("named tokens not loaded: {e}");
                    TokenBook::default()
                }
            };
            *cached = (stamp, Arc::new(book));
        }
        Arc::clone(&cached.1)
    }
}

/// Who made a change, as the audit log records it: the token's name, and the `user@host`
/// the client reported (`wire::ACTOR_HEADER`) when it did.
#[derive(Clone, Debug)]
pub(crate) struct Actor(pub(crate) String);

impl Actor {
    fn of(name: &str, headers: &HeaderMap) -> Actor {
        let reported: Option<String> = headers
            .get(wire::ACTOR_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.chars()
                    .filter(char::is_ascii_graphic)
                    .take(wire::ACTOR_MAX)
                    .collect()
            })
            .filter(|v: &String| !v.is_empty());
        Actor(match reported {
            Some(r) => format!("{name} ({r})"),
            None => name.to_string(),
        })
    }
}

/// Who may pass the gate: its tokens, and whether reads need one. The middleware's state,
/// apart from the API's so that the gate does not import what holds it.
#[derive(Clone, Debug)]
pub(crate) struct Access {
    pub(crate) gate: Arc<Gate>,
    pub(crate) open_reads: bool,
}

pub(crate) async fn authorize(State(st): State<Access>, mut req: Request, next: Next) -> Response {
    let mutation = req.method() != Method::GET && req.method() != Method::HEAD;
    if !mutation && st.open_reads {
        return next.run(req).await;
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    let unauthorized = |detail: &str| {
        let mut r = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", detail).into_response();
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        r
    };
    let Some(presented) = presented else {
        return unauthorized(
            "this endpoint needs `Authorization: Bearer TOKEN`; the operator token is in \
             operator.token and the read token in read.token in the endpoint's data directory, \
             or ask its operator for a named token (`gpuboard token add`)",
        );
    };
    let who = match st.gate.check(presented, SystemClock.now()) {
        Verdict::Unknown => {
            return unauthorized("the token is not valid for this endpoint (unknown or revoked)");
        }
        Verdict::Expired(name) => {
            return unauthorized(&format!(
                "the token `{name}` has expired; ask the endpoint's operator for a new one"
            ));
        }
        Verdict::Valid(who) => who,
    };
    if mutation && who.role == Role::Reader {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "the token `{}` may only read; changes need an operator token",
                who.name
            ),
        )
        .into_response();
    }
    let actor = Actor::of(&who.name, req.headers());
    req.extensions_mut().insert(actor);
    next.run(req).await
}
