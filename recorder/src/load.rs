//! Load generation: closed-loop workers or an open-loop dispatcher, both feeding requests to
//! [`crate::stream::execute`] and finished records to the trace writer.

use crate::config::{Load, RecordConfig};
use crate::progress::LiveStats;
use crate::prompts::{synthetic, Prompt};
use crate::schedule::Schedule;
use crate::stream::{execute, RequestSpec, StreamContext, Successor};
use bytes::Bytes;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;
use tokentrace_format::{Outcome, PackedRecord, Phase, RecordSender};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinSet;
use xxhash_rust::xxh3::xxh3_64;

/// Where each request's prompt comes from.
pub enum PromptPlan {
    /// Synthetic prompts of `words` words aiming at `input_tokens`.
    Synthetic {
        /// Words per prompt (from calibration).
        words: u32,
        /// The planned token count.
        input_tokens: u32,
    },
    /// Prompts from a file, used round robin, each prepared once ([`PromptPlan::from_file`]).
    File(Vec<PreparedPrompt>),
}

/// A prompt with what every request that sends it shares: its serialized body, and the hash and
/// length of its identity bytes. A file's prompts are prepared once: serializing the body per
/// request was about a third of the request tasks' instructions
/// (docs/performance/2026-12-02-to-03.md, *The lag probe's ticker, checkpoints held back, bodies
/// built once*). A synthetic prompt differs for every request and is prepared for it.
#[derive(Clone)]
pub struct PreparedPrompt {
    body: Bytes,
    hash: u64,
    bytes: u32,
}

impl PreparedPrompt {
    fn new(config: &RecordConfig, prompt: &Prompt) -> PreparedPrompt {
        let identity = prompt.identity_bytes();
        PreparedPrompt {
            body: Bytes::from(crate::body::build(config, prompt, None)),
            hash: xxh3_64(&identity),
            bytes: u32::try_from(identity.len()).unwrap_or(u32::MAX),
        }
    }
}

impl PromptPlan {
    /// The file's prompts, each serialized for `config` once.
    pub fn from_file(config: &RecordConfig, prompts: Vec<Prompt>) -> PromptPlan {
        let prepared = prompts
            .iter()
            .map(|prompt| PreparedPrompt::new(config, prompt))
            .collect();
        PromptPlan::File(prepared)
    }
}

/// State shared by the load loops, the request tasks and the run's control.
pub struct LoadShared {
    /// Request context (client, headers, clock).
    pub ctx: StreamContext,
    /// The run's configuration.
    pub config: RecordConfig,
    /// Prompt source.
    pub prompts: PromptPlan,
    /// Trace writer input.
    pub sender: RecordSender,
    /// Live counters.
    pub stats: Arc<LiveStats>,
    /// Set when no more requests may start.
    pub stop: AtomicBool,
    /// Wakes a dispatcher waiting for its next send time when `stop` is set.
    pub stop_notify: Notify,
    /// Cancellation handles of in-flight requests.
    pub cancels: Mutex<HashMap<u64, oneshot::Sender<()>>>,
    /// Next request id.
    pub next_id: AtomicU64,
    /// Run start (ns from anchor); intended times of the open loop count from here.
    pub start_ns: u64,
    /// Stop sending at this time (ns from anchor).
    pub deadline_ns: Option<u64>,
    /// Set when the duration ended the run.
    pub hit_deadline: AtomicBool,
    /// Requests per outcome code.
    pub outcomes: [AtomicU64; Outcome::ALL.len()],
    /// First trace write failure; the run stops sending when it happens.
    pub write_error: Mutex<Option<String>>,
    /// Warmup requests not yet ended (starts at the configured warmup count).
    pub warmup_left: AtomicU64,
    /// Wakes closed-loop workers waiting for the last warmup request to end.
    pub warmup_notify: Notify,
    /// Records of requests that ended on the stream reader while the writer's channel was
    /// full (the reader never waits for it): the next task to end a request queues them, and
    /// until then the reader sends no request itself.
    pub unqueued: Mutex<Vec<PackedRecord>>,
}

impl LoadShared {
    /// Warmup plus measured requests, None when only the duration bounds the run.
    pub fn total_requests(&self) -> Option<u64> {
        self.config.requests.map(|n| n + self.config.warmup)
    }

    /// Stop starting requests.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.stop_notify.notify_waiters();
    }

    /// Cancel every in-flight request (each records itself as Cancelled).
    pub fn cancel_in_flight(&self) {
        let drained: Vec<_> = match self.cancels.lock() {
            Ok(mut map) => map.drain().map(|(_, tx)| tx).collect(),
            Err(_) => Vec::new(),
        };
        for tx in drained {
            let _ = tx.send(());
        }
    }

    /// Claim the next request id, or None when the run has sent everything it should.
    fn claim_id(&self) -> Option<u64> {
        if self.stop.load(Ordering::SeqCst) {
            return None;
        }
        // The j-th request of this shard is the plan's request `shard.id(j)`.
        let id = self
            .config
            .shard
            .id(self.next_id.fetch_add(1, Ordering::SeqCst));
        match self.total_requests() {
            Some(total) if id >= total => None,
            _ => Some(id),
        }
    }

    /// Waits until every warmup request has ended, so that no measured request overlaps one
    /// (as in the tools whose measurements the protocols reproduce); false when the run was
    /// stopped meanwhile.
    async fn warmup_finished(&self) -> bool {
        loop {
            let warmed = self.warmup_notify.notified();
            let stopped = self.stop_notify.notified();
            tokio::pin!(warmed, stopped);
            warmed.as_mut().enable();
            stopped.as_mut().enable();
            if self.stop.load(Ordering::SeqCst) {
                return false;
            }
            if self.warmup_left.load(Ordering::SeqCst) == 0 {
                return true;
            }
            tokio::select! {
                () = &mut warmed => {}
                () = &mut stopped => {}
            }
        }
    }

    fn past_deadline(&self, t_ns: u64) -> bool {
        let past = self.deadline_ns.is_some_and(|d| t_ns >= d);
        if past {
            self.hit_deadline.store(true, Ordering::SeqCst);
        }
        past
    }

    /// Build the request for `id`, meant to start at `intended_ns`.
    fn spec(&self, id: u64, intended_ns: u64) -> RequestSpec {
        let phase = if id < self.config.warmup {
            Phase::Warmup
        } else {
            Phase::Measured
        };
        let (prompt, planned_input_tokens) = match &self.prompts {
            PromptPlan::Synthetic {
                words,
                input_tokens,
            } => {
                let text = Prompt::Text(synthetic(self.config.seed, id, *words));
                (
                    Cow::Owned(PreparedPrompt::new(&self.config, &text)),
                    Some(*input_tokens),
                )
            }
            PromptPlan::File(list) => (
                Cow::Borrowed(&list[(id % list.len() as u64) as usize]),
                None,
            ),
        };
        RequestSpec {
            id,
            phase,
            intended_ns,
            body: prompt.body.clone(),
            prompt_hash: prompt.hash,
            prompt_bytes: prompt.bytes,
            planned_input_tokens,
        }
    }
}

/// The closed loop seen from the stream reader: it sends a slot's next request itself when a
/// response ends whole ([`crate::stream::Successor`]), under the rules of [`drive`]'s workers.
impl Successor for LoadShared {
    fn next(&self) -> Option<RequestSpec> {
        // A measured request waits for every warmup one to end, and none is sent here while
        // a record waits to be queued: those waits are the task's.
        if self.warmup_left.load(Ordering::SeqCst) != 0 || !self.all_queued() {
            return None;
        }
        let id = self.claim_id()?;
        let intended = self.ctx.now_ns();
        if self.past_deadline(intended) {
            return None;
        }
        self.stats.reader_sent.fetch_add(1, Ordering::Relaxed);
        Some(self.spec(id, intended))
    }

    fn finished(&self, record: PackedRecord) {
        let warmup = self.count_ended(&record);
        match self.sender.try_send(record) {
            Ok(None) => {}
            Ok(Some(record)) => self
                .unqueued
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(record),
            Err(err) => self.write_failed(&err),
        }
        if warmup {
            self.warmup_ended();
        }
    }
}

/// Run one request (in a closed loop, `successor`: perhaps more after it, on the stream
/// reader) and hand its record to the writer.
async fn run_one(
    shared: Arc<LoadShared>,
    spec: RequestSpec,
    successor: Option<Weak<dyn Successor>>,
) {
    // The cancel registered under the first request's id reaches whichever request of the
    // chain is in flight.
    let id = spec.id;
    let (tx, rx) = oneshot::channel();
    if let Ok(mut map) = shared.cancels.lock() {
        map.insert(id, tx);
    }
    // A request registering after a cancel sweep is reached by the next sweep (the run repeats
    // them until every task has ended).
    shared.stats.in_flight.fetch_add(1, Ordering::Relaxed);
    let record = execute(&shared.ctx, spec, rx, successor).await;
    if let Ok(mut map) = shared.cancels.lock() {
        map.remove(&id);
    }
    shared.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
    shared.record_ended(record);
    shared.queue_unqueued();
}

impl LoadShared {
    /// A request ended: counted, and its record handed to the writer.
    fn record_ended(&self, record: PackedRecord) {
        let warmup = self.count_ended(&record);
        if let Err(err) = self.sender.send(record) {
            self.write_failed(&err);
        }
        if warmup {
            self.warmup_ended();
        }
    }

    /// Queues the records the stream reader could not (it ended them while the writer's
    /// channel was full); here a full channel is waited for.
    fn queue_unqueued(&self) {
        let records =
            std::mem::take(&mut *self.unqueued.lock().unwrap_or_else(PoisonError::into_inner));
        for record in records {
            if let Err(err) = self.sender.send(record) {
                self.write_failed(&err);
            }
        }
    }

    /// Whether every record of a request that ended is in the writer's channel.
    fn all_queued(&self) -> bool {
        self.unqueued.lock().is_ok_and(|records| records.is_empty())
    }

    /// Counts an ended request in the live figures; whether it was a warmup request.
    fn count_ended(&self, record: &PackedRecord) -> bool {
        let stats = &self.stats;
        stats
            .chunks
            .fetch_add(record.chunks.len() as u64, Ordering::Relaxed);
        // The last chunk's alone: a walk down every chunk would bring the whole list, long
        // out of cache, back into it once more.
        let reads = (record.chunks.len().checked_sub(1))
            .and_then(|last| record.chunks.read_index_of(last))
            .map_or(0, |read| u64::from(read) + 1);
        stats.reads.fetch_add(reads, Ordering::Relaxed);
        self.outcomes[record.meta.outcome as usize].fetch_add(1, Ordering::Relaxed);
        if record.meta.outcome == Outcome::Ok {
            stats.completed.fetch_add(1, Ordering::Relaxed);
        } else {
            stats.failed.fetch_add(1, Ordering::Relaxed);
        }
        // Once per request: materializing chunks until the first content one costs nothing here.
        if let Some(first) = record
            .chunks
            .iter()
            .find(|c| c.channel.is_content_text(c.text_len))
        {
            stats.record_ttft_us(first.arrival_ns.saturating_sub(record.meta.send_ns) / 1000);
        }
        record.meta.phase == Phase::Warmup
    }

    /// The writer failed: the run stops sending, and says why.
    fn write_failed(&self, err: &tokentrace_format::FormatError) {
        if let Ok(mut slot) = self.write_error.lock() {
            slot.get_or_insert(err.to_string());
        }
        self.request_stop();
    }

    /// A warmup request ended; the last one lets the measured requests start.
    fn warmup_ended(&self) {
        if self.warmup_left.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.warmup_notify.notify_waiters();
        }
    }
}

/// Drive the configured load until every request is done (or stopped and drained).
pub async fn drive(shared: Arc<LoadShared>) {
    match shared.config.load {
        Load::Closed { concurrency } => {
            let mut workers = JoinSet::new();
            for _ in 0..shared.config.shard.concurrency(concurrency) {
                let shared = shared.clone();
                workers.spawn(async move {
                    while let Some(id) = shared.claim_id() {
                        // Warmup ids are claimed first, each by a worker that runs it, so
                        // waiting here for them to end cannot block them.
                        if id >= shared.config.warmup && !shared.warmup_finished().await {
                            break;
                        }
                        // Closed loop: the request is meant to start the moment its slot frees.
                        let intended = shared.ctx.now_ns();
                        if shared.past_deadline(intended) {
                            break;
                        }
                        let spec = shared.spec(id, intended);
                        let successor: Weak<dyn Successor> =
                            Arc::downgrade(&shared) as Weak<LoadShared>;
                        run_one(shared.clone(), spec, Some(successor)).await;
                    }
                });
            }
            while workers.join_next().await.is_some() {}
            // Every chain ends in its task, which queues what the reader could not; nothing is
            // left here but after a task that panicked.
            shared.queue_unqueued();
        }
        Load::Open { rate, arrival } => {
            let mut schedule = Schedule::new(rate, arrival, shared.config.seed);
            let start = tokio::time::Instant::now()
                - Duration::from_nanos(shared.ctx.now_ns().saturating_sub(shared.start_ns));
            let mut tasks = JoinSet::new();
            // Every shard draws the whole plan's schedule and keeps its own arrivals, so the
            // shards' intended starts together are exactly the single-process schedule.
            let mut drawn = 0u64;
            let mut offset = 0;
            while let Some(id) = shared.claim_id() {
                while drawn <= id {
                    offset = schedule.next_offset_ns();
                    drawn += 1;
                }
                let intended = shared.start_ns + offset;
                if shared.past_deadline(intended) {
                    break;
                }
                // Build before waiting so the send itself is not delayed by it.
                let spec = shared.spec(id, intended);
                let notified = shared.stop_notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                tokio::select! {
                    () = tokio::time::sleep_until(start + Duration::from_nanos(offset)) => {}
                    () = &mut notified => break,
                }
                // Late requests are sent late (never skipped); intended vs send shows by how much.
                // Open loop: each request starts at its own scheduled time, never on the heels of
                // another.
                tasks.spawn(run_one(shared.clone(), spec, None));
                while tasks.try_join_next().is_some() {}
            }
            while tasks.join_next().await.is_some() {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prepared_prompt_is_what_each_request_would_have_built() {
        let config = RecordConfig::new("http://x/v1", "m", "t".into());
        let messages = serde_json::json!([{"role": "system", "content": "be brief"},
                                          {"role": "user", "content": "hi \"there\"\n"}]);
        let prompts = vec![
            Prompt::Text("plain \u{e9} text".into()),
            Prompt::Messages(Arc::new(messages)),
        ];
        let PromptPlan::File(prepared) = PromptPlan::from_file(&config, prompts.clone()) else {
            panic!("a file plan");
        };
        assert_eq!(prepared.len(), 2);
        for (p, prompt) in prepared.iter().zip(&prompts) {
            assert_eq!(&p.body[..], &crate::body::build(&config, prompt, None)[..]);
            let identity = prompt.identity_bytes();
            assert_eq!(p.hash, xxh3_64(&identity));
            assert_eq!(p.bytes as usize, identity.len());
        }
        assert_ne!(prepared[0].hash, prepared[1].hash);
    }

    /// A closed loop of 1,000 requests at concurrency 1 that hands its records to `sender`;
    /// no request is ever sent (the URL is never dialled).
    fn closed_loop(sender: RecordSender) -> LoadShared {
        let mut config = RecordConfig::new("http://127.0.0.1:9/v1", "m", "t".into());
        config.requests = Some(1000);
        config.load = Load::Closed { concurrency: 1 };
        let ctx = StreamContext {
            client: crate::http::build_client(&config).unwrap(),
            fresh_client: crate::http::build_fresh_client(&config).unwrap(),
            closes: Default::default(),
            uri: "http://127.0.0.1:9/v1/chat/completions".parse().unwrap(),
            headers: Default::default(),
            request_id: None,
            anchor_mono_ns: 0,
            timeout: None,
            ttft_timeout: None,
            capture: config.capture,
            line_limit: config.line_limit,
            trial: 0,
            chunk_capacity: 16,
            checkpoints: None,
            own: None,
            reader: None,
            events_read_whole: Default::default(),
            http2_responses: Default::default(),
        };
        let prompts = PromptPlan::from_file(&config, vec![Prompt::Text("hi".into())]);
        LoadShared {
            ctx,
            config,
            prompts,
            sender,
            stats: Default::default(),
            stop: AtomicBool::new(false),
            stop_notify: Notify::new(),
            cancels: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            start_ns: 0,
            deadline_ns: None,
            hit_deadline: AtomicBool::new(false),
            outcomes: Default::default(),
            write_error: Mutex::new(None),
            warmup_left: AtomicU64::new(0),
            warmup_notify: Notify::new(),
            unqueued: Mutex::new(Vec::new()),
        }
    }

    #[test]
    fn records_the_writer_has_no_room_for_wait_for_a_task_and_hold_the_chain() {
        use tokentrace_format::{synthetic, Header, Manifest, TraceReader, TraceWriter};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("full.tt");
        let header = Header {
            major: 1,
            minor: 0,
            anchor: tokentrace_format::ClockAnchor::now(),
            host: "h".into(),
            shard: 0,
        };
        // One slot and a block per record: records handed on back to back find it taken.
        let config = tokentrace_format::WriterConfig {
            channel_capacity: 1,
            block_target_bytes: 1,
            ..Default::default()
        };
        let writer = TraceWriter::create(&path, header, &Manifest::default(), config).unwrap();
        let shared = closed_loop(writer.sender());
        let records: Vec<PackedRecord> = synthetic::requests(5, 100, 20, false)
            .into_iter()
            .map(PackedRecord::from)
            .collect();
        let warmup = records
            .iter()
            .filter(|r| r.meta.phase == Phase::Warmup)
            .count();
        shared.warmup_left.store(warmup as u64, Ordering::SeqCst);
        for record in records {
            shared.finished(record);
        }
        let kept = shared.unqueued.lock().unwrap().len();
        assert!(kept > 0, "the channel was never full");
        // Nothing waited: every record is counted already, the warmup ones too.
        assert_eq!(shared.warmup_left.load(Ordering::SeqCst), 0);
        assert_eq!(
            shared.stats.completed.load(Ordering::Relaxed)
                + shared.stats.failed.load(Ordering::Relaxed),
            100
        );
        // While a record waits, the reader sends nothing, and claims no id.
        assert!(shared.next().is_none());
        assert_eq!(shared.next_id.load(Ordering::SeqCst), 0);
        assert_eq!(shared.stats.reader_sent.load(Ordering::Relaxed), 0);
        // A task queues them (waiting for room as tasks do); then the reader goes on.
        shared.queue_unqueued();
        assert!(shared.all_queued());
        let next = shared.next().expect("a next request");
        assert_eq!(next.id, 0);
        assert_eq!(shared.stats.reader_sent.load(Ordering::Relaxed), 1);
        let stats = writer.finish(Default::default()).unwrap();
        assert_eq!(stats.requests, 100, "every record written once");
        let mut ids: Vec<u64> = TraceReader::open(&path)
            .unwrap()
            .requests()
            .map(|r| r.unwrap().meta.id)
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..100).collect::<Vec<_>>());
    }
}
