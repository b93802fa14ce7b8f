//! The stream reader's loop driven with sockets of the tests' own: a `Fake` body collects
//! what arrives until a `.`, and says on its way back how it ended.

use super::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{Receiver, Sender};

/// A test body: collects what arrives on its socket until a `.`, and says what happened to
/// it when it comes back.
struct Fake {
    key: u64,
    socket: UnixStream,
    got: Vec<u8>,
    deadline: Instant,
    ending: Option<&'static str>,
    ticks: u32,
    /// When its next tick is due, and the period after each (None: it never ticks again).
    next_tick: Instant,
    tick_every: Option<Duration>,
    /// Watch this descriptor instead of the socket.
    watch: Option<RawFd>,
    /// Where its ticks are noted, by key.
    tick_log: Option<std::sync::Arc<std::sync::Mutex<Vec<u64>>>>,
    /// Over as soon as it is adopted.
    over_at_adoption: bool,
    /// A read moves the deadline here.
    read_moves_deadline_to: Option<Instant>,
    /// Moves its deadline this much later on every read (a chain of responses).
    read_moves_deadline_by: Option<Duration>,
    /// A read panics.
    panics_on_read: bool,
    /// The error it ended with.
    error: Option<String>,
    back: Sender<Box<Fake>>,
}

impl Fake {
    /// A body for `key` and the other end of its socket.
    fn new(key: u64, deadline: Duration, back: &Sender<Box<Fake>>) -> (Box<Fake>, UnixStream) {
        let (socket, peer) = UnixStream::pair().unwrap();
        socket.set_nonblocking(true).unwrap();
        let fake = Fake {
            key,
            socket,
            got: Vec::new(),
            deadline: Instant::now() + deadline,
            ending: None,
            ticks: 0,
            next_tick: Instant::now() + NEVER,
            tick_every: None,
            watch: None,
            tick_log: None,
            over_at_adoption: false,
            read_moves_deadline_to: None,
            read_moves_deadline_by: None,
            panics_on_read: false,
            error: None,
            back: back.clone(),
        };
        (Box::new(fake), peer)
    }
}

impl Tenant<()> for Fake {
    fn fd(&self) -> RawFd {
        self.watch.unwrap_or(self.socket.as_raw_fd())
    }
    fn key(&self) -> u64 {
        self.key
    }
    fn adopted(&mut self, _: &()) -> bool {
        if self.over_at_adoption {
            self.ending = Some("over at adoption");
        }
        self.over_at_adoption
    }
    fn readable(&mut self, _: &()) -> bool {
        assert!(!self.panics_on_read, "a bug met in body {}", self.key);
        if let Some(at) = self.read_moves_deadline_to.take() {
            self.deadline = at;
        }
        if let Some(step) = self.read_moves_deadline_by {
            self.deadline += step;
        }
        let mut buf = [0u8; 3];
        match self.socket.read(&mut buf) {
            Ok(0) => self.ending = Some("closed"),
            Ok(n) => {
                self.got.extend_from_slice(&buf[..n]);
                if self.got.ends_with(b".") {
                    self.ending = Some("done");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => self.ending = Some("error"),
        }
        self.ending.is_some()
    }
    fn deadline(&self) -> Instant {
        self.deadline
    }
    fn expired(&mut self, _: &()) {
        self.ending = Some("expired");
    }
    fn cancelled(&mut self, _: &()) {
        self.ending = Some("cancelled");
    }
    fn next_tick(&self) -> Instant {
        self.next_tick
    }
    fn tick(&mut self, _: &()) {
        assert!(
            self.next_tick <= Instant::now(),
            "ticked before its tick was due"
        );
        self.next_tick = Instant::now() + self.tick_every.unwrap_or(NEVER);
        self.ticks += 1;
        if let Some(log) = &self.tick_log {
            log.lock().unwrap().push(self.key);
        }
    }
    fn unwatchable(&mut self, _: &(), error: &io::Error) {
        self.ending = Some("unwatchable");
        self.error = Some(error.to_string());
    }
    fn hand_back(self: Box<Self>) {
        let back = self.back.clone();
        back.send(self).unwrap();
    }
}

fn returned(back: &Receiver<Box<Fake>>) -> Box<Fake> {
    back.recv_timeout(Duration::from_secs(10))
        .expect("nothing came back from the reader within 10 s")
}

const LONG: Duration = Duration::from_secs(600);
/// Later than any test runs.
const NEVER: Duration = Duration::from_secs(365 * 24 * 3600);

#[test]
fn bodies_are_read_as_their_bytes_come_and_handed_back_at_their_end() {
    let reader = Reader::spawn((), false).unwrap();
    let (tx, back) = std::sync::mpsc::channel();
    let mut peers = Vec::new();
    for key in 0..40 {
        let (fake, peer) = Fake::new(key, LONG, &tx);
        reader.adopt(fake).map_err(|_| ()).unwrap();
        peers.push(peer);
    }
    // Each in several writes, more than a read takes, interleaved across the bodies.
    for round in 0..3 {
        for (key, peer) in peers.iter_mut().enumerate() {
            let text = if round < 2 {
                format!("{key}-{round},")
            } else {
                ".".into()
            };
            peer.write_all(text.as_bytes()).unwrap();
        }
    }
    let mut seen: Vec<_> = (0..40).map(|_| returned(&back)).collect();
    seen.sort_by_key(|f| f.key);
    for (key, fake) in seen.iter().enumerate() {
        assert_eq!(fake.ending, Some("done"));
        assert_eq!(fake.got, format!("{key}-0,{key}-1,.").into_bytes());
    }
    // Each socket left the epoll set: adopted again (as a kept-alive connection's next
    // response is), it is watched anew rather than refused as already there.
    let mut again = seen.pop().unwrap();
    again.got.clear();
    again.ending = None;
    reader.adopt(again).map_err(|_| ()).unwrap();
    peers[39].write_all(b"x.").unwrap();
    let again = returned(&back);
    assert_eq!(
        (again.ending, again.got.as_slice()),
        (Some("done"), &b"x."[..])
    );
}

#[test]
fn finished_bodies_leave_no_deadlines_or_checkpoint_times_behind() {
    // One body at a time, to see the heaps; each body's next checkpoint is far off.
    let mut held = by_hand(true);
    let (back_tx, back) = std::sync::mpsc::channel();
    for key in 0..5000 {
        let (fake, mut peer) = Fake::new(key, LONG, &back_tx);
        held.adopt(fake);
        let token = token_of(&held, key);
        peer.write_all(b".").unwrap();
        held.on_ready(token);
        assert_eq!(returned(&back).ending, Some("done"));
        assert!(
            held.deadlines.len() <= 1025,
            "{} entries",
            held.deadlines.len()
        );
        let ticks = held.ticks.as_ref().map_or(0, BinaryHeap::len);
        assert!(ticks <= 1025, "{ticks} checkpoint times");
    }
    // One slot served them all, each time under a new generation.
    assert_eq!(held.slots.len(), 1);
    assert_eq!(held.slots[0].1, 5000);
}

/// A loop to drive by hand, without its thread.
fn by_hand(ticking: bool) -> Loop<()> {
    let (_tx, rx) = std::sync::mpsc::channel();
    let wake = std::sync::Arc::new(EventFd::new().unwrap());
    Loop::new((), Epoll::new().unwrap(), wake, rx, ticking)
}

/// The token of the body `key` holds.
fn token_of(held: &Loop<()>, key: u64) -> u64 {
    let slot = held.by_key[&key];
    u64::from(held.slots[slot as usize].1) << 32 | u64::from(slot)
}

#[test]
fn each_body_ticks_when_its_own_tick_is_due_and_only_then() {
    let mut held = by_hand(true);
    let (back_tx, _back) = std::sync::mpsc::channel();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut peers = Vec::new();
    let start = Instant::now();
    // Body k's first tick is due k × 10 ms from now, the next ones a long way off.
    for key in 0..20 {
        let (mut fake, peer) = Fake::new(key, LONG, &back_tx);
        fake.tick_log = Some(log.clone());
        fake.next_tick = start + Duration::from_millis(10 * key);
        fake.tick_every = Some(LONG);
        held.adopt(fake);
        peers.push(peer);
    }
    // Bodies 1–19 are not due yet; 0 is (its tick asserts that it is due when it runs).
    held.tick_due(start);
    assert_eq!(*log.lock().unwrap(), vec![0]);
    let until = start + Duration::from_millis(55);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
    held.tick_due(until);
    assert_eq!(
        *log.lock().unwrap(),
        vec![0, 1, 2, 3, 4, 5],
        "in the order they fell due"
    );
    // Those that ticked are due again only a period later: nothing more by then.
    held.tick_due(until);
    assert_eq!(log.lock().unwrap().len(), 6);
    // A released body's entry is dropped, not ticked.
    held.release(held.by_key[&6]);
    let until = start + Duration::from_millis(75);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
    held.tick_due(until);
    assert_eq!(*log.lock().unwrap(), vec![0, 1, 2, 3, 4, 5, 7]);
    assert!(
        held.wait_for() <= Duration::from_millis(10),
        "body 8 is due next"
    );
}

#[test]
fn an_event_for_a_slot_s_earlier_body_is_not_taken_for_the_next() {
    let mut held = by_hand(false);
    let (tx, back) = std::sync::mpsc::channel();
    let (first, _first_peer) = Fake::new(1, LONG, &tx);
    held.adopt(first);
    let stale = token_of(&held, 1);
    held.release(held.by_key[&1]);
    assert_eq!(returned(&back).key, 1);
    let (second, mut second_peer) = Fake::new(2, LONG, &tx);
    held.adopt(second);
    assert_eq!(held.by_key[&2], 0, "the slot is reused");
    second_peer.write_all(b".").unwrap();
    held.on_ready(stale);
    assert!(
        back.try_recv().is_err(),
        "the second body was read on the first's event"
    );
    held.on_ready(token_of(&held, 2));
    assert_eq!(returned(&back).ending, Some("done"));
}

#[test]
fn a_body_that_moves_its_deadline_on_every_read_leaves_the_heap_bounded() {
    let mut held = by_hand(false);
    let (tx, _back) = std::sync::mpsc::channel();
    let (mut body, mut peer) = Fake::new(1, LONG, &tx);
    // As a chain of responses does: held all along, a new deadline per read.
    body.read_moves_deadline_by = Some(Duration::from_millis(1));
    held.adopt(body);
    for _ in 0..5000 {
        peer.write_all(b"x").unwrap();
        held.on_ready(token_of(&held, 1));
    }
    assert!(
        held.deadlines.len() <= 4 + 1024,
        "{} deadlines",
        held.deadlines.len()
    );
}

#[test]
fn a_moved_deadline_is_the_one_that_fires() {
    let mut held = by_hand(false);
    let (tx, back) = std::sync::mpsc::channel();
    let start = Instant::now();
    // Later (the first output lifts the TTFT deadline to the total one).
    let (mut later, mut later_peer) = Fake::new(1, Duration::from_millis(50), &tx);
    later.read_moves_deadline_to = Some(start + Duration::from_secs(10));
    // Earlier (the drain after `[DONE]`).
    let (mut sooner, mut sooner_peer) = Fake::new(2, LONG, &tx);
    sooner.read_moves_deadline_to = Some(start + Duration::from_millis(20));
    held.adopt(later);
    held.adopt(sooner);
    later_peer.write_all(b"x").unwrap();
    sooner_peer.write_all(b"x").unwrap();
    held.on_ready(token_of(&held, 1));
    held.on_ready(token_of(&held, 2));
    held.expire(start + Duration::from_millis(100));
    let first = returned(&back);
    assert_eq!((first.key, first.ending), (2, Some("expired")));
    assert!(
        back.try_recv().is_err(),
        "the lifted deadline fired at its old time"
    );
    held.expire(start + Duration::from_secs(11));
    let second = returned(&back);
    assert_eq!((second.key, second.ending), (1, Some("expired")));
}

#[test]
fn a_body_over_when_adopted_comes_back_unwatched() {
    let mut held = by_hand(false);
    let (tx, back) = std::sync::mpsc::channel();
    let (mut fake, _peer) = Fake::new(1, LONG, &tx);
    fake.over_at_adoption = true;
    held.adopt(fake);
    assert_eq!(returned(&back).ending, Some("over at adoption"));
    assert!(held.by_key.is_empty() && held.deadlines.is_empty());
}

#[test]
fn a_panic_on_one_body_ends_that_body_alone() {
    let reader = Reader::spawn((), false).unwrap();
    let (tx, back) = std::sync::mpsc::channel();
    let (mut broken, mut broken_peer) = Fake::new(1, LONG, &tx);
    broken.panics_on_read = true;
    let (fine, mut fine_peer) = Fake::new(2, LONG, &tx);
    reader.adopt(broken).map_err(|_| ()).unwrap();
    reader.adopt(fine).map_err(|_| ()).unwrap();
    broken_peer.write_all(b"x").unwrap();
    let broken = returned(&back);
    assert_eq!((broken.key, broken.ending), (1, Some("unwatchable")));
    let error = broken.error.unwrap();
    assert!(
        error.contains("failed on this response: a bug met in body 1"),
        "{error}"
    );
    // The reader goes on: the other body, and a new one.
    fine_peer.write_all(b".").unwrap();
    assert_eq!(returned(&back).ending, Some("done"));
    let (later, mut later_peer) = Fake::new(3, LONG, &tx);
    reader.adopt(later).map_err(|_| ()).unwrap();
    later_peer.write_all(b".").unwrap();
    assert_eq!(returned(&back).ending, Some("done"));
}

#[test]
fn a_close_ends_a_body() {
    let reader = Reader::spawn((), false).unwrap();
    let (tx, back) = std::sync::mpsc::channel();
    let (fake, peer) = Fake::new(1, LONG, &tx);
    reader.adopt(fake).map_err(|_| ()).unwrap();
    drop(peer);
    assert_eq!(returned(&back).ending, Some("closed"));
}

#[test]
fn a_deadline_ends_a_silent_body_and_only_that_one() {
    let reader = Reader::spawn((), false).unwrap();
    let (tx, back) = std::sync::mpsc::channel();
    let (quiet, _quiet_peer) = Fake::new(1, Duration::from_millis(50), &tx);
    let (busy, mut busy_peer) = Fake::new(2, LONG, &tx);
    let adopted = Instant::now();
    reader.adopt(quiet).map_err(|_| ()).unwrap();
    reader.adopt(busy).map_err(|_| ()).unwrap();
    let first = returned(&back);
    assert_eq!((first.key, first.ending), (1, Some("expired")));
    assert!(adopted.elapsed() >= Duration::from_millis(50));
    busy_peer.write_all(b".").unwrap();
    assert_eq!(returned(&back).ending, Some("done"));
}

#[test]
fn a_cancel_ends_the_body_it_names() {
    let reader = Reader::spawn((), false).unwrap();
    let (tx, back) = std::sync::mpsc::channel();
    let (one, _p1) = Fake::new(1, LONG, &tx);
    let (two, mut p2) = Fake::new(2, LONG, &tx);
    reader.adopt(one).map_err(|_| ()).unwrap();
    reader.adopt(two).map_err(|_| ()).unwrap();
    reader.cancel(1);
    // A key the reader does not hold is no error.
    reader.cancel(99);
    let first = returned(&back);
    assert_eq!((first.key, first.ending), (1, Some("cancelled")));
    p2.write_all(b".").unwrap();
    assert_eq!(returned(&back).ending, Some("done"));
}

#[test]
fn held_bodies_tick_and_a_dropped_reader_hands_them_back_cancelled() {
    let reader = Reader::spawn((), true).unwrap();
    let (tx, back) = std::sync::mpsc::channel();
    let (mut fake, _peer) = Fake::new(7, LONG, &tx);
    fake.next_tick = Instant::now() + Duration::from_millis(20);
    fake.tick_every = Some(Duration::from_millis(20));
    reader.adopt(fake).map_err(|_| ()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(reader);
    let fake = back
        .try_recv()
        .expect("handed back before the drop returned");
    assert_eq!(fake.ending, Some("cancelled"));
    assert!(fake.ticks >= 2, "{} ticks in 300 ms of 20 ms", fake.ticks);
}

#[test]
fn an_unwatchable_descriptor_comes_back_at_once() {
    let reader = Reader::spawn((), false).unwrap();
    let (tx, back) = std::sync::mpsc::channel();
    let (mut fake, _peer) = Fake::new(1, LONG, &tx);
    // epoll refuses regular files.
    let file = tempfile::tempfile().unwrap();
    fake.watch = Some(file.as_raw_fd());
    reader.adopt(fake).map_err(|_| ()).unwrap();
    assert_eq!(returned(&back).ending, Some("unwatchable"));
}

#[test]
fn signals_share_one_wake_up_until_it_is_taken() {
    let wake = EventFd::new().unwrap();
    let counter = |wake: &EventFd| {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64.
        let n = unsafe { libc::read(wake.fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        if n == 8 {
            count
        } else {
            0
        }
    };
    for _ in 0..3 {
        wake.signal();
    }
    // One write for the three: the counter the thread would read holds 1.
    assert_eq!(counter(&wake), 1);
    // Not taken yet (the flag is still set): a further signal writes nothing.
    wake.signal();
    assert_eq!(counter(&wake), 0);
    // Taken: the next signal writes again.
    wake.drain();
    wake.signal();
    assert_eq!(counter(&wake), 1);
}

#[test]
fn adoptions_from_many_threads_all_arrive() {
    // Every body sent while the thread takes its messages must be taken, by that pass or by
    // the wake-up its sender's signal leaves pending.
    let reader = std::sync::Arc::new(Reader::spawn((), false).unwrap());
    let (tx, back) = std::sync::mpsc::channel();
    let senders: Vec<_> = (0..4u64)
        .map(|t| {
            let reader = reader.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut peers = Vec::new();
                for i in 0..100u64 {
                    let (fake, mut peer) = Fake::new(t * 1000 + i, LONG, &tx);
                    peer.write_all(b".").unwrap();
                    reader.adopt(fake).map_err(|_| ()).unwrap();
                    peers.push(peer);
                }
                peers
            })
        })
        .collect();
    let _peers: Vec<_> = senders.into_iter().map(|s| s.join().unwrap()).collect();
    let mut done = 0;
    while done < 400 {
        let fake = back
            .recv_timeout(Duration::from_secs(10))
            .expect("every adopted body comes back");
        assert_eq!(fake.ending, Some("done"));
        done += 1;
    }
}
