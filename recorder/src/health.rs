//! The client's own health during a run, so a run the client itself disturbed can be flagged:
//! CPU time (getrusage), peak RSS, and tokio scheduling lag measured by a ticker that records
//! how late it wakes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// CPU time and peak RSS of this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessUsage {
    /// User + system CPU time in ns.
    pub cpu_ns: u64,
    /// User CPU time in ns (the client's own code; the rest is the kernel's network stack).
    pub user_ns: u64,
    /// Peak resident set size in bytes.
    pub max_rss_bytes: u64,
}

/// Read getrusage(RUSAGE_SELF).
pub fn process_usage() -> ProcessUsage {
    // SAFETY: an all-zero rusage is a valid value, and getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return ProcessUsage::default();
    }
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    // ru_maxrss is KiB on Linux, bytes on macOS.
    let rss_unit = if cfg!(target_os = "macos") { 1 } else { 1024 };
    ProcessUsage {
        cpu_ns: tv(usage.ru_utime) + tv(usage.ru_stime),
        user_ns: tv(usage.ru_utime),
        max_rss_bytes: peak_rss_from_proc().unwrap_or(usage.ru_maxrss as u64 * rss_unit),
    }
}

/// This process's own peak RSS (`VmHWM` in /proc/self/status, Linux), in bytes.
///
/// Why not ru_maxrss: Linux carries it across exec, so a recorder started by a large parent
/// (cargo, a Python harness) would report the parent's peak as its own.
fn peak_rss_from_proc() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_hwm(&status)
}

fn parse_vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Largest and total lateness of a periodic ticker on the runtime.
#[derive(Debug, Default)]
pub struct LagProbe {
    max_lag_ns: AtomicU64,
    ticks: AtomicU64,
    late_ticks: AtomicU64,
}

/// How often the lag probe ticks. Each tick wakes a runtime worker that would otherwise sleep (the
/// stream reader, not the runtime, reads the responses), and on a virtual machine a timer wake-up
/// is costly: at 10 ms the ticker made most of an idle recorder's CPU, several ms a second, which
/// at 64 streams × 10 ms is a tenth of the recorder's CPU per chunk
/// (docs/performance/2026-12-02-to-03.md, *The lag probe's ticker, checkpoints held back, bodies
/// built once*). At 50 ms it wakes a fifth as often. The price is sensitivity: a stall of S ms now
/// shows as a lag of at least S − 50 ms, so the analyzer's 10 ms flag is certain only for stalls
/// over 60 ms (over 20 ms before), and a shorter stall raises it only when a tick falls due during
/// it.
pub const LAG_TICK: Duration = Duration::from_millis(50);

/// A tick later than this counts as late. tokio's timer wheel has millisecond resolution and
/// rounds a deadline up to the next millisecond, so up to 1 ms of oversleep is the timer's own
/// granularity, not a busy runtime.
const LATE_NS: u64 = 2_000_000;

impl LagProbe {
    /// Spawn the ticker on the current runtime; it runs until the handle is aborted (or the
    /// runtime shuts down).
    pub fn spawn(period: Duration) -> (Arc<LagProbe>, tokio::task::JoinHandle<()>) {
        let probe = Arc::new(LagProbe::default());
        let ticker = probe.clone();
        let handle = tokio::spawn(async move {
            let mut target = tokio::time::Instant::now() + period;
            loop {
                tokio::time::sleep_until(target).await;
                let lag = tokio::time::Instant::now().saturating_duration_since(target);
                let lag_ns = u64::try_from(lag.as_nanos()).unwrap_or(u64::MAX);
                ticker.max_lag_ns.fetch_max(lag_ns, Ordering::Relaxed);
                ticker.ticks.fetch_add(1, Ordering::Relaxed);
                if lag_ns > LATE_NS {
                    ticker.late_ticks.fetch_add(1, Ordering::Relaxed);
                }
                target += period;
                let now = tokio::time::Instant::now();
                if target < now {
                    target = now + period;
                }
            }
        });
        (probe, handle)
    }

    /// Largest oversleep seen, ns.
    pub fn max_lag_ns(&self) -> u64 {
        self.max_lag_ns.load(Ordering::Relaxed)
    }

    /// Ticks observed.
    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    /// Ticks more than 2 ms late.
    pub fn late_ticks(&self) -> u64 {
        self.late_ticks.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_is_read_from_vm_hwm() {
        let status = "Name:\tx\nVmPeak:\t  9000 kB\nVmHWM:\t    1234 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(1234 * 1024));
        assert_eq!(parse_vm_hwm("Name:\tx\n"), None);
        if cfg!(target_os = "linux") {
            assert!(peak_rss_from_proc().is_some_and(|b| b > 0));
        }
    }

    #[test]
    fn usage_grows_with_work() {
        let before = process_usage();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = process_usage();
        assert!(after.cpu_ns > before.cpu_ns);
        assert!(after.max_rss_bytes > 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn ticker_sees_a_blocked_runtime() {
        let (probe, ticker) = LagProbe::spawn(Duration::from_millis(2));
        tokio::time::sleep(Duration::from_millis(5)).await;
        // Block the only worker so the ticker wakes late.
        std::thread::sleep(Duration::from_millis(30));
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(probe.ticks() > 0);
        assert!(probe.max_lag_ns() >= 20_000_000, "{}", probe.max_lag_ns());
        ticker.abort();
    }
}
