//! The HTTP server loop: accepts connections and serves a router on each over HTTP/1.1, with
//! the limits a server open to slow, silent or hostile clients needs (`axum::serve` has none):
//!
//! - a header-read timeout (hyper's): a client that is slow to send its request headers, opens
//!   a connection and sends nothing, or leaves a keep-alive connection idle, is disconnected
//!   after `server.header_read_timeout_secs`;
//! - a connection limit: at most `server.max_connections` are served at once; past it up to
//!   [`OVERFLOW_CONNECTIONS`] more are answered 503 and closed, and further ones wait in the
//!   kernel's accept queue, so clients can never exhaust the process's file descriptors;
//! - a bounded stop: once `stop` fires nothing new is accepted, open connections finish the
//!   response in hand and close, and whatever is still open after the grace period is dropped.
//!   A request with no response in hand is not waited for: a connection that has not yet
//!   sent a whole request head is closed at once (hyper would wait for the head), and a
//!   request still sending its body is answered 503 at once (the body reader watches the stop,
//!   [`super::extract::ServerStop`]).
//!
//! Request bodies are timed by the JSON extractor ([`super::extract`]), the only body reader.
//! This module knows connections, not routes: it serves whatever router it is given.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::Request;
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::error::ApiError;
use crate::config::ServerConfig;

/// Connections answered 503 at once past `max_connections`. Small: each holds a descriptor
/// for as long as its client takes to send a request (at most the header timeout).
pub const OVERFLOW_CONNECTIONS: usize = 64;

/// Descriptors kept for everything but client connections: the database pool (each
/// connection with its WAL and shared-memory files), the LLM provider's HTTP pool, logs.
const RESERVED_FDS: usize = 128;

/// The connection-level limits, resolved from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    pub header_read_timeout: Duration,
    /// Already fitted to the process's open-file limit.
    pub max_connections: usize,
    /// How long open connections may take to finish once `stop` fires.
    pub grace: Duration,
}

impl ServerLimits {
    /// Reads the limits, raising the open-file limit as needed and lowering `max_connections`
    /// (with a warning) when even the raised limit cannot hold them.
    pub fn from_config(config: &ServerConfig) -> ServerLimits {
        ServerLimits {
            header_read_timeout: Duration::from_secs(config.header_read_timeout_secs),
            max_connections: fit_to_fd_limit(config.max_connections),
            grace: Duration::from_secs(config.shutdown_grace_secs),
        }
    }
}

/// A reserved place for one accepted connection.
enum Slot {
    Served(OwnedSemaphorePermit),
    /// Past `max_connections`: the connection is told to come back later.
    Overflow(OwnedSemaphorePermit),
}

/// Serves `router` on `listener` until `stop` fires, then drains as described in the module
/// documentation. Returns once every connection is closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    stop: CancellationToken,
) {
    let served = Arc::new(Semaphore::new(limits.max_connections));
    let overflow = Arc::new(Semaphore::new(OVERFLOW_CONNECTIONS));
    let busy = busy_router();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let mut http_busy = http.clone();
    http_busy.keep_alive(false);
    let mut connections: JoinSet<()> = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Some((tcp, peer, slot)) = next_connection(&listener, &served, &overflow, &stop).await
        else {
            break;
        };
        // Set once hyper hands the connection's first request to the router. hyper's
        // graceful shutdown closes a connection between requests at once, but waits for the
        // first request's head however long it takes to arrive.
        let started = Arc::new(AtomicBool::new(false));
        let (builder, service, permit) = match slot {
            Slot::Served(p) => (&http, router.clone(), p),
            Slot::Overflow(p) => {
                // Once per burst, not once per connection: a flood must not flood the logs.
                if overflow.available_permits() == OVERFLOW_CONNECTIONS - 1 {
                    tracing::warn!(
                        limit = limits.max_connections,
                        "connection limit reached; answering 503 to new connections"
                    );
                }
                tracing::debug!(%peer, "over the connection limit: 503");
                (&http_busy, busy.clone(), p)
            }
        };
        let first = started.clone();
        let service = service.map_request(move |req: Request<Incoming>| {
            first.store(true, Ordering::Relaxed);
            req
        });
        let conn = builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service));
        let stop = stop.clone();
        connections.spawn(async move {
            let mut conn = std::pin::pin!(conn);
            let ended = tokio::select! {
                r = conn.as_mut() => r,
                _ = stop.cancelled() => {
                    if started.load(Ordering::Relaxed) {
                        // Finish the response in hand (event streams end on the same token),
                        // then close; a connection between requests closes at once.
                        conn.as_mut().graceful_shutdown();
                        conn.as_mut().await
                    } else {
                        // No request yet, or half of its head: nothing to finish.
                        Ok(())
                    }
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            // Free the place before the socket closes (when `conn` drops), so a client that
            // sees the close can count on the place being free.
            drop(permit);
        });
    }
    drop(listener);
    drain(connections, limits.grace).await;
}

/// The next accepted connection with the place reserved for it, or `None` once `stop` fires.
/// The place is reserved before accepting: with every place taken, new connections stay in
/// the kernel's queue instead of costing this process a descriptor each.
async fn next_connection(
    listener: &TcpListener,
    served: &Arc<Semaphore>,
    overflow: &Arc<Semaphore>,
    stop: &CancellationToken,
) -> Option<(TcpStream, SocketAddr, Slot)> {
    loop {
        let slot = tokio::select! {
            biased;
            _ = stop.cancelled() => return None,
            Ok(p) = served.clone().acquire_owned() => Slot::Served(p),
            Ok(p) = overflow.clone().acquire_owned() => Slot::Overflow(p),
        };
        let accepted = tokio::select! {
            biased;
            _ = stop.cancelled() => return None,
            r = listener.accept() => r,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Out of descriptors or memory: back off instead of spinning on the error.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::select! {
                    _ = stop.cancelled() => return None,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        // Without TCP_NODELAY, small SSE frames wait for the peer's delayed ACK (~40 ms).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY");
        }
        // A served place may have freed while this connection waited for an overflow one.
        let slot = match slot {
            Slot::Overflow(p) => match served.clone().try_acquire_owned() {
                Ok(s) => {
                    drop(p);
                    Slot::Served(s)
                }
                Err(_) => Slot::Overflow(p),
            },
            served => served,
        };
        return Some((tcp, peer, slot));
    }
}

/// Waits for the open connections to finish, at most `grace`; then drops what is left.
async fn drain(mut connections: JoinSet<()>, grace: Duration) {
    if connections.is_empty() {
        return;
    }
    tracing::info!(
        connections = connections.len(),
        "waiting for open connections"
    );
    let drained = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = connections.len(),
            grace_secs = grace.as_secs(),
            "connections still open after the shutdown grace period; closing them"
        );
        connections.shutdown().await;
    }
}

/// The router of connections past the limit: every request gets 503 with `Retry-After`.
fn busy_router() -> Router {
    Router::new().fallback(|| async {
        let mut resp =
            ApiError::Unavailable("the server has too many open connections; retry shortly".into())
                .into_response();
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        resp
    })
}

/// Errors of one connection that went away before it was accepted: try the next one.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// `wanted` connections, or as many as the open-file limit allows once raised as far as the
/// process may (its hard limit), keeping [`RESERVED_FDS`] and the overflow places aside.
#[cfg(unix)]
fn fit_to_fd_limit(wanted: usize) -> usize {
    let needed = wanted
        .saturating_add(OVERFLOW_CONNECTIONS)
        .saturating_add(RESERVED_FDS);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return wanted;
    }
    let needed_rlim = needed as libc::rlim_t;
    if lim.rlim_cur != libc::RLIM_INFINITY && lim.rlim_cur < needed_rlim {
        let raised = libc::rlimit {
            rlim_cur: if lim.rlim_max == libc::RLIM_INFINITY {
                needed_rlim
            } else {
                needed_rlim.min(lim.rlim_max)
            },
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit only reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = raised.rlim_cur;
        }
    }
    if lim.rlim_cur == libc::RLIM_INFINITY || lim.rlim_cur >= needed_rlim {
        return wanted;
    }
    let fits = (lim.rlim_cur as usize)
        .saturating_sub(RESERVED_FDS + OVERFLOW_CONNECTIONS)
        .max(1);
    tracing::warn!(
        configured = wanted,
        open_file_limit = lim.rlim_cur,
        max_connections = fits,
        "server.max_connections does not fit the open-file limit; lowered"
    );
    fits
}

#[cfg(not(unix))]
fn fit_to_fd_limit(wanted: usize) -> usize {
    wanted
}
