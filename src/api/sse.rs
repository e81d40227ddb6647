//! A run's events as a Server-Sent Events body (CONTRACT.md, "SSE framing"): every event
//! that is ready when the body is polled goes out as one chunk, one socket write, instead of
//! one chunk per event; a `: keep-alive` comment follows each quiet interval.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};

use crate::domain::Event;
use crate::store;

/// Events encoded into one chunk at most; enough to amortise a write, small enough that a
/// client sees the first of them without waiting on a large encode.
const MAX_FRAMES_PER_CHUNK: usize = 256;

const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// The SSE response for `events` (replay, then live, then `final`). A store error ends the
/// stream (it is logged); the client reconnects with `Last-Event-ID`.
pub fn response(
    events: impl Stream<Item = Result<Arc<Event>, store::Error>> + Send + 'static,
    keep_alive: Duration,
) -> Response {
    let chunks = Box::pin(events.ready_chunks(MAX_FRAMES_PER_CHUNK));
    let quiet = Box::pin(tokio::time::sleep(keep_alive));
    let body =
        futures::stream::unfold((chunks, quiet), move |(mut chunks, mut quiet)| async move {
            quiet
                .as_mut()
                .reset(tokio::time::Instant::now() + keep_alive);
            let bytes = tokio::select! {
                batch = chunks.next() => encode(batch?)?,
                () = quiet.as_mut() => Bytes::from_static(KEEP_ALIVE),
            };
            Some((Ok::<_, std::convert::Infallible>(bytes), (chunks, quiet)))
        });
    let mut resp = Body::from_stream(body).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies (nginx) must not buffer the stream.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// The frames of `batch` in one buffer; `None` (the end of the stream) at a store error,
/// after the frames before it.
fn encode(batch: Vec<Result<Arc<Event>, store::Error>>) -> Option<Bytes> {
    let mut buf = Vec::with_capacity(batch.len() * 256);
    for item in batch {
        match item {
            Ok(ev) => frame(&mut buf, &ev),
            Err(e) => {
                tracing::error!(error = ?e, "reading events failed; closing the stream");
                return (!buf.is_empty()).then(|| buf.into());
            }
        }
    }
    Some(buf.into())
}

/// `id: <seq>`, `event: <kind>`, `data: <the event as JSON>`, a blank line. serde_json
/// escapes every newline inside strings, so the data is always one line.
fn frame(buf: &mut Vec<u8>, ev: &Event) {
    use std::io::Write as _;
    let _ = write!(buf, "id: {}\nevent: {}\ndata: ", ev.seq, ev.kind.as_str());
    serde_json::to_writer(&mut *buf, ev).expect("an event serialises");
    buf.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{EventKind, Payload, RunId};

    fn event(seq: u64, text: &str) -> Arc<Event> {
        Arc::new(Event {
            seq,
            run_id: RunId::new(),
            kind: EventKind::Token,
            ts: chrono::Utc::now(),
            step_id: None,
            path: None,
            data: Payload::token(text),
        })
    }

    #[test]
    fn ready_events_share_one_chunk_and_stay_one_frame_each() {
        let chunk = encode(vec![Ok(event(1, "a\nb")), Ok(event(2, "c"))]).unwrap();
        let text = std::str::from_utf8(&chunk).unwrap();
        let frames: Vec<&str> = text.split_terminator("\n\n").collect();
        assert_eq!(frames.len(), 2, "{text}");
        for (frame, seq) in frames.iter().zip(1..) {
            let lines: Vec<&str> = frame.lines().collect();
            assert_eq!(lines[0], format!("id: {seq}"));
            assert_eq!(lines[1], "event: token");
            let data: serde_json::Value =
                serde_json::from_str(lines[2].strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(data["seq"], seq);
            assert_eq!(
                lines.len(),
                3,
                "a newline in the text stays escaped: {frame}"
            );
        }
    }
}
