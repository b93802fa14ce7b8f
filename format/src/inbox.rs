//! How the writer thread waits for its next message: while messages come faster than one
//! [`POLL`] apart, by looking at the channel once a period; otherwise by blocking on it.
//!
//! Why not always block: a blocking receive on an empty channel first spins and then calls
//! `sched_yield` several times (crossbeam's back-off) before it parks, and every message sent
//! to a parked writer costs its sender a futex wake-up. A recorder sends a final record per
//! request and a checkpoint per open request per period, thousands a second at high load, and
//! those yields and wake-ups were about a quarter of the writer's samples
//! (docs/performance/2026-12-02-to-03.md, *The writer's wait and its chunk columns*). Looking once
//! a period instead batches what arrived meanwhile and costs the senders nothing; a record waits at
//! most one period more, which the block's own `block_max_age` (seconds) dwarfs. Why not always
//! look: at a few hundred messages a second most looks would find nothing, and a thousand naps a
//! second cost more than the wake-ups they save.

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

/// How long the writer naps before it looks again at a channel it found empty.
const POLL: Duration = Duration::from_millis(1);

/// The receiving end, and whether messages have lately come faster than [`POLL`] apart.
pub(crate) struct Inbox<'a, T> {
    rx: &'a Receiver<T>,
    polling: bool,
}

impl<'a, T> Inbox<'a, T> {
    pub(crate) fn new(rx: &'a Receiver<T>) -> Inbox<'a, T> {
        Inbox { rx, polling: false }
    }

    /// The next message; `Timeout` once `deadline` (if any) has passed with none,
    /// `Disconnected` when every sender is gone and nothing is left.
    pub(crate) fn next(&mut self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        let mut napped = false;
        loop {
            match self.rx.try_recv() {
                Ok(message) => return Ok(message),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(RecvTimeoutError::Timeout);
            }
            if self.polling && !napped {
                napped = true;
                std::thread::sleep(deadline.map_or(POLL, |d| POLL.min(d - now)));
                continue;
            }
            // Not polling, or a whole nap brought nothing: block, and poll again only if the
            // next message comes within a period.
            let message = match deadline {
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(d) => self.rx.recv_deadline(d),
            };
            self.polling = message.is_ok() && polls_after(now.elapsed());
            return message;
        }
    }
}

/// Whether, after a blocking wait of `waited` for a message, the writer looks rather than
/// blocks for the next one.
fn polls_after(waited: Duration) -> bool {
    waited < POLL
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_message_comes_at_once_and_in_order() {
        let (tx, rx) = crossbeam_channel::bounded(4);
        let mut inbox = Inbox::new(&rx);
        tx.send(1).unwrap();
        tx.send(2).unwrap();
        assert_eq!(inbox.next(None), Ok(1));
        assert_eq!(inbox.next(Some(Instant::now())), Ok(2));
    }

    #[test]
    fn a_passed_deadline_times_out_and_a_gone_sender_disconnects() {
        let (tx, rx) = crossbeam_channel::bounded::<u32>(4);
        let mut inbox = Inbox::new(&rx);
        let soon = Instant::now() + Duration::from_millis(5);
        assert_eq!(inbox.next(Some(soon)), Err(RecvTimeoutError::Timeout));
        assert!(Instant::now() >= soon);
        drop(tx);
        assert_eq!(inbox.next(None), Err(RecvTimeoutError::Disconnected));
    }

    #[test]
    fn it_looks_only_while_messages_come_within_a_period() {
        assert!(polls_after(Duration::from_micros(200)));
        assert!(!polls_after(POLL));
        let (tx, rx) = crossbeam_channel::bounded(4);
        let mut inbox = Inbox::new(&rx);
        inbox.polling = true;
        // A nap that brings nothing, then a block that waits longer than a period: the next
        // wait blocks.
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.send(7).unwrap();
            tx
        });
        let far = Instant::now() + Duration::from_secs(10);
        assert_eq!(inbox.next(Some(far)), Ok(7));
        assert!(!inbox.polling);
        // What waits already is taken without a wait, whatever the mode.
        let tx = sender.join().unwrap();
        tx.send(8).unwrap();
        assert_eq!(inbox.next(None), Ok(8));
        drop(tx);
        assert_eq!(inbox.next(None), Err(RecvTimeoutError::Disconnected));
    }
}
