//! How the writer thread waits for its next message: by looking at the channel at a short
//! period while messages keep coming, and blocking on it only once the run has gone quiet.
//!
//! Why not always block: a blocking receive on an empty channel first spins and then calls
//! `sched_yield` several times (crossbeam's back-off) before it parks, and every message sent
//! to a parked writer costs its sender a futex wake-up. A recorder sends a final record per
//! request and a checkpoint per open request per period, thousands a second at high load, and
//! those yields and wake-ups were a tenth of the writer's CPU (docs/PERFORMANCE.md, *The
//! writer's wait*). Looking every [`POLL`] instead batches what arrived meanwhile, costs the
//! senders nothing, and delays a record by at most one period, which the block's own
//! `block_max_age` (seconds) dwarfs.

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

/// How long the writer sleeps between two looks at an empty channel while it is busy.
pub(crate) const POLL: Duration = Duration::from_millis(1);

/// Empty looks in a row after which the writer blocks on the channel instead: after this many
/// periods with nothing sent the run is quiet, and one wake-up per message is cheap.
pub(crate) const QUIET_AFTER: u32 = 32;

/// The receiving end, with how many looks in a row found it empty.
pub(crate) struct Inbox<'a, T> {
    rx: &'a Receiver<T>,
    empty_looks: u32,
}

impl<'a, T> Inbox<'a, T> {
    pub(crate) fn new(rx: &'a Receiver<T>) -> Inbox<'a, T> {
        Inbox { rx, empty_looks: 0 }
    }

    /// The next message; `Timeout` once `deadline` (if any) has passed with none,
    /// `Disconnected` when every sender is gone and nothing is left.
    pub(crate) fn next(&mut self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        loop {
            match self.rx.try_recv() {
                Ok(message) => {
                    self.empty_looks = 0;
                    return Ok(message);
                }
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(RecvTimeoutError::Timeout);
            }
            if self.empty_looks >= QUIET_AFTER {
                let message = match deadline {
                    None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                    Some(d) => self.rx.recv_deadline(d),
                };
                if message.is_ok() {
                    // Busy again: back to looking.
                    self.empty_looks = 0;
                }
                return message;
            }
            self.empty_looks += 1;
            let nap = deadline.map_or(POLL, |d| POLL.min(d.saturating_duration_since(now)));
            std::thread::sleep(nap);
        }
    }
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
    fn a_quiet_inbox_blocks_then_looks_again_once_a_message_comes() {
        let (tx, rx) = crossbeam_channel::bounded(4);
        let mut inbox = Inbox::new(&rx);
        // Each empty look counts (how many fit in a time depends on the host's load) ...
        let soon = Instant::now() + POLL * 4;
        assert_eq!(inbox.next(Some(soon)), Err(RecvTimeoutError::Timeout));
        assert!(inbox.empty_looks >= 1);
        // ... and past the quiet bound the next wait blocks on the channel.
        inbox.empty_looks = QUIET_AFTER;
        let quiet = Instant::now() + Duration::from_millis(5);
        assert_eq!(inbox.next(Some(quiet)), Err(RecvTimeoutError::Timeout));
        assert_eq!(inbox.empty_looks, QUIET_AFTER, "blocked, not looking");
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.send(7).unwrap();
            tx
        });
        // Blocked, not looking: the sender's message wakes it.
        assert_eq!(
            inbox.next(Some(Instant::now() + Duration::from_secs(10))),
            Ok(7)
        );
        assert_eq!(inbox.empty_looks, 0);
        drop(sender.join().unwrap());
        assert_eq!(inbox.next(None), Err(RecvTimeoutError::Disconnected));
    }
}
