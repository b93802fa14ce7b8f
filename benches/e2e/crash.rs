//! What a killed recorder loses: the recorder is SIGKILLed while it streams at a level, and the
//! simulator's truth log (every event it wrote, and when) is joined with what the trace kept
//! (final records, and the chunks of unfinished requests up to their last checkpoint written).
//!
//! An event written before the kill and not in the trace is lost. A request keeps a prefix of
//! its events (a checkpoint holds every chunk up to it), so its loss is the events from its
//! oldest lost one on; that event's age at the kill is how far back the crash reached for that
//! request. docs/FORMAT.md promises about 1.5 s at most.

use crate::accuracy::{load_truth, Truth};
use crate::{recorder_command, start_sim, Level, Settings, TlsFiles};
use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::process::Child;
use std::time::Duration;
use tokentrace_format::clock::mono_now_ns;
use tokentrace_format::TraceReader;

/// Records at `level` into `dir` and SIGKILLs the recorder `after` its start: what the trace
/// lost. The recorder is given enough waves of requests to be streaming at the kill.
pub fn run(
    s: &Settings,
    level: Level,
    dir: &Path,
    prompts: &Path,
    tls: Option<&TlsFiles>,
    after: Duration,
) -> io::Result<Loss> {
    let (sim, truth_path) = start_sim(s, level, dir, "recorder", tls)?;
    let trace = dir.join("trace.tt");
    let waves = (after.as_secs_f64() * 1000.0 / s.request_ms).ceil() as u64 + 2;
    let requests = level.streams as u64 * waves;
    let mut command = recorder_command(s, level, requests, sim.addr, prompts, tls, &trace, dir)?;
    let mut child = command.spawn()?;
    let kill = kill_after(&mut child, after)?;
    // The simulator's truth-log thread writes every event it was handed before it stops.
    sim.stop()?;
    let truth = load_truth(&truth_path)?;
    let reader = TraceReader::open(&trace).map_err(io::Error::other)?;
    if reader.run_end().is_some() {
        return Err(io::Error::other(format!(
            "the recorder finished before its kill at {after:?}: nothing measured"
        )));
    }
    let mut kept = HashMap::new();
    // Final records, then the unfinished requests read from their last checkpoints.
    for record in reader.requests() {
        let record = record.map_err(io::Error::other)?;
        kept.insert(record.meta.id, record.chunks.len());
    }
    Ok(measure(&truth, &kept, kill))
}

/// Sleeps `after`, then SIGKILLs `child` and reaps it.
fn kill_after(child: &mut Child, after: Duration) -> io::Result<Kill> {
    std::thread::sleep(after);
    if let Some(status) = child.try_wait()? {
        return Err(io::Error::other(format!(
            "the recorder exited ({status}) before its kill at {after:?}"
        )));
    }
    let kill_ns = mono_now_ns();
    child.kill()?;
    child.wait()?;
    Ok(Kill {
        at_ns: kill_ns,
        dead_ns: mono_now_ns(),
    })
}

/// When the kill was sent, and when the recorder was known dead (its last read came before).
#[derive(Clone, Copy)]
pub struct Kill {
    pub at_ns: u64,
    pub dead_ns: u64,
}

/// What one kill lost.
#[derive(Debug, PartialEq)]
pub struct Loss {
    /// Events the simulator wrote before the kill.
    pub written: u64,
    /// Of those, events the trace does not hold.
    pub lost: u64,
    /// Per request that lost events: the age at the kill of its oldest lost event (ms),
    /// ascending.
    pub ages_ms: Vec<f64>,
    /// Requests the trace holds more events of than the simulator had written when the
    /// recorder was known dead, or that the truth log does not know: a trace or truth log
    /// that does not match, and the figures above are then not to be trusted.
    pub mismatched: usize,
}

/// Joins `truth` (write times, absolute CLOCK_MONOTONIC ns, by request and event index; 0: no
/// entry) with `kept` (events the trace holds, by request) at `kill`.
pub fn measure(truth: &Truth, kept: &HashMap<u64, usize>, kill: Kill) -> Loss {
    let mut loss = Loss {
        written: 0,
        lost: 0,
        ages_ms: Vec::new(),
        // A request the server wrote nothing for yet is in the trace (its first checkpoint)
        // but not in the truth log.
        mismatched: kept
            .iter()
            .filter(|&(id, &held)| held > 0 && !truth.contains_key(id))
            .count(),
    };
    // Index order is write order: the events written before a time are a prefix.
    let before = |times: &[u64], ns: u64| times.iter().take_while(|&&t| t != 0 && t < ns).count();
    for (id, times) in truth {
        let written = before(times, kill.at_ns);
        let held = kept.get(id).copied().unwrap_or(0);
        loss.written += written as u64;
        // The recorder cannot have read an event written after it died.
        if held > before(times, kill.dead_ns) {
            loss.mismatched += 1;
        }
        if held < written {
            loss.lost += (written - held) as u64;
            loss.ages_ms
                .push(kill.at_ns.saturating_sub(times[held]) as f64 / 1e6);
        }
    }
    loss.ages_ms.sort_by(f64::total_cmp);
    loss
}

impl Loss {
    /// The `q` quantile of the ages (nearest rank), 0 when nothing was lost.
    pub fn age_ms(&self, q: f64) -> f64 {
        match self.ages_ms.len() {
            0 => 0.0,
            n => self.ages_ms[((q * n as f64).ceil() as usize).clamp(1, n) - 1],
        }
    }
}

/// `cargo test --release --bench e2e`: the join on a small made-up run.
pub fn self_check() -> io::Result<()> {
    let ms = 1_000_000;
    let kill = Kill {
        at_ns: 60 * ms,
        dead_ns: 61 * ms,
    };
    // Request 1: five events 10 ms apart, three kept. Request 2: all kept. Request 3: written
    // only after the kill. Request 4: two written, none kept. Request 5: its second event has
    // no entry (a truth line lost), one kept.
    let truth: Truth = [
        (1, (1..=5).map(|k| k * 10 * ms).collect()),
        (2, vec![5 * ms, 15 * ms]),
        (3, vec![70 * ms]),
        (4, vec![30 * ms, 45 * ms]),
        (5, vec![20 * ms, 0, 50 * ms]),
    ]
    .into_iter()
    .collect();
    // Request 6 was sent just before the kill: in the trace with no events, unknown to the
    // truth log.
    let kept: HashMap<u64, usize> = [(1, 3), (2, 2), (5, 1), (6, 0)].into_iter().collect();
    let loss = measure(&truth, &kept, kill);
    let expected = Loss {
        written: 5 + 2 + 2 + 1,
        lost: 2 + 2,
        // Request 1's oldest lost event was written at 40 ms, request 4's at 30 ms.
        ages_ms: vec![20.0, 30.0],
        mismatched: 0,
    };
    if loss != expected || loss.age_ms(0.5) != 20.0 || loss.age_ms(0.9) != 30.0 {
        return Err(io::Error::other(format!(
            "crash join: {loss:?}, expected {expected:?}"
        )));
    }
    // More kept than written before the recorder died (request 1: 5 written, the last at
    // 50 ms; request 3's only event came after), and a request the truth log does not know.
    for (kept, what) in [
        ((1, 6), "more events kept than were written"),
        (
            (3, 1),
            "an event kept that was written after the recorder died",
        ),
        ((9, 1), "a request the truth log does not know"),
    ] {
        let kept: HashMap<u64, usize> = [kept].into_iter().collect();
        if measure(&truth, &kept, kill).mismatched != 1 {
            return Err(io::Error::other(format!("crash join: {what} not seen")));
        }
    }
    Ok(())
}

/// `--kill-after`: every level of the ladder, killed after each of `s.kill_after` in turn;
/// prints the table and writes it to `root/crash.md`.
pub fn ladder(s: &Settings, root: &Path, prompts: &Path, tls: Option<&TlsFiles>) -> io::Result<()> {
    let mut rows = String::from(
        "| streams | step ms | kill after s | events written | lost | lost share | requests with a loss | oldest lost event's age p50 ms | p90 | max | mismatched |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for _ in 0..s.repeat {
        for &step_ms in &s.steps {
            for &streams in &s.levels {
                let level = crate::level(s, streams, step_ms);
                for &after_s in &s.kill_after {
                    let dir = root.join(format!("c{streams}-s{step_ms}-kill{after_s}"));
                    let _ = std::fs::remove_dir_all(&dir);
                    std::fs::create_dir_all(&dir)?;
                    eprintln!(
                        "e2e: {} killed after {after_s} s ...",
                        crate::report::label(&level)
                    );
                    let loss = run(
                        s,
                        level,
                        &dir,
                        prompts,
                        tls,
                        Duration::from_secs_f64(after_s),
                    )?;
                    let row = format!(
                        "| {streams} | {step_ms} | {after_s} | {} | {} | {:.1}% | {} | {:.0} | {:.0} | {:.0} | {} |\n",
                        loss.written,
                        loss.lost,
                        100.0 * loss.lost as f64 / loss.written.max(1) as f64,
                        loss.ages_ms.len(),
                        loss.age_ms(0.5),
                        loss.age_ms(0.9),
                        loss.age_ms(1.0),
                        loss.mismatched,
                    );
                    eprint!("{row}");
                    rows.push_str(&row);
                    if !s.keep {
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                }
            }
        }
    }
    let text = format!(
        "Command: `cargo bench --bench e2e -- {}`  \nThe recorder SIGKILLed while streaming; \
         the simulator's truth log joined with what the trace kept.\n\n{rows}",
        s.argv.join(" ")
    );
    println!("\n{text}");
    std::fs::write(root.join("crash.md"), text)
}
