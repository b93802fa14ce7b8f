//! The search: grow the concurrency geometrically (doubling) until a level fails, then bisect
//! between the highest passing and the lowest failing level. A level passes only if every one
//! of its trials passes; its trials stop at the first failure.
//!
//! [`SearchState`] is a pure state machine (which trial next, given the verdicts so far);
//! [`run_search`] drives it with a [`TrialRunner`], a [`Budget`] and a [`SearchObserver`].
//! Every judged trial is kept, so the report can show the trials on both sides of the knee.

use crate::workload::{SearchSettings, Workload};
use std::time::{Duration, Instant};

/// The highest level known to pass and the lowest known to fail, so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bracket {
    /// Highest concurrency whose every trial passed.
    pub highest_passing: Option<u32>,
    /// Lowest concurrency with a failed trial.
    pub lowest_failing: Option<u32>,
}

/// One trial to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrialSpec {
    /// The workload.
    pub workload: Workload,
    /// The level.
    pub concurrency: u32,
    /// 1-based trial number within the level.
    pub trial: u32,
}

/// What the search asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Run this trial of this level.
    RunTrial {
        /// The level.
        concurrency: u32,
        /// 1-based trial number within the level.
        trial: u32,
    },
    /// The bracket is resolved (adjacent levels, or a bound reached).
    Finished,
}

/// The search as a pure state machine over trial verdicts.
#[derive(Debug, Clone)]
pub struct SearchState {
    min: u32,
    max: u32,
    trials_per_level: u32,
    complete_levels: bool,
    bracket: Bracket,
    current: Option<LevelProgress>,
}

/// The level being run: how many of its trials ran and whether any failed.
#[derive(Debug, Clone, Copy)]
struct LevelProgress {
    concurrency: u32,
    run: u32,
    failed: bool,
}

impl SearchState {
    /// A search within the settings' bounds, with their trials per level. With
    /// `complete_levels` a level runs all its trials even after one fails (so that a later
    /// re-analysis under another SLO can judge every level); otherwise it stops at the first.
    pub fn new(settings: &SearchSettings) -> SearchState {
        let min = settings.min_concurrency.max(1);
        SearchState {
            min,
            max: settings.max_concurrency.max(min),
            trials_per_level: settings.trials_per_level.max(1),
            complete_levels: settings.complete_levels,
            bracket: Bracket::default(),
            current: None,
        }
    }

    /// The bracket so far.
    pub fn bracket(&self) -> Bracket {
        self.bracket
    }

    /// The next trial to run, or `Finished`.
    pub fn next_step(&self) -> Step {
        if let Some(level) = self.current {
            return Step::RunTrial {
                concurrency: level.concurrency,
                trial: level.run + 1,
            };
        }
        match self.next_level() {
            Some(concurrency) => Step::RunTrial {
                concurrency,
                trial: 1,
            },
            None => Step::Finished,
        }
    }

    fn next_level(&self) -> Option<u32> {
        match (self.bracket.highest_passing, self.bracket.lowest_failing) {
            (None, None) => Some(self.min),
            (Some(pass), None) if pass >= self.max => None,
            (Some(pass), None) => Some(pass.saturating_mul(2).min(self.max)),
            (None, Some(_)) => None,
            (Some(pass), Some(fail)) if fail - pass <= 1 => None,
            (Some(pass), Some(fail)) => Some(pass + (fail - pass) / 2),
        }
    }

    /// Records the verdict of the trial [`next_step`](Self::next_step) asked for.
    pub fn record(&mut self, passed: bool) {
        let mut level = match self.current {
            Some(level) => level,
            None => match self.next_level() {
                Some(concurrency) => LevelProgress {
                    concurrency,
                    run: 0,
                    failed: false,
                },
                None => return,
            },
        };
        level.run += 1;
        level.failed |= !passed;
        let stop_early = level.failed && !self.complete_levels;
        if !stop_early && level.run < self.trials_per_level {
            self.current = Some(level);
            return;
        }
        self.current = None;
        if level.failed {
            self.bracket.lowest_failing = Some(level.concurrency);
        } else {
            self.bracket.highest_passing = Some(level.concurrency);
        }
    }
}

/// What a runner returns for one trial.
#[derive(Debug, Clone, PartialEq)]
pub enum TrialRun<T> {
    /// The trial ran (or was recorded) and was judged against the SLOs.
    Measured {
        /// True if every SLO held.
        passed: bool,
        /// The runner's data about the trial (metrics, trace path, …).
        data: T,
    },
    /// The trial is not available (a replay of a directory that never recorded it).
    Unavailable,
}

/// Runs (or replays) one trial and judges it.
pub trait TrialRunner {
    /// Data kept per trial for the report.
    type Trial;
    /// Why a trial could not be run at all (aborts the search).
    type Error;
    /// Runs the trial `spec`.
    fn run_trial(&mut self, spec: &TrialSpec) -> Result<TrialRun<Self::Trial>, Self::Error>;
}

/// Decides whether another trial may start.
pub trait Budget {
    /// True when no more trials may start.
    fn exhausted(&self) -> bool;
}

/// A wall-clock deadline; `None` means unlimited.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub Option<Instant>);

impl Deadline {
    /// A deadline `budget` from now (none if `budget` is None).
    pub fn after(budget: Option<Duration>) -> Deadline {
        Deadline(budget.map(|b| Instant::now() + b))
    }
}

impl Budget for Deadline {
    fn exhausted(&self) -> bool {
        self.0.is_some_and(|deadline| Instant::now() >= deadline)
    }
}

/// Hears about every trial, e.g. to print progress.
pub trait SearchObserver {
    /// A trial is about to start.
    fn trial_started(&mut self, _spec: &TrialSpec, _bracket: Bracket) {}
    /// A trial ended with this verdict; `bracket` already includes it.
    fn trial_finished(&mut self, _spec: &TrialSpec, _passed: bool, _bracket: Bracket) {}
}

/// An observer that ignores everything.
pub struct Silent;
impl SearchObserver for Silent {}

/// Why the search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Adjacent passing/failing levels found, the minimum failed, or the maximum passed.
    Resolved,
    /// The time budget ran out before the next trial.
    TimeBudget,
    /// The runner did not have this trial (replay of a directory that never recorded it).
    Unavailable {
        /// The level asked for.
        concurrency: u32,
        /// The trial asked for.
        trial: u32,
    },
}

/// One judged trial.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgedTrial<T> {
    /// 1-based trial number within its level.
    pub trial: u32,
    /// True if every SLO held.
    pub passed: bool,
    /// The runner's data.
    pub data: T,
}

/// Every trial run at one level, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Level<T> {
    /// The concurrency.
    pub concurrency: u32,
    /// Its trials in the order run.
    pub trials: Vec<JudgedTrial<T>>,
}

/// The result of a search for one workload.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchOutcome<T> {
    /// The final bracket.
    pub bracket: Bracket,
    /// Every level run, in the order first run.
    pub levels: Vec<Level<T>>,
    /// Why it stopped.
    pub stop: StopReason,
}

impl<T> SearchOutcome<T> {
    /// The trials of a level (empty if the level was not run or is None).
    pub fn trials_at(&self, concurrency: Option<u32>) -> &[JudgedTrial<T>] {
        concurrency
            .and_then(|c| self.levels.iter().find(|l| l.concurrency == c))
            .map(|l| l.trials.as_slice())
            .unwrap_or(&[])
    }
}

/// Runs the search for one workload to its end.
pub fn run_search<R: TrialRunner>(
    runner: &mut R,
    workload: Workload,
    settings: &SearchSettings,
    budget: &dyn Budget,
    observer: &mut dyn SearchObserver,
) -> Result<SearchOutcome<R::Trial>, R::Error> {
    let mut state = SearchState::new(settings);
    let mut levels: Vec<Level<R::Trial>> = Vec::new();
    let stop = loop {
        let (concurrency, trial) = match state.next_step() {
            Step::Finished => break StopReason::Resolved,
            Step::RunTrial { concurrency, trial } => (concurrency, trial),
        };
        if budget.exhausted() {
            break StopReason::TimeBudget;
        }
        let spec = TrialSpec {
            workload,
            concurrency,
            trial,
        };
        observer.trial_started(&spec, state.bracket());
        let (passed, data) = match runner.run_trial(&spec)? {
            TrialRun::Measured { passed, data } => (passed, data),
            TrialRun::Unavailable => break StopReason::Unavailable { concurrency, trial },
        };
        state.record(passed);
        observer.trial_finished(&spec, passed, state.bracket());
        let judged = JudgedTrial {
            trial,
            passed,
            data,
        };
        match levels.iter_mut().find(|l| l.concurrency == concurrency) {
            Some(level) => level.trials.push(judged),
            None => levels.push(Level {
                concurrency,
                trials: vec![judged],
            }),
        }
    };
    Ok(SearchOutcome {
        bracket: state.bracket(),
        levels,
        stop,
    })
}

#[cfg(test)]
#[path = "search_tests.rs"]
mod tests;
