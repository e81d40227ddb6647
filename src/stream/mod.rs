//! The per-run event hub: assigns nothing, decides nothing; it persists events and fans them out.
//!
//! Invariant (persist, then publish): an event reaches live subscribers only after it is in the
//! store, so a replay never disagrees with what a live client saw. One writer task batches
//! appends of all runs into few transactions; emitters wait only for room in its queue, never
//! for a subscriber, so a slow client can never slow a run.
//!
//! [`EventHub::follow`] is the read side: replay from the store, then live, with no gap and no
//! duplicate, falling back to the store whenever a subscriber lags behind. On PostgreSQL a run
//! may be written by another replica: its notices ([`EventHub::stored_elsewhere`]), or a look
//! at the store every [`SHARED_POLL`], send the reader back to the store.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::domain::{Event, EventKind, Run, RunId};
use crate::store::{self, Record, Store};

/// Most events written in one transaction.
const MAX_BATCH: usize = 512;
/// Events read from the store per replay page.
const REPLAY_PAGE: u32 = 512;

/// A run's live channel on this replica.
struct Channel {
    /// The events this replica writes, as they are stored.
    events: broadcast::Sender<Arc<Event>>,
    /// The highest seq other replicas said they stored for the run (Postgres notices).
    stored: watch::Sender<u64>,
}

/// How often a stream on a shared database looks at the store even without a notice, so a
/// notice lost while the listener reconnected delays events, never loses them.
const SHARED_POLL: Duration = Duration::from_secs(2);

enum Command {
    Append(Record),
    /// A run's end ([`Record::End`]), answered once its batch is stored: false when the
    /// store dropped it because another replica took the run over.
    End(Record, oneshot::Sender<bool>),
    /// Answered once everything queued before it is durable.
    Flush(oneshot::Sender<()>),
}

#[derive(Clone)]
pub struct EventHub {
    inner: Arc<Inner>,
}

/// A view of the writer's health that can be waited on.
pub struct Health(watch::Receiver<bool>);

impl Health {
    /// Completes once the store refuses writes; never if the hub is gone.
    pub async fn down(&mut self) {
        self.until(false).await;
    }

    /// Completes once the store takes writes again; never if the hub is gone.
    pub async fn up(&mut self) {
        self.until(true).await;
    }

    async fn until(&mut self, healthy: bool) {
        // The guard `wait_for` gives is dropped at once: it must not live across an await.
        if self.0.wait_for(|h| *h == healthy).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

struct Inner {
    store: Store,
    writer: mpsc::Sender<Command>,
    /// Live channels by run. A std mutex: every critical section is a map lookup or insert,
    /// never held across an await.
    channels: Mutex<HashMap<RunId, Channel>>,
    buffer: usize,
    /// Whether the writer can write: false while a batch keeps failing.
    healthy: watch::Receiver<bool>,
}

impl EventHub {
    /// Starts the writer task; it ends when every hub handle is dropped. The caller owns the
    /// returned handle.
    pub fn start(store: Store, buffer: usize) -> (EventHub, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(8192);
        let (health_tx, healthy) = watch::channel(true);
        let inner = Arc::new(Inner {
            store: store.clone(),
            writer: tx,
            channels: Mutex::new(HashMap::new()),
            buffer,
            healthy,
        });
        let weak = Arc::downgrade(&inner);
        let writer = tokio::spawn(writer_loop(store, rx, weak, health_tx));
        (EventHub { inner }, writer)
    }

    /// Whether records are being written. False from the moment a batch has failed
    /// [`FAILURES_BEFORE_DOWN`] times in a row until it is written: runs stop and `/readyz`
    /// says not ready meanwhile.
    pub fn is_healthy(&self) -> bool {
        *self.inner.healthy.borrow()
    }

    /// Whether the store takes a write now (a probe, for readiness): a full disk or a
    /// read-only file system still answers reads.
    pub async fn probe_write(&self) -> Result<(), store::Error> {
        self.inner.store.probe_write().await
    }

    /// Follows [`Self::is_healthy`].
    pub fn health(&self) -> Health {
        Health(self.inner.healthy.clone())
    }

    /// Queues the event `stamp` makes (stamping gives it its seq) so that events are queued
    /// in the order they are stamped: room in the writer's queue is reserved first, then the
    /// event is stamped and queued under `order`, with no await between. Two tasks of one run
    /// emitting at once could otherwise queue seq 89 before 88; a live reader would meet a gap
    /// the store could not fill yet, replay past it, and never see 88.
    pub async fn append_stamped(&self, order: &Mutex<()>, stamp: impl FnOnce() -> Event) {
        match self.inner.writer.reserve().await {
            Ok(slot) => {
                let _in_order = order.lock().expect("emit order lock");
                slot.send(Command::Append(Record::Event(Arc::new(stamp()))));
            }
            Err(_) => tracing::error!("event writer has stopped; record dropped"),
        }
    }

    /// Queues a run's end: its terminal row and the `final` event `stamp` makes (stamped in
    /// order, as [`Self::append_stamped`] does), written in one batch with what was queued
    /// before it and published after. True once stored; false when it was not stored because
    /// another replica took the run over, or the writer has stopped.
    pub async fn end(&self, order: &Mutex<()>, run: Run, stamp: impl FnOnce() -> Event) -> bool {
        let (tx, rx) = oneshot::channel();
        match self.inner.writer.reserve().await {
            Ok(slot) => {
                let _in_order = order.lock().expect("emit order lock");
                let event = Arc::new(stamp());
                let record = Record::End {
                    run: Box::new(run),
                    event,
                };
                slot.send(Command::End(record, tx));
            }
            Err(_) => return false,
        }
        rx.await.unwrap_or(false)
    }

    /// Queues any history record; it is written in order with the events around it.
    pub async fn record(&self, record: Record) {
        if self
            .inner
            .writer
            .send(Command::Append(record))
            .await
            .is_err()
        {
            tracing::error!("event writer has stopped; record dropped");
        }
    }

    /// Waits until every event queued so far is durable (and broadcast).
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.inner.writer.send(Command::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// A receiver of the run's live events. Subscribe *before* replaying history.
    pub fn subscribe(&self, run: RunId) -> broadcast::Receiver<Arc<Event>> {
        self.subscribe_both(run).0
    }

    /// The run's live events written here, and the seq other replicas announce.
    fn subscribe_both(
        &self,
        run: RunId,
    ) -> (broadcast::Receiver<Arc<Event>>, watch::Receiver<u64>) {
        let mut map = self.inner.channels.lock().expect("hub lock");
        let channel = map.entry(run).or_insert_with(|| Channel {
            events: broadcast::channel(self.inner.buffer).0,
            stored: watch::channel(0).0,
        });
        (channel.events.subscribe(), channel.stored.subscribe())
    }

    /// Another replica stored the run's events up to `seq`: streams following it here read
    /// them from the store.
    pub fn stored_elsewhere(&self, run: RunId, seq: u64) {
        let map = self.inner.channels.lock().expect("hub lock");
        if let Some(channel) = map.get(&run) {
            channel.stored.send_if_modified(|s| {
                let newer = seq > *s;
                *s = (*s).max(seq);
                newer
            });
        }
    }

    /// Drops the run's channel if nobody listens any more.
    fn release(&self, run: RunId) {
        let mut map = self.inner.channels.lock().expect("hub lock");
        if map
            .get(&run)
            .is_some_and(|c| c.events.receiver_count() == 0)
        {
            map.remove(&run);
        }
    }

    /// Number of live subscriptions (open event streams).
    pub fn open_streams(&self) -> usize {
        let map = self.inner.channels.lock().expect("hub lock");
        map.values().map(|c| c.events.receiver_count()).sum()
    }

    /// Every event of `run` with seq > `after`: history from the store, then live events until
    /// `final`, or until `stop` fires. Lagging falls back to the store; nothing is skipped or
    /// repeated. The stream also ends, empty, when the run has already ended at or before
    /// `after` (or ends while `after` is still ahead of it): nothing would ever follow.
    pub fn follow(
        &self,
        run: RunId,
        after: u64,
        stop: CancellationToken,
    ) -> impl Stream<Item = Result<Arc<Event>, store::Error>> + Send + 'static {
        let hub = self.clone();
        async_stream(move |tx| async move {
            let _guard = Release {
                hub: hub.clone(),
                run,
            };
            let live = hub.subscribe_both(run);
            let mut follower = Follower::new(hub, run, after, live, stop, tx);
            // Replay, then follow; every time the live side cannot prove continuity, replay
            // again.
            while follower.replay().await.is_continue() && follower.live().await.is_continue() {}
        })
    }

    /// Opens the live channel of a run that has stored no event yet, before its task starts:
    /// whoever follows it from there ([`Self::follow_opened`]) hears every event the run
    /// stores, so a new run's stream starts without reading the store.
    pub fn open_new(&self, run: RunId) -> Opened {
        let (rx, elsewhere) = self.subscribe_both(run);
        Opened {
            rx,
            elsewhere,
            release: Release {
                hub: self.clone(),
                run,
            },
        }
    }

    /// Every event of a run opened with [`Self::open_new`], from its first: live, and from
    /// the store only when the live side cannot prove continuity (a lag, another replica's
    /// notice), as [`Self::follow`] does.
    pub fn follow_opened(
        &self,
        opened: Opened,
        stop: CancellationToken,
    ) -> impl Stream<Item = Result<Arc<Event>, store::Error>> + Send + 'static {
        let hub = self.clone();
        async_stream(move |tx| async move {
            let Opened {
                rx,
                elsewhere,
                release,
            } = opened;
            let _guard = release;
            let run = _guard.run;
            let mut follower = Follower::new(hub, run, 0, (rx, elsewhere), stop, tx);
            if follower.live().await.is_continue() {
                while follower.replay().await.is_continue() && follower.live().await.is_continue() {
                }
            }
        })
    }
}

/// A new run's live channel, opened before its first event ([`EventHub::open_new`]).
/// Dropped unused, it closes the channel again.
pub struct Opened {
    // Fields drop in order: the receivers before the release that looks for receivers left.
    rx: broadcast::Receiver<Arc<Event>>,
    elsewhere: watch::Receiver<u64>,
    release: Release,
}

/// One reader of [`EventHub::follow`]: where it is (`last`, the seq it has been sent) and its
/// two sources, the store and the live channels. Each phase answers `Break` when the stream
/// is over (the reader left, `final` was sent, the run ended, or a store error was sent).
struct Follower {
    hub: EventHub,
    run: RunId,
    tx: mpsc::Sender<Result<Arc<Event>, store::Error>>,
    stop: CancellationToken,
    rx: broadcast::Receiver<Arc<Event>>,
    elsewhere: watch::Receiver<u64>,
    /// The database is shared with other replicas, which may write the run.
    shared: bool,
    /// Cleared if the notice channel closes, so a closed one cannot spin the loop.
    notices_open: bool,
    last: u64,
}

impl Follower {
    fn new(
        hub: EventHub,
        run: RunId,
        after: u64,
        (rx, elsewhere): (broadcast::Receiver<Arc<Event>>, watch::Receiver<u64>),
        stop: CancellationToken,
        tx: mpsc::Sender<Result<Arc<Event>, store::Error>>,
    ) -> Follower {
        let shared = hub.inner.store.shared();
        Follower {
            hub,
            run,
            tx,
            stop,
            rx,
            elsewhere,
            shared,
            notices_open: true,
            last: after,
        }
    }

    /// Sends the stored events after `last`, page by page; `Continue` when the run may still
    /// have more to come (live).
    async fn replay(&mut self) -> ControlFlow<()> {
        let store = &self.hub.inner.store;
        loop {
            let page = match store.events_after(self.run, self.last, REPLAY_PAGE).await {
                Ok(p) => p,
                Err(e) => {
                    let _ = self.tx.send(Err(e)).await;
                    return ControlFlow::Break(());
                }
            };
            let n = page.len();
            for ev in page {
                self.last = ev.seq;
                let is_final = ev.kind == EventKind::Final;
                if self.tx.send(Ok(Arc::new(ev))).await.is_err() || is_final {
                    return ControlFlow::Break(());
                }
            }
            if n < REPLAY_PAGE as usize {
                break;
            }
        }
        // Replay ended without `final`. If the run already ended at or before `last` (a
        // reader resuming after `final`, or one whose `after` is past the end), no live event
        // will ever come: end now instead of sending keep-alives forever. A run that is gone
        // (deleted) has nothing more to send either.
        match store.run_tail(self.run).await {
            Ok(Some(tail)) if !tail.ended_by(self.last) => ControlFlow::Continue(()),
            Ok(_) => ControlFlow::Break(()),
            Err(e) => {
                let _ = self.tx.send(Err(e)).await;
                ControlFlow::Break(())
            }
        }
    }

    /// Sends live events while they follow `last` without a gap; `Continue` when the store
    /// must fill in (a gap, a lag, another replica's notice, the shared database's poll).
    async fn live(&mut self) -> ControlFlow<()> {
        loop {
            // On a shared database the run may be written by another replica: its notices,
            // or a look at the store now and then, send the reader back to the store.
            let shared = self.shared;
            let poll = async {
                if shared {
                    tokio::time::sleep(SHARED_POLL).await
                } else {
                    std::future::pending().await
                }
            };
            let next = tokio::select! {
                _ = self.stop.cancelled() => return ControlFlow::Break(()),
                _ = self.tx.closed() => return ControlFlow::Break(()),
                r = self.rx.recv() => r,
                changed = self.elsewhere.changed(), if shared && self.notices_open => {
                    match changed {
                        Ok(()) if *self.elsewhere.borrow_and_update() > self.last => {
                            return ControlFlow::Continue(());
                        }
                        Ok(()) => continue,
                        Err(_) => {
                            self.notices_open = false;
                            continue;
                        }
                    }
                }
                () = poll => return ControlFlow::Continue(()),
            };
            match next {
                // `final` is always the last event: once it is broadcast nothing follows,
                // even when the reader asked for events past its seq.
                Ok(ev) if ev.seq <= self.last && ev.kind == EventKind::Final => {
                    return ControlFlow::Break(());
                }
                Ok(ev) if ev.seq <= self.last => continue,
                Ok(ev) if ev.seq == self.last + 1 => {
                    self.last = ev.seq;
                    let is_final = ev.kind == EventKind::Final;
                    if self.tx.send(Ok(ev)).await.is_err() || is_final {
                        return ControlFlow::Break(());
                    }
                }
                // A gap (we subscribed after it was broadcast) or a lag: everything broadcast
                // is already stored, so the store fills it in.
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                    return ControlFlow::Continue(());
                }
                Err(broadcast::error::RecvError::Closed) => {
                    // The hub is gone (shutdown); give what the store has and stop.
                    (self.rx, self.elsewhere) = self.hub.subscribe_both(self.run);
                    return ControlFlow::Continue(());
                }
            }
        }
    }
}

impl Inner {
    fn broadcast(&self, event: &Arc<Event>) {
        let map = self.channels.lock().expect("hub lock");
        if let Some(channel) = map.get(&event.run_id) {
            // No receivers is fine: nobody is watching this run right now.
            let _ = channel.events.send(event.clone());
        }
    }
}

struct Release {
    hub: EventHub,
    run: RunId,
}

impl Drop for Release {
    fn drop(&mut self) {
        self.hub.release(self.run);
    }
}

/// A small channel-backed stream: the producer future runs inside the stream, so dropping the
/// stream (a client disconnecting) drops the producer too.
fn async_stream<T, F, Fut>(f: F) -> impl Stream<Item = T> + Send + 'static
where
    T: Send + 'static,
    F: FnOnce(mpsc::Sender<T>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<T>(64);
    let producer = f(tx);
    futures::stream::unfold(
        (Some(Box::pin(producer)), rx),
        |(mut producer, mut rx)| async move {
            loop {
                match producer.as_mut() {
                    Some(p) => {
                        tokio::select! {
                            biased;
                            item = rx.recv() => return item.map(|i| (i, (producer, rx))),
                            _ = p.as_mut() => { producer = None; }
                        }
                    }
                    None => return rx.recv().await.map(|i| (i, (None, rx))),
                }
            }
        },
    )
}

async fn writer_loop(
    store: Store,
    mut rx: mpsc::Receiver<Command>,
    hub: std::sync::Weak<Inner>,
    health: watch::Sender<bool>,
) {
    let mut batch: Vec<Record> = Vec::with_capacity(MAX_BATCH);
    let mut waiters: Vec<oneshot::Sender<()>> = Vec::new();
    let mut ends: Vec<(RunId, oneshot::Sender<bool>)> = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(cmd) = next.take() {
            match cmd {
                Command::Append(ev) => batch.push(ev),
                Command::End(end, done) => {
                    ends.push((end.run_id(), done));
                    batch.push(end);
                }
                Command::Flush(w) => waiters.push(w),
            }
            if batch.len() >= MAX_BATCH {
                break;
            }
            next = rx.try_recv().ok();
        }
        if !batch.is_empty() {
            let lost = write_until_stored(&store, &batch, &health).await;
            // Persist, then publish: only now is the batch broadcast.
            if let Some(inner) = hub.upgrade() {
                for rec in &batch {
                    if let Some(ev) = rec.event()
                        && !lost.contains(&ev.run_id)
                    {
                        inner.broadcast(ev);
                    }
                }
            }
            batch.clear();
            for (run, done) in ends.drain(..) {
                let _ = done.send(!lost.contains(&run));
            }
        }
        for w in waiters.drain(..) {
            let _ = w.send(());
        }
    }
}

/// Consecutive failures of one batch after which the store counts as down.
pub const FAILURES_BEFORE_DOWN: u32 = 4;
/// Longest pause between two tries of a failing batch.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(1);

/// Writes a batch, trying again until it is stored: a batch is never dropped, and nothing of
/// it is published before it is stored. A brief failure (a busy database) is retried quietly;
/// after [`FAILURES_BEFORE_DOWN`] failures the store is reported down (runs stop where they
/// are, to resume once it is back), and up again once the batch is written.
///
/// Returns the runs whose records the store dropped because another replica took them over:
/// what they queued must not be published either.
async fn write_until_stored(
    store: &Store,
    batch: &[Record],
    health: &watch::Sender<bool>,
) -> HashSet<RunId> {
    let mut delay = Duration::from_millis(20);
    let mut failures = 0u32;
    loop {
        match store.append(batch).await {
            Ok(lost) => {
                if !*health.borrow() {
                    tracing::info!("the store takes writes again");
                    health.send_replace(true);
                }
                if !lost.is_empty() {
                    tracing::warn!(runs = ?lost, "records of runs another replica took over were dropped");
                }
                return lost;
            }
            Err(e) => {
                failures += 1;
                if failures == FAILURES_BEFORE_DOWN {
                    tracing::error!(error = ?e, records = batch.len(), "the store refuses writes; runs stop until it is back");
                    health.send_replace(false);
                } else if failures < FAILURES_BEFORE_DOWN {
                    tracing::warn!(error = %e, failures, "appending events failed; retrying");
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_RETRY_DELAY);
            }
        }
    }
}
