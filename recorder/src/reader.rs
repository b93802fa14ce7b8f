//! The stream reader: one thread that reads every streaming response's socket.
//!
//! A request's task (tokio) connects (or takes a kept-alive connection) and writes the request
//! (over TLS it reads the response head too); then it hands the connection and the request's
//! state to this thread and waits for them to come back. The thread runs a level-triggered
//! `epoll_wait` over every response it holds and, for each socket reported readable, makes one
//! read, stamps it with the kernel's receive time and frames, parses and classifies its bytes
//! right there: one wake-up and one read per arrival, as the benchmark's epoll floor does,
//! with no task, waker or timer per stream and no hand-off per chunk. Deadlines are one heap for all streams, checkpoint times another.
//!
//! Why a thread of its own rather than tokio tasks: with a task per stream, every arrival
//! wakes tokio's I/O driver, schedules the task, polls its future (and the timers and the
//! cancel receiver it selects on) and often wakes the other worker thread. docs/PERFORMANCE.md
//! measures the difference.

use crate::epoll::Epoll;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::time::Instant;

/// A response (its head still to come, or its body) the reader reads for its request's task;
/// `C` is what every response shares (the run's `StreamContext`), the reader's own copy.
pub trait Tenant<C>: Send {
    /// The socket to watch.
    fn fd(&self) -> RawFd;
    /// The request id (what [`Reader::cancel`] names).
    fn key(&self) -> u64;
    /// Just adopted: what arrived before the hand-off and is held in user space (TLS
    /// plaintext rustls decrypted already). True when the response is over.
    fn adopted(&mut self, ctx: &C) -> bool;
    /// The socket is readable: one read. True when the response is over.
    fn readable(&mut self, ctx: &C) -> bool;
    /// When the response times out (or its drain after `[DONE]` ends).
    fn deadline(&self) -> Instant;
    /// The deadline passed: the response ends.
    fn expired(&mut self, ctx: &C);
    /// The run was interrupted: the response ends as cancelled.
    fn cancelled(&mut self, ctx: &C);
    /// When the body's next tick (checkpoint) is due.
    fn next_tick(&self) -> Instant;
    /// Its tick is due: the body checkpoints and moves [`Tenant::next_tick`] on.
    fn tick(&mut self, ctx: &C);
    /// The socket could not be watched, or the reader failed on this response: it ends with
    /// `error`.
    fn unwatchable(&mut self, ctx: &C, error: &io::Error);
    /// Back to the request's task (the socket is out of the reader's epoll by then).
    fn hand_back(self: Box<Self>);
}

/// What the tasks tell the reader.
enum Message<C> {
    Adopt(Box<dyn Tenant<C>>),
    Cancel(u64),
}

/// The handle the request tasks share; dropping the last one stops the thread (any body still
/// held ends as cancelled and goes back first).
pub struct Reader<C> {
    tx: Option<mpsc::Sender<Message<C>>>,
    wake: std::sync::Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
}

impl<C: Send + 'static> Reader<C> {
    /// Starts the reader thread; `ctx` is what its streams share (the reader's own copy),
    /// `ticking` whether its bodies tick (checkpoint), each when its [`Tenant::next_tick`] says.
    pub fn spawn(ctx: C, ticking: bool) -> io::Result<Reader<C>> {
        let epoll = Epoll::new()?;
        let wake = std::sync::Arc::new(EventFd::new()?);
        epoll.ctl(
            libc::EPOLL_CTL_ADD,
            wake.fd.as_raw_fd(),
            READABLE,
            WAKE_TOKEN,
        )?;
        let (tx, rx) = mpsc::channel();
        let thread_wake = wake.clone();
        let thread = std::thread::Builder::new()
            .name("tokentrace-reader".into())
            .spawn(move || Loop::new(ctx, epoll, thread_wake, rx, ticking).run())?;
        Ok(Reader {
            tx: Some(tx),
            wake,
            thread: Some(thread),
        })
    }

    /// Hands `tenant` to the reader; it comes back through its own `hand_back`. Err gives it
    /// back at once when the reader thread is gone.
    pub fn adopt(&self, tenant: Box<dyn Tenant<C>>) -> Result<(), Box<dyn Tenant<C>>> {
        let Some(tx) = &self.tx else {
            return Err(tenant);
        };
        match tx.send(Message::Adopt(tenant)) {
            Ok(()) => {
                self.wake.signal();
                Ok(())
            }
            Err(mpsc::SendError(Message::Adopt(tenant))) => Err(tenant),
            Err(_) => unreachable!("the message sent was an adoption"),
        }
    }

    /// Ends request `key`'s response as cancelled, if the reader holds it.
    pub fn cancel(&self, key: u64) {
        if let Some(tx) = &self.tx {
            if tx.send(Message::Cancel(key)).is_ok() {
                self.wake.signal();
            }
        }
    }
}

impl<C> Drop for Reader<C> {
    fn drop(&mut self) {
        // A closed channel is the thread's signal to stop.
        drop(self.tx.take());
        self.wake.signal();
        // The last handle can be dropped on the reader thread itself (a closed loop's state,
        // which holds one, released there): it then stops at its next wake-up, unjoined.
        if let Some(thread) = self
            .thread
            .take()
            .filter(|t| t.thread().id() != std::thread::current().id())
        {
            let _ = thread.join();
        }
    }
}

/// What the reader waits for on every descriptor (level-triggered: a socket with bytes left
/// after a read is reported again by the next wait, so one read per readiness loses nothing).
const READABLE: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;

/// The epoll token of the wake-up eventfd (a stream's token is its slot and generation, never
/// this).
const WAKE_TOKEN: u64 = u64::MAX;
/// Ready sockets taken per `epoll_wait`.
const MAX_EVENTS: usize = 256;
/// The longest `epoll_wait`: every wait is bounded, deadlines or not.
const MAX_WAIT: Duration = Duration::from_secs(1);

/// A slot: the stream it holds, if any, and the slot's generation.
type Slot<C> = (Option<Box<dyn Tenant<C>>>, u32);

/// The reader thread's state.
struct Loop<C> {
    ctx: C,
    epoll: Epoll,
    wake: std::sync::Arc<EventFd>,
    rx: mpsc::Receiver<Message<C>>,
    /// Streams by slot, with the slot's generation (a token names both, so a stale event for
    /// a slot reused within one batch is not taken for the new stream's).
    slots: Vec<Slot<C>>,
    free: Vec<u32>,
    by_key: HashMap<u64, u32>,
    /// (deadline, slot, generation), earliest first; an entry whose stream has moved its
    /// deadline (or gone) is skipped when it comes up.
    deadlines: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    /// (tick due, slot, generation), earliest first, one entry per body held when bodies
    /// tick (None: they do not). A body is touched only when its own tick is due, so a
    /// thousand quiet bodies cost nothing between their checkpoints; an entry of a body gone
    /// is dropped when it comes up, within one period.
    ticks: Option<BinaryHeap<Reverse<(Instant, u32, u32)>>>,
    closing: bool,
}

/// The least time between two ticks of one body: a tick period of a few nanoseconds would
/// spin the thread.
const MIN_TICK_GAP: Duration = Duration::from_millis(1);

impl<C> Loop<C> {
    fn new(
        ctx: C,
        epoll: Epoll,
        wake: std::sync::Arc<EventFd>,
        rx: mpsc::Receiver<Message<C>>,
        ticking: bool,
    ) -> Loop<C> {
        let ticks = ticking.then(BinaryHeap::new);
        Loop {
            ctx,
            epoll,
            wake,
            rx,
            slots: Vec::new(),
            free: Vec::new(),
            by_key: HashMap::new(),
            deadlines: BinaryHeap::new(),
            ticks,
            closing: false,
        }
    }

    fn run(mut self) {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS];
        loop {
            let n = match self.epoll.wait(&mut events, self.wait_for()) {
                Ok(n) => n,
                // Nothing here can make epoll_wait fail but a bug: every body held ends with
                // the error rather than the thread spinning, and the reader stops.
                Err(err) => {
                    self.fail_all(&err);
                    self.closing = true;
                    0
                }
            };
            for event in &events[..n] {
                let token = event.u64;
                if token == WAKE_TOKEN {
                    self.wake.drain();
                    self.take_messages();
                } else {
                    self.on_ready(token);
                }
            }
            let now = Instant::now();
            self.expire(now);
            self.tick_due(now);
            if self.closing {
                // Whatever is still held ends as cancelled and goes back.
                let held: Vec<u32> = self.by_key.values().copied().collect();
                for slot in held {
                    if let Some(tenant) = self.slots[slot as usize].0.as_mut() {
                        guarded(&self.ctx, tenant.as_mut(), |t, ctx| t.cancelled(ctx));
                    }
                    self.release(slot);
                }
                return;
            }
        }
    }

    /// Ticks every body whose tick is due by `now`, and only those.
    fn tick_due(&mut self, now: Instant) {
        let Some(ticks) = self.ticks.as_mut() else {
            return;
        };
        // Bodies whose tick panicked: released once the heap is no longer borrowed.
        let mut failed = Vec::new();
        while let Some(&Reverse((at, slot, generation))) = ticks.peek() {
            if at > now {
                break;
            }
            ticks.pop();
            let Some((Some(tenant), held)) = self.slots.get_mut(slot as usize) else {
                continue;
            };
            // An entry of an earlier body in the slot.
            if *held != generation {
                continue;
            }
            // Due unless the body moved its tick later since the entry was made.
            if tenant.next_tick() <= now
                && guarded(&self.ctx, tenant.as_mut(), |t, ctx| t.tick(ctx)).is_none()
            {
                failed.push(slot);
                continue;
            }
            let next = tenant.next_tick().max(now + MIN_TICK_GAP);
            ticks.push(Reverse((next, slot, generation)));
        }
        for slot in failed {
            self.release(slot);
        }
    }

    /// Ends every body held with `error` and hands it back.
    fn fail_all(&mut self, error: &io::Error) {
        let held: Vec<u32> = self.by_key.values().copied().collect();
        for slot in held {
            if let Some(tenant) = self.slots[slot as usize].0.as_mut() {
                guarded(&self.ctx, tenant.as_mut(), |t, ctx| {
                    t.unwatchable(ctx, error)
                });
            }
            self.release(slot);
        }
    }

    /// How long the next `epoll_wait` may sleep: to the earliest deadline or tick, at most
    /// [`MAX_WAIT`].
    fn wait_for(&self) -> Duration {
        let now = Instant::now();
        let mut until = now + MAX_WAIT;
        if let Some(Reverse((at, _, _))) = self.deadlines.peek() {
            until = until.min(*at);
        }
        if let Some(Reverse((at, _, _))) = self.ticks.as_ref().and_then(BinaryHeap::peek) {
            until = until.min(*at);
        }
        until.saturating_duration_since(now)
    }

    fn take_messages(&mut self) {
        loop {
            match self.rx.try_recv() {
                Ok(Message::Adopt(tenant)) => self.adopt(tenant),
                Ok(Message::Cancel(key)) => {
                    if let Some(&slot) = self.by_key.get(&key) {
                        if let Some(tenant) = self.slots[slot as usize].0.as_mut() {
                            guarded(&self.ctx, tenant.as_mut(), |t, ctx| t.cancelled(ctx));
                        }
                        self.release(slot);
                    }
                }
                Err(mpsc::TryRecvError::Empty) => return,
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.closing = true;
                    return;
                }
            }
        }
    }

    fn adopt(&mut self, mut tenant: Box<dyn Tenant<C>>) {
        // Over (or failed) with what was held already: back at once.
        if guarded(&self.ctx, tenant.as_mut(), |t, ctx| t.adopted(ctx)) != Some(false) {
            return tenant.hand_back();
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push((None, 0));
                (self.slots.len() - 1) as u32
            }
        };
        let generation = self.slots[slot as usize].1.wrapping_add(1);
        let token = u64::from(generation) << 32 | u64::from(slot);
        if let Err(err) = self
            .epoll
            .ctl(libc::EPOLL_CTL_ADD, tenant.fd(), READABLE, token)
        {
            // The socket cannot be watched: the response cannot be read here.
            self.free.push(slot);
            tenant.unwatchable(&self.ctx, &err);
            return tenant.hand_back();
        }
        self.deadlines
            .push(Reverse((tenant.deadline(), slot, generation)));
        if let Some(ticks) = self.ticks.as_mut() {
            ticks.push(Reverse((tenant.next_tick(), slot, generation)));
        }
        self.by_key.insert(tenant.key(), slot);
        self.slots[slot as usize] = (Some(tenant), generation);
    }

    fn on_ready(&mut self, token: u64) {
        let slot = (token & u64::from(u32::MAX)) as u32;
        let generation = (token >> 32) as u32;
        let Some((Some(tenant), held)) = self.slots.get_mut(slot as usize) else {
            return;
        };
        if *held != generation {
            return;
        }
        let before = tenant.deadline();
        if guarded(&self.ctx, tenant.as_mut(), |t, ctx| t.readable(ctx)) != Some(false) {
            return self.release(slot);
        }
        let after = tenant.deadline();
        if after != before {
            self.deadlines.push(Reverse((after, slot, generation)));
            // A body held for many responses (a closed loop's chain) moves its deadline
            // twice a response and is never released in between.
            self.prune_deadlines();
        }
    }

    /// Ends every stream whose deadline passed by `now`.
    fn expire(&mut self, now: Instant) {
        while let Some(&Reverse((at, slot, generation))) = self.deadlines.peek() {
            if at > now {
                return;
            }
            self.deadlines.pop();
            let Some((Some(tenant), held)) = self.slots.get_mut(slot as usize) else {
                continue;
            };
            // An entry for an earlier stream in the slot, or one the stream has moved.
            if *held != generation || tenant.deadline() != at {
                continue;
            }
            guarded(&self.ctx, tenant.as_mut(), |t, ctx| t.expired(ctx));
            self.release(slot);
        }
    }

    /// Takes `slot`'s stream out of the epoll set and hands it back.
    fn release(&mut self, slot: u32) {
        let Some(tenant) = self.slots[slot as usize].0.take() else {
            return;
        };
        // Out of this epoll before its task can register the socket with tokio again. A
        // failure leaves nothing to undo: the socket goes back (or is closed) either way.
        let _ = self.epoll.ctl(libc::EPOLL_CTL_DEL, tenant.fd(), 0, 0);
        self.by_key.remove(&tenant.key());
        self.free.push(slot);
        tenant.hand_back();
        self.prune_deadlines();
    }

    /// Drops the heaps' entries that no longer count once they outnumber the streams held
    /// several times over: a finished request's total deadline (600 s by default), a deadline
    /// a body moved, or its next checkpoint under a long `--checkpoint-every`, would otherwise
    /// stay in a heap, and a long run would grow it without bound.
    fn prune_deadlines(&mut self) {
        let bound = 4 * self.by_key.len() + 1024;
        let slots = &self.slots;
        if self.deadlines.len() > bound {
            self.deadlines.retain(|Reverse((at, slot, generation))| {
                matches!(
                    slots.get(*slot as usize),
                    Some((Some(tenant), held)) if held == generation && tenant.deadline() == *at
                )
            });
        }
        if let Some(ticks) = self.ticks.as_mut().filter(|ticks| ticks.len() > bound) {
            // A body held has exactly one entry: the one its slot and generation name.
            ticks.retain(|Reverse((_, slot, generation))| {
                matches!(slots.get(*slot as usize), Some((Some(_), held)) if held == generation)
            });
        }
    }
}

/// Runs `call` on one tenant. A panic in it (a bug met in one response) ends that response,
/// with the panic's message as its error, instead of the reader thread and every body it
/// holds; None then, and the caller hands the tenant back.
fn guarded<C, T>(
    ctx: &C,
    tenant: &mut dyn Tenant<C>,
    call: impl FnOnce(&mut dyn Tenant<C>, &C) -> T,
) -> Option<T> {
    let panic = match std::panic::catch_unwind(AssertUnwindSafe(|| call(&mut *tenant, ctx))) {
        Ok(out) => return Some(out),
        Err(panic) => panic,
    };
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    let error = io::Error::other(format!("the stream reader failed on this response: {what}"));
    // Recording the failure may meet the same bug: the response then goes back as it is.
    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| tenant.unwatchable(ctx, &error)));
    None
}

/// An eventfd that wakes the reader thread for its messages, written only when no wake-up is
/// pending: while the thread is busy, the adoptions of many requests share one `write` and
/// one `read` of it instead of costing a pair each.
struct EventFd {
    fd: OwnedFd,
    /// Set by the first signal since the thread last took its messages. Swapped on both
    /// sides, so a sender that finds it set knows the thread swaps it back only after its
    /// message is in the channel (the swap makes that message visible to the thread's
    /// `try_recv` that follows).
    pending: AtomicBool,
}

impl EventFd {
    fn new() -> io::Result<EventFd> {
        // SAFETY: a plain system call; the descriptor is owned below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(EventFd {
            // SAFETY: `fd` is a fresh descriptor nobody else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            pending: AtomicBool::new(false),
        })
    }

    /// Wakes the thread, after a message was sent, unless a wake-up is pending already.
    fn signal(&self) {
        if self.pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64. A full counter (never, at 2^64 - 2) would
        // only mean the thread is already woken.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Takes the wake-up; the thread then takes every message sent before the next signal.
    fn drain(&self) {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN (nothing pending) is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        self.pending.swap(false, Ordering::AcqRel);
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
