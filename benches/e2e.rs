//! End-to-end recorder benchmark: `tokentrace record` against the simulator (each in its own
//! process, sharing the machine) at a ladder of concurrent streams and decode-step intervals,
//! beside a floor client that only reads sockets and timestamps reads (one thread, epoll, no
//! runtime: see `e2e/floor_epoll.rs`) and, when it is installed, AIPerf at the same level.
//! Per level it reports client CPU per chunk, timestamp error against the simulator's truth
//! log, chunks per read, scheduling lag, peak RSS per stream, trace bytes per chunk, writer
//! back-pressure and the achieved chunk rate — each also as a ratio to the floor.
//!
//! Needs the release binary: `cargo build --release` first. Then
//! `cargo bench --bench e2e -- [--levels 64,256,1024,2048] [--steps 10,2] [--request-ms 1000]
//!  [--waves 2] [--threads 2] [--sim-threads 1] [--no-floor]
//!  [--floor epoll|epoll-parse|epoll-stamped|uring|tokio]
//!  [--aiperf PATH | --no-aiperf] [--aiperf-timeout 300]
//!  [--aiperf-burst]
//!  [--run-timeout SECS] [--keep] [--tls] [--repeat 1]
//!  [--pin] [--client-nice N] [--bin target/release/tokentrace] [--record-bin PATH]
//!  [--doc docs/PERFORMANCE.md] [--kill-after 2.2,2.5]`
//!
//! `--client-nice N` runs each measured client (recorder, floor, AIPerf) at nice value N, the
//! simulator at the bench's own (below the bench's own needs root, `CAP_SYS_NICE` or an
//! `RLIMIT_NICE` that allows it, which the bench tries before it starts anything): how long a
//! client waits for a core on a busy host is the scheduler's doing, and this measures it at
//! another priority.
//!
//! `--record-bin` measures a `tokentrace-record` binary (the recorder-only build, which takes
//! `record`'s flags with no subcommand) in place of `tokentrace record`; the simulator stays
//! the `--bin` binary.
//!
//! `--repeat N` runs the whole ladder N times in a row and ends the report with each level's
//! spread and median over the N (`e2e/ladders.rs`).
//!
//! `--kill-after S1,S2` measures what a crash loses instead of the ladder's columns: at each
//! level the recorder alone is SIGKILLed S seconds after its start, and the simulator's truth
//! log is joined with what the trace kept (`e2e/crash.rs`).
//!
//! A level is streams × step: `--levels 32 --steps 5 --request-ms 640` is 32 streams of
//! 128 tokens 5 ms apart.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // criterion generates undocumented items; a bench may fail loudly

#[path = "e2e/accuracy.rs"]
mod accuracy;
#[path = "e2e/aiperf.rs"]
mod aiperf;
#[path = "e2e/crash.rs"]
mod crash;
#[path = "e2e/floor.rs"]
mod floor;
#[path = "e2e/floor_check.rs"]
mod floor_check;
#[path = "e2e/floor_epoll.rs"]
mod floor_epoll;
#[path = "e2e/floor_parse.rs"]
mod floor_parse;
#[path = "e2e/floor_tls.rs"]
mod floor_tls;
#[path = "e2e/floor_tokio.rs"]
mod floor_tokio;
#[path = "e2e/floor_uring.rs"]
mod floor_uring;
#[path = "e2e/ladders.rs"]
mod ladders;
#[path = "e2e/procs.rs"]
mod procs;
#[path = "e2e/report.rs"]
mod report;
#[path = "e2e/settings.rs"]
mod settings;

use accuracy::{load_truth, Join, Percentiles};
use floor::FloorKind;
use procs::{run_measured, Sim};
use settings::Settings;
use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokentrace_format::TraceReader;
use tokentrace_recorder::prompts::Prompt;
use tokentrace_recorder::RecordConfig;

/// The prompt of every request: short, so the ladder measures streaming, not uploads.
const PROMPT: &str = "Describe how a streaming client timestamps server-sent events before \
                      parsing them and why that matters for inter-token latency.";

/// Events per chat response besides the token deltas: role, usage, `[DONE]`.
const EXTRA_EVENTS: u64 = 3;

/// One rung of the ladder.
#[derive(Clone, Copy, Debug)]
pub struct Level {
    /// Concurrent streams.
    pub streams: usize,
    /// Simulator decode step (ms between chunks of a stream).
    pub step_ms: f64,
    /// Tokens per response.
    pub max_tokens: u64,
}

impl Level {
    /// Token events per second the ladder asks the simulator for.
    pub fn requested_rate(&self) -> f64 {
        self.streams as f64 * 1000.0 / self.step_ms
    }
}

/// Figures of one client (recorder or floor) at one level.
#[derive(Default)]
pub struct Side {
    /// Events received.
    pub chunks: u64,
    /// Reads that completed at least one event.
    pub event_reads: u64,
    /// Client CPU ns (recorder: whole process by wait4; floor: its load phase; AIPerf: its
    /// whole process tree).
    pub cpu_ns: u64,
    /// The recorder's own CPU over its load, as its trace's `client_health.cpu_ns` has it
    /// (getrusage from the first connect to the last response: start-up, preflight and the
    /// trace's finish left out, as the floor leaves out its own).
    pub load_cpu_ns: Option<u64>,
    /// Peak RSS bytes (VmHWM).
    pub max_rss_bytes: u64,
    /// First to last event arrival.
    pub span_ns: u64,
    /// Trace file size (recorder only).
    pub trace_bytes: Option<u64>,
    /// Largest tokio scheduling lag (recorder only).
    pub sched_lag_ns: Option<u64>,
    /// Writer back-pressure events (recorder only).
    pub backpressure: Option<u64>,
    /// Timestamp error distribution.
    pub error: Option<Percentiles>,
    /// The same over the events that ended their read (recorder only): each carries the
    /// receive time of its own segment, unless the server wrote it together with the one
    /// before.
    pub error_last_of_read: Option<Percentiles>,
    /// Events read together with one the server wrote at least 100 µs later (recorder only;
    /// [`accuracy::waited_for_later_write`]): each carries that later write's time.
    pub waited: Option<u64>,
    /// Events joined with the truth log.
    pub joined: u64,
    /// Events without a truth entry.
    pub unmatched: u64,
    /// Responses whose event count differs from the truth log's.
    pub count_mismatches: u64,
}

impl Side {
    /// CPU ns per chunk.
    pub fn cpu_ns_per_chunk(&self) -> f64 {
        self.cpu_ns as f64 / self.chunks.max(1) as f64
    }

    /// CPU ns per chunk over the load alone (recorder), when known.
    pub fn load_cpu_ns_per_chunk(&self) -> Option<f64> {
        self.load_cpu_ns
            .map(|ns| ns as f64 / self.chunks.max(1) as f64)
    }

    /// Events per second between the first and last arrival.
    pub fn achieved_rate(&self) -> f64 {
        self.chunks as f64 / (self.span_ns.max(1) as f64 / 1e9)
    }

    /// Peak RSS per stream, KiB: the whole process (fixed costs included) ÷ streams.
    pub fn rss_kib_per_stream(&self, streams: usize) -> f64 {
        self.max_rss_bytes as f64 / 1024.0 / streams as f64
    }

    /// Events per read that completed one.
    pub fn chunks_per_read(&self) -> f64 {
        self.chunks as f64 / self.event_reads.max(1) as f64
    }

    fn take_join(&mut self, mut join: Join) {
        self.error = join.percentiles();
        self.joined = join.errors_ns.len() as u64;
        self.unmatched = join.unmatched;
        self.count_mismatches = join.count_mismatches;
    }
}

/// Both clients at one level.
pub struct LevelResult {
    /// The level.
    pub level: Level,
    /// `tokentrace record`.
    pub recorder: Side,
    /// The raw socket reader, unless `--no-floor`.
    pub floor: Option<Side>,
    /// AIPerf at the same level, when installed (and it ran).
    pub aiperf: Option<aiperf::Peer>,
    /// One-minute load average when the level started (other work on the machine).
    pub load_avg: f64,
}

/// User + system CPU ns of a rusage.
pub fn cpu_ns(usage: &libc::rusage) -> u64 {
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--floor-child") {
        let result = floor::parse_args(&args[at + 1..])
            .map_err(io::Error::other)
            .and_then(floor::child_main);
        if let Err(err) = result {
            eprintln!("floor: {err}");
            std::process::exit(1);
        }
        return;
    }
    if !args.iter().any(|a| a == "--bench") {
        // `cargo test --benches`: check the join logic only, never run the load.
        let dir = std::env::temp_dir().join(format!("e2e-check-{}", std::process::id()));
        let checked = std::fs::create_dir_all(&dir)
            .and_then(|()| accuracy::self_check(&dir))
            .and_then(|()| floor::self_check())
            .and_then(|()| floor_parse::self_check())
            .and_then(|()| floor_check::self_check())
            .and_then(|()| aiperf::self_check())
            .and_then(|()| ladders::self_check())
            .and_then(|()| crash::self_check())
            .and_then(|()| settings::self_check())
            // Raising one's own nice value needs no privilege: this must pass anywhere.
            .and_then(|()| procs::check_nice(19));
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(err) = checked {
            eprintln!("e2e self-check failed: {err}");
            std::process::exit(1);
        }
        println!("e2e: join self-check passed (run with `cargo bench --bench e2e` to measure)");
        return;
    }
    if let Err(err) = bench(&args) {
        eprintln!("e2e: {err}");
        std::process::exit(1);
    }
}

fn bench(args: &[String]) -> io::Result<()> {
    let s = Settings::parse(args).map_err(io::Error::other)?;
    if !s.bin.exists() {
        return Err(io::Error::other(format!(
            "{} not found: run `cargo build --release` first (or pass --bin)",
            s.bin.display()
        )));
    }
    if let Some(recorder) = s.record_bin.as_ref().filter(|r| !r.exists()) {
        return Err(io::Error::other(format!(
            "{} not found: `cargo build --release --no-default-features --bin tokentrace-record`",
            recorder.display()
        )));
    }
    if let Some(nice) = s.client_nice {
        procs::check_nice(nice)?;
    }
    let root = PathBuf::from("target/e2e");
    std::fs::create_dir_all(&root)?;
    let prompts = root.join("prompts.jsonl");
    std::fs::write(&prompts, format!("{{\"prompt\": {PROMPT:?}}}\n"))?;
    let tls = if s.tls { Some(tls_files(&root)?) } else { None };
    if !s.kill_after.is_empty() {
        eprintln!("e2e: --kill-after runs the recorder alone: no floor, AIPerf or --doc");
        return crash::ladder(&s, &root, &prompts, tls.as_ref());
    }
    let peer = if s.no_aiperf {
        Err("not run (--no-aiperf)".to_string())
    } else if s.tls {
        Err("not run (--tls)".to_string())
    } else {
        aiperf::locate(s.aiperf.as_deref()).map_err(|why| format!("not installed: {why}"))
    };
    match &peer {
        Ok(install) => eprintln!("e2e: AIPerf column from {}", install.exe.display()),
        Err(why) => eprintln!("e2e: AIPerf {why}; its column is skipped"),
    }
    let mut results = Vec::new();
    for (ladder, &step_ms, &streams) in (0..s.repeat)
        .flat_map(|ladder| s.steps.iter().map(move |step| (ladder, step)))
        .flat_map(|(ladder, step)| s.levels.iter().map(move |streams| (ladder, step, streams)))
    {
        let level = level(&s, streams, step_ms);
        eprintln!("e2e: {} ...", report::label(&level));
        let load_avg = load_avg();
        let dir = root.join(format!("c{streams}-s{step_ms}"));
        // What an earlier `--keep` left there would make `record` refuse its `-o`.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        // Repeated ladders take the two clients in turn in either order, so that neither
        // always runs first at a level (after the previous level's last run).
        let floor_first = s.floor && ladder % 2 == 1;
        let mut floor = if floor_first {
            Some(run_floor(&s, level, &dir, tls.as_ref())?)
        } else {
            None
        };
        let recorder = run_recorder(&s, level, &dir, &prompts, tls.as_ref())?;
        if s.floor && !floor_first {
            floor = Some(run_floor(&s, level, &dir, tls.as_ref())?);
        }
        let aiperf = match &peer {
            Ok(install) => match aiperf::run(install, &s, level, &dir) {
                Ok(peer) => Some(peer),
                Err(err) => {
                    eprintln!("e2e: aiperf at {}: {err}", report::label(&level));
                    None
                }
            },
            Err(_) => None,
        };
        let result = LevelResult {
            level,
            recorder,
            floor,
            aiperf,
            load_avg,
        };
        eprintln!("{}", summary_line(&result));
        results.push(result);
        if !s.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let command = if s.argv.is_empty() {
        "cargo bench --bench e2e".to_string()
    } else {
        format!("cargo bench --bench e2e -- {}", s.argv.join(" "))
    };
    let floor_note = match s.floor_kind {
        FloorKind::Epoll => "the floor one thread (epoll, no runtime)".to_string(),
        FloorKind::EpollParse => {
            "the floor one thread (epoll, no runtime, with the recorder's SSE parse and \
             classification)"
                .to_string()
        }
        FloorKind::Tokio => format!("the floor (tokio) {} worker threads", s.threads),
        FloorKind::EpollStamped => {
            "the floor one thread (epoll, recvmsg with kernel receive times)".to_string()
        }
        FloorKind::Uring => {
            "the floor one thread (io_uring multishot recvmsg with kernel receive times)"
                .to_string()
        }
    };
    let steps: Vec<String> = s
        .steps
        .iter()
        .map(|step| {
            format!(
                "{} tokens at {step} ms",
                ((s.request_ms / step).round() as u64).max(16)
            )
        })
        .collect();
    let transport = if s.tls {
        "HTTPS (TLS 1.3, rustls on both sides, the simulator's self-signed certificate)"
    } else {
        "plain HTTP/1.1"
    };
    let mut placement = String::new();
    if s.pin {
        placement.push_str("; simulator pinned to CPU 0, each client to CPU 1 (`--pin`)");
    }
    if let Some(nice) = s.client_nice {
        placement.push_str(&format!(
            "; each client at nice {nice}, the simulator at the bench's own (`--client-nice`)"
        ));
    }
    let notes = format!(
        "Closed loop{placement}, chat API over {transport}, one event per token, {} waves of responses of {} ms each \
         ({}); the recorder uses {} runtime worker threads and (with its default client) its stream reader thread, {floor_note}, the simulator {} \
         (plus its engine and truth-log threads).",
        s.waves,
        s.request_ms,
        steps.join(", "),
        s.threads,
        s.sim_threads
    );
    let aiperf_note = match &peer {
        Ok(_) if results.iter().all(|r| r.aiperf.is_none()) => {
            Some("AIPerf: installed, but no run succeeded (see target/e2e)".to_string())
        }
        Ok(_) => None,
        Err(why) => Some(format!("AIPerf: {why}; column skipped.")),
    };
    let mut markdown = report::markdown(&results, &command, &notes, aiperf_note.as_deref());
    if let Some(summary) = ladders::summary(&results) {
        markdown.push('\n');
        markdown.push_str(&summary);
    }
    println!("\n{markdown}");
    std::fs::write(root.join("report.md"), &markdown)?;
    if let Some(doc) = &s.doc {
        let markers = if s.tls {
            report::TLS_MARKERS
        } else {
            report::MARKERS
        };
        report::splice(doc, markers, &markdown)?;
        eprintln!("e2e: wrote {}", doc.display());
    }
    Ok(())
}

/// One-minute load average from /proc/loadavg (0 when unavailable).
fn load_avg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0.0)
}

fn summary_line(r: &LevelResult) -> String {
    let side = |name: &str, s: &Side| {
        format!(
            "  {name}: {} chunks, {:.2} µs/chunk, p99 {} µs, {:.1} KiB/stream, {} unmatched, \
             {} count mismatches",
            s.chunks,
            s.cpu_ns_per_chunk() / 1000.0,
            s.error.map_or(-1, |p| p.p99 / 1000),
            s.rss_kib_per_stream(r.level.streams),
            s.unmatched,
            s.count_mismatches
        )
    };
    let mut line = side("recorder", &r.recorder);
    if let Some(load) = r.recorder.load_cpu_ns_per_chunk() {
        line.push_str(&format!(" ({:.2} µs/chunk over the load)", load / 1000.0));
    }
    if let Some(f) = &r.floor {
        line.push('\n');
        line.push_str(&side("floor", f));
    }
    if let Some(a) = &r.aiperf {
        line.push('\n');
        line.push_str(&side("aiperf", &a.side));
        if let Some(m) = a.marginal_cpu_ns_per_chunk {
            line.push_str(&format!(", marginal {:.2} µs/chunk", m / 1000.0));
        }
        line.push_str(&format!(", {:.1} s wall", a.wall_s));
    }
    line
}

/// The simulator's certificate and key (PEM) for `--tls`, made once per run.
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
}

fn tls_files(root: &Path) -> io::Result<TlsFiles> {
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let certified = rcgen::generate_simple_self_signed(names).map_err(io::Error::other)?;
    let files = TlsFiles {
        cert: root.join("sim-cert.pem"),
        key: root.join("sim-key.pem"),
    };
    std::fs::write(&files.cert, certified.cert.pem())?;
    std::fs::write(&files.key, certified.key_pair.serialize_pem())?;
    Ok(files)
}

fn sim_args(s: &Settings, level: Level, truth: &Path, tls: Option<&TlsFiles>) -> Vec<String> {
    let mut args: Vec<String> = [
        "--slots",
        &(level.streams + 16).to_string(),
        "--step-base-ms",
        &level.step_ms.to_string(),
        "--step-per-seq-ms",
        "0",
        "--prefill-tok-s",
        "1000000000",
        "--prefill-base-ms",
        "0",
        "--threads",
        &s.sim_threads.to_string(),
        "--truth-log",
        &truth.display().to_string(),
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    if let Some(tls) = tls {
        args.extend([
            "--tls-cert".to_string(),
            tls.cert.display().to_string(),
            "--tls-key".to_string(),
            tls.key.display().to_string(),
        ]);
    }
    args
}

/// The rung of `streams` at `step_ms`: responses of `--request-ms` (16 tokens at least).
fn level(s: &Settings, streams: usize, step_ms: f64) -> Level {
    Level {
        streams,
        step_ms,
        max_tokens: ((s.request_ms / step_ms).round() as u64).max(16),
    }
}

/// The simulator for `client`'s run at `level`, its log and truth log in `dir`
/// (`sim-CLIENT.log`, `truth-CLIENT.jsonl`), and the truth log's path.
fn start_sim(
    s: &Settings,
    level: Level,
    dir: &Path,
    client: &str,
    tls: Option<&TlsFiles>,
) -> io::Result<(Sim, PathBuf)> {
    let truth_path = dir.join(format!("truth-{client}.jsonl"));
    let sim = Sim::start(
        &s.bin,
        &sim_args(s, level, &truth_path, tls),
        &dir.join(format!("sim-{client}.log")),
        s.sim_cpu(),
    )?;
    Ok((sim, truth_path))
}

fn requests(s: &Settings, level: Level) -> u64 {
    level.streams as u64 * s.waves
}

/// Longest a client may run at `level`: `--run-timeout`, else 2 minutes plus 20× the load's
/// nominal length (the simulator may fall far behind at the top of the ladder).
fn run_limit(s: &Settings, level: Level) -> Duration {
    let nominal_s = s.waves as f64 * level.max_tokens as f64 * level.step_ms / 1000.0;
    Duration::from_secs(
        s.run_timeout_s
            .unwrap_or(120 + (20.0 * nominal_s).ceil() as u64),
    )
}

/// The recorder's command line at `level`, `requests` in all, against the simulator at
/// `addr`, writing `trace`, its output and errors in `dir` (pinned under `--pin`).
#[allow(clippy::too_many_arguments)]
fn recorder_command(
    s: &Settings,
    level: Level,
    requests: u64,
    addr: std::net::SocketAddr,
    prompts: &Path,
    tls: Option<&TlsFiles>,
    trace: &Path,
    dir: &Path,
) -> io::Result<Command> {
    let mut command = match &s.record_bin {
        Some(recorder) => Command::new(recorder),
        None => {
            let mut command = Command::new(&s.bin);
            command.arg("record");
            command
        }
    };
    command
        .args([
            "--url",
            &format!(
                "{}://{}/v1",
                if tls.is_some() { "https" } else { "http" },
                addr
            ),
            "--model",
            "sim",
        ])
        .args(["--progress", "off", "--ignore-eos"])
        .args(["--concurrency", &level.streams.to_string()])
        .args(["--requests", &requests.to_string()])
        .args(["--max-tokens", &level.max_tokens.to_string()])
        .args(["--threads", &s.threads.to_string()])
        // RECORD_ARGS="--client hyper" and the like, as benches/record_load.sh takes them.
        .args(
            std::env::var("RECORD_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .arg("--prompts")
        .arg(prompts)
        .args(
            tls.map(|t| ["--ca-cert".as_ref(), t.cert.as_os_str()])
                .into_iter()
                .flatten(),
        )
        .arg("-o")
        .arg(trace)
        .stdout(Stdio::from(std::fs::File::create(dir.join("record.out"))?))
        .stderr(Stdio::from(std::fs::File::create(dir.join("record.err"))?));
    procs::place(&mut command, s.client_cpu(), s.client_nice);
    Ok(command)
}

fn run_recorder(
    s: &Settings,
    level: Level,
    dir: &Path,
    prompts: &Path,
    tls: Option<&TlsFiles>,
) -> io::Result<Side> {
    let (sim, truth_path) = start_sim(s, level, dir, "recorder", tls)?;
    let trace = dir.join("trace.tt");
    let command = recorder_command(
        s,
        level,
        requests(s, level),
        sim.addr,
        prompts,
        tls,
        &trace,
        dir,
    )?;
    let reaped = run_measured(command, run_limit(s, level));
    sim.stop()?;
    let reaped = reaped.map_err(|e| io::Error::other(format!("record: {e}")))?;
    if reaped.status != 0 {
        let err = std::fs::read_to_string(dir.join("record.err")).unwrap_or_default();
        return Err(io::Error::other(format!("record failed: {err}")));
    }
    let truth = load_truth(&truth_path)?;
    let reader = TraceReader::open(&trace).map_err(io::Error::other)?;
    let anchor = reader.header().anchor.mono_ns;
    let health = reader
        .run_end()
        .map(|e| e.client_health.clone())
        .unwrap_or_default();

    let mut side = Side {
        cpu_ns: reaped.cpu_ns,
        load_cpu_ns: health.cpu_ns,
        max_rss_bytes: reaped.max_rss_bytes,
        trace_bytes: Some(std::fs::metadata(&trace)?.len()),
        sched_lag_ns: health.max_sched_lag_ns,
        backpressure: health.backpressure_events,
        ..Side::default()
    };
    let (mut first, mut last) = (u64::MAX, 0);
    let mut join = Join::default();
    let mut last_of_read = Join::default();
    let mut waited = 0;
    for record in reader.requests() {
        let record = record.map_err(io::Error::other)?;
        let read_index: Vec<u32> = record.chunks.iter().map(|c| c.read_index).collect();
        let reads: HashSet<u32> = read_index.iter().copied().collect();
        let ends_read = |k: usize| read_index.get(k + 1) != Some(&read_index[k]);
        if let Some(written) = truth.get(&record.meta.id) {
            waited += accuracy::waited_for_later_write(written, &read_index, 100_000);
        }
        last_of_read.add_some(
            &truth,
            record.meta.id,
            record.chunks.iter().map(|c| anchor + c.arrival_ns),
            ends_read,
        );
        side.event_reads += reads.len() as u64;
        side.chunks += record.chunks.len() as u64;
        for c in &record.chunks {
            first = first.min(c.arrival_ns);
            last = last.max(c.arrival_ns);
        }
        join.add(
            &truth,
            record.meta.id,
            record.chunks.iter().map(|c| anchor + c.arrival_ns),
        );
    }
    side.span_ns = last.saturating_sub(first);
    side.take_join(join);
    side.error_last_of_read = last_of_read.percentiles();
    side.waited = Some(waited);
    Ok(side)
}

fn run_floor(s: &Settings, level: Level, dir: &Path, tls: Option<&TlsFiles>) -> io::Result<Side> {
    let (sim, truth_path) = start_sim(s, level, dir, "floor", tls)?;
    // The exact body the recorder sends for the same settings.
    let mut config = RecordConfig::new(format!("http://{}/v1", sim.addr), "sim", dir.into());
    config.max_tokens = Some(level.max_tokens as u32);
    config.ignore_eos = true;
    let body = tokentrace_recorder::body::build(&config, &Prompt::Text(PROMPT.into()), None);
    let body_file = dir.join("floor-body.json");
    std::fs::write(&body_file, body)?;
    let arrivals_file = dir.join("floor-arrivals.bin");
    let summary_file = dir.join("floor.out");
    let mut command = Command::new(std::env::current_exe()?);
    command
        .arg("--floor-child")
        .args(["--kind", s.floor_kind.name()])
        .args(["--addr", &sim.addr.to_string()])
        .args(["--streams", &level.streams.to_string()])
        .args(["--requests", &requests(s, level).to_string()])
        .args(["--threads", &s.threads.to_string()])
        .args(["--events", &(level.max_tokens + EXTRA_EVENTS).to_string()])
        .arg("--body-file")
        .arg(&body_file)
        .arg("--out")
        .arg(&arrivals_file)
        .args(
            tls.map(|t| ["--tls-ca".as_ref(), t.cert.as_os_str()])
                .into_iter()
                .flatten(),
        )
        .stdout(Stdio::from(std::fs::File::create(&summary_file)?))
        .stderr(Stdio::from(std::fs::File::create(dir.join("floor.err"))?));
    procs::place(&mut command, s.client_cpu(), s.client_nice);
    let reaped = run_measured(command, run_limit(s, level));
    sim.stop()?;
    let reaped = reaped.map_err(|e| io::Error::other(format!("floor: {e}")))?;
    let summary = std::fs::read_to_string(&summary_file)?;
    if reaped.status != 0 {
        let err = std::fs::read_to_string(dir.join("floor.err")).unwrap_or_default();
        return Err(io::Error::other(format!("floor failed: {err}")));
    }
    let summary: serde_json::Value = serde_json::from_str(summary.trim())
        .map_err(|e| io::Error::other(format!("floor summary {summary:?}: {e}")))?;
    let get = |k: &str| summary.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    if get("failed_streams") > 0 {
        eprintln!(
            "e2e: floor: {} connections failed at {}",
            get("failed_streams"),
            report::label(&level)
        );
    }
    let truth = load_truth(&truth_path)?;
    let arrivals = floor::read_arrivals(&arrivals_file)?;
    let mut side = Side {
        cpu_ns: get("cpu_ns"),
        max_rss_bytes: reaped.max_rss_bytes.max(get("vm_hwm_bytes")),
        event_reads: get("event_reads"),
        ..Side::default()
    };
    let (mut first, mut last) = (u64::MAX, 0);
    let mut join = Join::default();
    for a in &arrivals {
        side.chunks += a.events.len() as u64;
        if let (Some(&f), Some(&l)) = (a.events.first(), a.events.last()) {
            first = first.min(f);
            last = last.max(l);
        }
        join.add(&truth, a.id, a.events.iter().copied());
    }
    side.span_ns = last.saturating_sub(first);
    side.take_join(join);
    Ok(side)
}
