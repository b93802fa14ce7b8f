//! The engine model: one scheduler thread owns every sequence. Requests wait in a FIFO queue
//! for one of `slots` batch slots; admitted requests are prefilled one after another at
//! `prefill_tok_s`; then all prefilled sequences advance together, one decode step at a time,
//! each step taking `step_base_ms + step_per_seq_ms * active`. A step yields 1 token per
//! sequence, or more under speculative decoding. Each step's output is serialized into SSE
//! events and pushed to the sequence's response channel: one timer for all streams.

use std::collections::VecDeque;
use std::io;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::chunk::StepText;
use crate::job::{EngineParams, Job};
use crate::sequence::{advance, Outcome, Running};

/// What the scheduler thread receives.
enum Message {
    Job(Box<Job>),
    Stop,
}

/// Submits jobs to the scheduler thread and stops it.
#[derive(Clone)]
pub(crate) struct EngineHandle {
    tx: Sender<Message>,
}

impl EngineHandle {
    /// Queues a job; false when the engine has stopped.
    pub(crate) fn submit(&self, job: Job) -> bool {
        self.tx.send(Message::Job(Box::new(job))).is_ok()
    }

    /// Makes the scheduler drop every sequence (ending their responses) and exit, even while
    /// some connection still holds a handle.
    pub(crate) fn stop(&self) {
        let _ = self.tx.send(Message::Stop);
    }
}

/// Starts the scheduler thread. It ends on [`EngineHandle::stop`] or when every handle is
/// dropped.
pub(crate) fn spawn_engine(params: EngineParams) -> io::Result<(EngineHandle, JoinHandle<()>)> {
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("sim-engine".into())
        .spawn(move || Scheduler::new(params).run(rx))?;
    Ok((EngineHandle { tx }, thread))
}

struct Scheduler {
    params: EngineParams,
    waiting: VecDeque<Job>,
    running: Vec<Running>,
    prefill_free_at: Instant,
    busy_until: Instant,
    scratch: StepText,
}

impl Scheduler {
    fn new(params: EngineParams) -> Self {
        let now = Instant::now();
        Scheduler {
            params,
            waiting: VecDeque::new(),
            running: Vec::new(),
            prefill_free_at: now,
            busy_until: now,
            scratch: StepText::default(),
        }
    }

    fn run(mut self, rx: Receiver<Message>) {
        loop {
            loop {
                match rx.try_recv() {
                    Ok(Message::Job(job)) => self.waiting.push_back(*job),
                    Ok(Message::Stop) | Err(TryRecvError::Disconnected) => return,
                    Err(TryRecvError::Empty) => break,
                }
            }
            self.admit(Instant::now());
            let message = match self.next_step_at() {
                None => rx.recv().map_err(|_| ()),
                Some(next) => match next.checked_duration_since(Instant::now()) {
                    None => {
                        self.step(next);
                        continue;
                    }
                    Some(wait) => match rx.recv_timeout(wait) {
                        Err(RecvTimeoutError::Timeout) => {
                            self.step(next);
                            continue;
                        }
                        other => other.map_err(|_| ()),
                    },
                },
            };
            match message {
                Ok(Message::Job(job)) => self.waiting.push_back(*job),
                Ok(Message::Stop) | Err(()) => return,
            }
        }
    }

    /// Moves queued requests into free slots and schedules their prefill.
    fn admit(&mut self, now: Instant) {
        while self.running.len() < self.params.slots {
            let Some(job) = self.waiting.pop_front() else {
                break;
            };
            let work = job.prompt_tokens.saturating_sub(job.cached_tokens);
            let prefill = self.params.prefill_base
                + Duration::from_nanos((self.params.prefill_ns_per_token * f64::from(work)) as u64);
            let ready_at = self.prefill_free_at.max(now) + prefill;
            self.prefill_free_at = ready_at;
            self.running.push(Running {
                job,
                ready_at,
                emitted: 0,
                token_events: 0,
                started: false,
                faulted: false,
                reasoning_text: Vec::new(),
                content_text: Vec::new(),
                content_bytes: 0,
            });
        }
    }

    /// The next decode step: after the current one ends, once some sequence is prefilled.
    fn next_step_at(&self) -> Option<Instant> {
        let earliest_ready = self.running.iter().map(|r| r.ready_at).min()?;
        Some(earliest_ready.max(self.busy_until))
    }

    fn step(&mut self, at: Instant) {
        let mut active = 0;
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].ready_at > at {
                i += 1;
                continue;
            }
            active += 1;
            match advance(&self.params, &mut self.running[i], &mut self.scratch) {
                Outcome::Continue => i += 1,
                Outcome::Done => {
                    self.running.swap_remove(i);
                }
            }
        }
        let end = at + self.params.step_time(active);
        // When the thread fell more than a step behind, restart the clock instead of bursting.
        let now = Instant::now();
        self.busy_until = if end + self.params.step_time(active) < now {
            now
        } else {
            end
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimConfig;
    use crate::job::acceptance_for_mean;

    #[test]
    fn acceptance_matches_requested_mean() {
        for (mean, k) in [(1.5, 3), (2.5, 4), (3.9, 3)] {
            let a = acceptance_for_mean(mean, k);
            let expected: f64 = (0..=k).map(|j| a.powi(j as i32)).sum();
            assert!((expected - mean).abs() < 1e-9, "{mean} {k} {a}");
        }
        assert_eq!(acceptance_for_mean(1.0, 3), 0.0);
        assert_eq!(acceptance_for_mean(9.0, 3), 1.0);
    }

    #[test]
    fn step_time_grows_with_active_sequences() {
        let config = SimConfig {
            step_base_ms: 10.0,
            step_per_seq_ms: 0.5,
            ..Default::default()
        };
        let params = EngineParams::from_config(&config);
        assert_eq!(params.step_time(0), Duration::from_millis(10));
        assert_eq!(params.step_time(4), Duration::from_millis(12));
    }
}
