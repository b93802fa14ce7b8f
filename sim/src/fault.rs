//! Deciding, per request, which configured faults strike it.

use rand::Rng;

use crate::config::FaultConfig;

/// An HTTP error answered instead of a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HttpFault {
    TooManyRequests,
    Internal,
    Unavailable,
}

/// The faults that strike one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FaultPlan {
    pub http: Option<HttpFault>,
    pub reset: bool,
    pub stall_ms: Option<u64>,
    pub malformed: bool,
    pub oversize_bytes: Option<usize>,
    pub no_done: bool,
    pub no_usage: bool,
    pub non_utf8: bool,
    /// Token events before the mid-stream faults strike.
    pub after_chunks: u32,
}

impl FaultPlan {
    /// True when a fault must be injected after some token event.
    pub(crate) fn has_mid_stream(&self) -> bool {
        self.reset
            || self.stall_ms.is_some()
            || self.malformed
            || self.oversize_bytes.is_some()
            || self.non_utf8
    }
}

/// Draws the faults of the request that arrived `arrival`-th (1-based). Every probability is
/// drawn, in a fixed order, so one fault's setting does not shift another's draws.
pub(crate) fn plan_faults(config: &FaultConfig, arrival: u64, rng: &mut impl Rng) -> FaultPlan {
    let mut fires = |p: f64, every: u64| {
        let drawn = rng.gen::<f64>() < p;
        drawn || (every > 0 && arrival.is_multiple_of(every))
    };
    let http_429 = fires(config.http_429, config.http_429_every);
    let http_500 = fires(config.http_500, config.http_500_every);
    let http_503 = fires(config.http_503, config.http_503_every);
    let reset = fires(config.reset, config.reset_every);
    let stall = fires(config.stall, config.stall_every);
    let malformed = fires(config.malformed, config.malformed_every);
    let oversize = fires(config.oversize, config.oversize_every);
    let no_done = fires(config.no_done, config.no_done_every);
    let no_usage = fires(config.no_usage, config.no_usage_every);
    let non_utf8 = fires(config.non_utf8, config.non_utf8_every);
    let http = if http_429 {
        Some(HttpFault::TooManyRequests)
    } else if http_500 {
        Some(HttpFault::Internal)
    } else if http_503 {
        Some(HttpFault::Unavailable)
    } else {
        None
    };
    FaultPlan {
        http,
        reset,
        stall_ms: stall.then_some(config.stall_ms),
        malformed,
        oversize_bytes: oversize.then_some(config.oversize_bytes),
        no_done,
        no_usage,
        non_utf8,
        after_chunks: config.after_chunks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    #[test]
    fn schedules_fire_on_multiples() {
        let config = FaultConfig {
            http_500_every: 3,
            no_done_every: 2,
            ..Default::default()
        };
        let mut rng = StdRng::seed_from_u64(1);
        let plans: Vec<_> = (1..=6).map(|n| plan_faults(&config, n, &mut rng)).collect();
        let http: Vec<_> = plans.iter().map(|p| p.http.is_some()).collect();
        assert_eq!(http, [false, false, true, false, false, true]);
        let no_done: Vec<_> = plans.iter().map(|p| p.no_done).collect();
        assert_eq!(no_done, [false, true, false, true, false, true]);
    }

    #[test]
    fn probabilities_fire_at_their_rate() {
        let config = FaultConfig {
            stall: 0.25,
            http_429: 1.0,
            ..Default::default()
        };
        let mut rng = StdRng::seed_from_u64(2);
        let plans: Vec<_> = (1..=4000)
            .map(|n| plan_faults(&config, n, &mut rng))
            .collect();
        let stalls = plans.iter().filter(|p| p.stall_ms == Some(2000)).count();
        assert!((800..1200).contains(&stalls), "{stalls}");
        assert!(plans
            .iter()
            .all(|p| p.http == Some(HttpFault::TooManyRequests)));
        assert!(plans.iter().all(|p| !p.reset && !p.no_usage));
    }
}
