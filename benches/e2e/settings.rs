//! The benchmark's command line (the flags are listed at the top of `benches/e2e.rs`).

use crate::floor::FloorKind;
use std::path::PathBuf;

/// What one run of the benchmark measures, and how.
pub struct Settings {
    /// Concurrent streams of each level (`--levels`).
    pub levels: Vec<usize>,
    /// The simulator's decode step of each level, ms (`--steps`).
    pub steps: Vec<f64>,
    /// How long each response streams, ms (`--request-ms`): its tokens are this over the step.
    pub request_ms: f64,
    /// Responses per stream (`--waves`).
    pub waves: u64,
    /// The recorder's runtime worker threads (`--threads`).
    pub threads: usize,
    /// The simulator's runtime threads (`--sim-threads`).
    pub sim_threads: usize,
    /// Whether the floor runs beside the recorder (`--no-floor`: not).
    pub floor: bool,
    /// Which floor (`--floor`).
    pub floor_kind: FloorKind,
    /// AIPerf's program (`--aiperf`; else the conformance suite's cache, when installed).
    pub aiperf: Option<PathBuf>,
    /// AIPerf is not run (`--no-aiperf`).
    pub no_aiperf: bool,
    /// Longest an AIPerf run may take, s (`--aiperf-timeout`).
    pub aiperf_timeout_s: u64,
    /// AIPerf as `--concurrency` alone runs it (its concurrency-burst mode), without the rate
    /// cap the harness adds by default (`--aiperf-burst`).
    pub aiperf_burst: bool,
    /// Longest a client's run may take, s (`--run-timeout`; else from the level's length).
    pub run_timeout_s: Option<u64>,
    /// Each level's files (traces, truth logs, outputs) are kept (`--keep`).
    pub keep: bool,
    /// Ladders run in a row (`--repeat`).
    pub repeat: usize,
    /// A Markdown file whose marked section the report replaces (`--doc`).
    pub doc: Option<PathBuf>,
    /// The simulator serves TLS; recorder and floor speak it (AIPerf is not run) (`--tls`).
    pub tls: bool,
    /// The simulator runs on CPU 0 only and each client on CPU 1 only (`--pin`).
    pub pin: bool,
    /// Each measured client (recorder, floor, AIPerf) runs at this nice value (`--client-nice`;
    /// below the bench's own needs root, `CAP_SYS_NICE` or `RLIMIT_NICE`); None: the bench's
    /// own.
    pub client_nice: Option<i32>,
    /// The `tokentrace` binary: the simulator, and the recorder unless `record_bin` (`--bin`).
    pub bin: PathBuf,
    /// A `tokentrace-record` binary measured instead of `bin record` (`--record-bin`).
    pub record_bin: Option<PathBuf>,
    /// Seconds after its start at which the recorder is killed, each in turn (`--kill-after`:
    /// what a crash loses, [`crate::crash`]); empty: the ladder as usual.
    pub kill_after: Vec<f64>,
    /// The flags as given, for the report's command line.
    pub argv: Vec<String>,
}

impl Settings {
    /// The simulator's CPU under `--pin`.
    pub fn sim_cpu(&self) -> Option<usize> {
        self.pin.then_some(0)
    }

    /// The measured client's CPU under `--pin`.
    pub fn client_cpu(&self) -> Option<usize> {
        self.pin.then_some(1)
    }

    /// The settings of `args` (the bench's command line after `--`, and cargo's `--bench`);
    /// an unknown flag or a bad value is an error.
    pub fn parse(args: &[String]) -> Result<Settings, String> {
        let mut s = Settings {
            levels: vec![64, 256, 1024, 2048],
            steps: vec![10.0, 2.0],
            request_ms: 1000.0,
            waves: 2,
            threads: 2,
            sim_threads: 1,
            floor: true,
            floor_kind: FloorKind::Epoll,
            aiperf: None,
            no_aiperf: false,
            aiperf_timeout_s: 300,
            aiperf_burst: false,
            run_timeout_s: None,
            keep: false,
            repeat: 1,
            doc: None,
            tls: false,
            pin: false,
            client_nice: None,
            bin: PathBuf::from("target/release/tokentrace"),
            record_bin: None,
            kill_after: Vec::new(),
            argv: Vec::new(),
        };
        let mut i = 0;
        while i < args.len() {
            let flag = args[i].as_str();
            // cargo passes --bench to harness-less benches; it is not the report's.
            if flag == "--bench" {
                i += 1;
                continue;
            }
            let value = || {
                args.get(i + 1)
                    .map(String::as_str)
                    .ok_or(format!("{flag} needs a value"))
            };
            let mut step = 2;
            match flag {
                "--levels" => s.levels = list(flag, value()?, count)?,
                "--steps" => s.steps = list(flag, value()?, positive)?,
                "--request-ms" => s.request_ms = positive(flag, value()?)?,
                "--waves" => s.waves = count(flag, value()?)? as u64,
                "--threads" => s.threads = count(flag, value()?)?,
                "--sim-threads" => s.sim_threads = count(flag, value()?)?,
                "--bin" => s.bin = PathBuf::from(value()?),
                "--record-bin" => s.record_bin = Some(PathBuf::from(value()?)),
                "--kill-after" => s.kill_after = list(flag, value()?, positive)?,
                "--doc" => s.doc = Some(PathBuf::from(value()?)),
                "--floor" => s.floor_kind = FloorKind::parse(value()?)?,
                "--aiperf" => s.aiperf = Some(PathBuf::from(value()?)),
                "--aiperf-timeout" => s.aiperf_timeout_s = count(flag, value()?)? as u64,
                "--client-nice" => s.client_nice = Some(nice(flag, value()?)?),
                "--run-timeout" => s.run_timeout_s = Some(count(flag, value()?)? as u64),
                "--repeat" => s.repeat = count(flag, value()?)?,
                "--no-aiperf" => (s.no_aiperf, step) = (true, 1),
                "--aiperf-burst" => (s.aiperf_burst, step) = (true, 1),
                "--no-floor" => (s.floor, step) = (false, 1),
                "--keep" => (s.keep, step) = (true, 1),
                "--tls" => (s.tls, step) = (true, 1),
                "--pin" => (s.pin, step) = (true, 1),
                other => {
                    return Err(format!(
                        "unknown flag {other} (the flags are listed in benches/e2e.rs)"
                    ))
                }
            }
            s.argv.extend(args[i..i + step].iter().cloned());
            i += step;
        }
        Ok(s)
    }
}

/// A whole number over 0 (streams, waves, threads, seconds), or an error naming `flag`.
fn count(flag: &str, x: &str) -> Result<usize, String> {
    match x.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag} {x}: a whole number over 0")),
    }
}

/// A finite number over 0 (ms, seconds), or an error naming `flag`.
fn positive(flag: &str, x: &str) -> Result<f64, String> {
    match x.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{flag} {x}: a number over 0")),
    }
}

/// A nice value, -20 to 19, or an error naming `flag`.
fn nice(flag: &str, x: &str) -> Result<i32, String> {
    match x.trim().parse::<i32>() {
        Ok(n) if (-20..=19).contains(&n) => Ok(n),
        _ => Err(format!("{flag} {x}: a nice value from -20 to 19")),
    }
}

/// A comma-separated list, each item read by `one` ([`count`], [`positive`]).
fn list<T>(
    flag: &str,
    items: &str,
    one: fn(&str, &str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    items.split(',').map(|x| one(flag, x)).collect()
}

/// The parse's self-check (`cargo test --release --bench e2e`): the documented flags are taken
/// and kept for the report, cargo's `--bench` left out; an unknown flag or a bad value is an
/// error.
pub fn self_check() -> std::io::Result<()> {
    let parse = |line: &str| {
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        Settings::parse(&args)
    };
    let fail = |what: String| Err(std::io::Error::other(format!("settings: {what}")));
    let line = "--bench --levels 32,1024 --steps 5 --request-ms 640 --waves 5 --no-aiperf --tls --repeat 3 --client-nice -5";
    let s = match parse(line) {
        Ok(s) => s,
        Err(err) => return fail(format!("{line}: {err}")),
    };
    let taken = s.levels == [32, 1024]
        && s.steps == [5.0]
        && (s.request_ms, s.waves, s.repeat) == (640.0, 5, 3)
        && s.no_aiperf
        && s.tls
        && s.client_nice == Some(-5)
        && s.floor
        && s.argv.first().map(String::as_str) == Some("--levels");
    if !taken {
        return fail(format!("{line}: not taken as given"));
    }
    for line in [
        "--level 64",
        "--levels 0",
        "--levels 1.5",
        "--levels 64,x",
        "--steps 0",
        "--steps -2",
        "--request-ms inf",
        "--repeat 0",
        "--waves 0",
        "--threads -1",
        "--kill-after 0",
        "--kill-after 2,nan",
        "--waves",
        "--client-nice 20",
        "--client-nice -21",
        "--client-nice 1.5",
    ] {
        if parse(line).is_ok() {
            return fail(format!("{line} was taken"));
        }
    }
    Ok(())
}
