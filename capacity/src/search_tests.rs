use super::*;
use std::cell::Cell;

/// A deterministic runner: a trial passes iff `verdict(concurrency, trial)`; it logs every
/// trial it was asked for.
struct MockRunner<F: Fn(u32, u32) -> bool> {
    verdict: F,
    log: Vec<(u32, u32)>,
    /// Levels it claims not to have (replay of a partial directory).
    missing: Vec<u32>,
}

impl<F: Fn(u32, u32) -> bool> MockRunner<F> {
    fn new(verdict: F) -> Self {
        MockRunner {
            verdict,
            log: Vec::new(),
            missing: Vec::new(),
        }
    }
}

impl<F: Fn(u32, u32) -> bool> TrialRunner for MockRunner<F> {
    type Trial = (u32, u32);
    type Error = String;
    fn run_trial(&mut self, spec: &TrialSpec) -> Result<TrialRun<(u32, u32)>, String> {
        if self.missing.contains(&spec.concurrency) {
            return Ok(TrialRun::Unavailable);
        }
        if spec.concurrency == 999 {
            return Err("runner broke".into());
        }
        self.log.push((spec.concurrency, spec.trial));
        Ok(TrialRun::Measured {
            passed: (self.verdict)(spec.concurrency, spec.trial),
            data: (spec.concurrency, spec.trial),
        })
    }
}

/// A budget that allows a fixed number of trials.
struct TrialCountBudget {
    left: Cell<u32>,
}

impl Budget for TrialCountBudget {
    fn exhausted(&self) -> bool {
        let left = self.left.get();
        if left == 0 {
            return true;
        }
        self.left.set(left - 1);
        false
    }
}

fn workload() -> Workload {
    Workload { isl: 128, osl: 16 }
}

fn settings(min: u32, max: u32, trials: u32) -> SearchSettings {
    SearchSettings {
        min_concurrency: min,
        max_concurrency: max,
        trials_per_level: trials,
        ..SearchSettings::default()
    }
}

fn levels_of(log: &[(u32, u32)]) -> Vec<u32> {
    let mut levels: Vec<u32> = Vec::new();
    for &(c, _) in log {
        if levels.last() != Some(&c) {
            levels.push(c);
        }
    }
    levels
}

#[test]
fn finds_the_knee_by_doubling_then_bisecting() {
    let mut runner = MockRunner::new(|c, _| c <= 11);
    let s = settings(1, 1024, 3);
    let out = run_search(&mut runner, workload(), &s, &Deadline(None), &mut Silent).unwrap();
    assert_eq!(out.stop, StopReason::Resolved);
    assert_eq!(out.bracket.highest_passing, Some(11));
    assert_eq!(out.bracket.lowest_failing, Some(12));
    // 1 2 4 8 pass, 16 fails, then 12 fails, 10 passes, 11 passes.
    assert_eq!(levels_of(&runner.log), vec![1, 2, 4, 8, 16, 12, 10, 11]);
    // Passing levels run every trial; failing levels stop at the first failure.
    assert_eq!(out.trials_at(Some(11)).len(), 3);
    assert!(out.trials_at(Some(11)).iter().all(|t| t.passed));
    assert_eq!(out.trials_at(Some(12)).len(), 1);
    assert!(!out.trials_at(Some(12))[0].passed);
}

#[test]
fn every_knee_in_range_is_found_exactly() {
    for knee in 1..=70u32 {
        let mut runner = MockRunner::new(move |c, _| c <= knee);
        let out = run_search(
            &mut runner,
            workload(),
            &settings(1, 64, 2),
            &Deadline(None),
            &mut Silent,
        )
        .unwrap();
        if knee >= 64 {
            assert_eq!(out.bracket.highest_passing, Some(64), "knee {knee}");
            assert_eq!(out.bracket.lowest_failing, None, "knee {knee}");
        } else {
            assert_eq!(out.bracket.highest_passing, Some(knee), "knee {knee}");
            assert_eq!(out.bracket.lowest_failing, Some(knee + 1), "knee {knee}");
        }
        // No level is ever run twice.
        let levels = levels_of(&runner.log);
        let mut unique = levels.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), levels.len(), "knee {knee}: {levels:?}");
    }
}

/// The bracket is 7 passing / 8 failing, and level 8 ran exactly these (trial, passed) pairs.
fn assert_knee_at_8_with(out: &SearchOutcome<(u32, u32)>, expected: &[(u32, bool)]) {
    assert_eq!(out.bracket.highest_passing, Some(7));
    assert_eq!(out.bracket.lowest_failing, Some(8));
    let at8: Vec<(u32, bool)> = out
        .trials_at(Some(8))
        .iter()
        .map(|t| (t.trial, t.passed))
        .collect();
    assert_eq!(at8, expected);
}

#[test]
fn a_level_fails_at_its_first_failing_trial() {
    // Level 8 fails only in its second trial: the third is never run.
    let mut runner = MockRunner::new(|c, t| c < 8 || (c == 8 && t != 2));
    let out = run_search(
        &mut runner,
        workload(),
        &settings(1, 1024, 3),
        &Deadline(None),
        &mut Silent,
    )
    .unwrap();
    assert_knee_at_8_with(&out, &[(1, true), (2, false)]);
    assert!(!runner.log.contains(&(8, 3)));
}

#[test]
fn bounds_are_respected() {
    // Everything passes: growth stops at max, which need not be a power of two.
    let mut runner = MockRunner::new(|_, _| true);
    let out = run_search(
        &mut runner,
        workload(),
        &settings(3, 20, 1),
        &Deadline(None),
        &mut Silent,
    )
    .unwrap();
    assert_eq!(levels_of(&runner.log), vec![3, 6, 12, 20]);
    assert_eq!(out.bracket.highest_passing, Some(20));
    assert_eq!(out.bracket.lowest_failing, None);
    assert_eq!(out.stop, StopReason::Resolved);

    // Nothing passes: the minimum fails and the search ends there.
    let mut runner = MockRunner::new(|_, _| false);
    let out = run_search(
        &mut runner,
        workload(),
        &settings(4, 64, 3),
        &Deadline(None),
        &mut Silent,
    )
    .unwrap();
    assert_eq!(runner.log, vec![(4, 1)]);
    assert_eq!(out.bracket.highest_passing, None);
    assert_eq!(out.bracket.lowest_failing, Some(4));
    assert!(out.trials_at(None).is_empty());
}

#[test]
fn time_budget_stops_with_the_bracket_so_far() {
    let mut runner = MockRunner::new(|c, _| c <= 11);
    let budget = TrialCountBudget { left: Cell::new(7) };
    let out = run_search(
        &mut runner,
        workload(),
        &settings(1, 1024, 1),
        &budget,
        &mut Silent,
    )
    .unwrap();
    // 1 2 4 8 16(fail) 12(fail) 10(pass), then the budget is gone before 11.
    assert_eq!(runner.log.len(), 7);
    assert_eq!(out.stop, StopReason::TimeBudget);
    assert_eq!(out.bracket.highest_passing, Some(10));
    assert_eq!(out.bracket.lowest_failing, Some(12));
}

#[test]
fn a_missing_trial_stops_a_replay_and_runner_errors_propagate() {
    let mut runner = MockRunner::new(|c, _| c <= 40);
    runner.missing = vec![64];
    let out = run_search(
        &mut runner,
        workload(),
        &settings(1, 1024, 2),
        &Deadline(None),
        &mut Silent,
    )
    .unwrap();
    assert_eq!(
        out.stop,
        StopReason::Unavailable {
            concurrency: 64,
            trial: 1
        }
    );
    assert_eq!(out.bracket.highest_passing, Some(32));
    assert_eq!(out.bracket.lowest_failing, None);

    let mut runner = MockRunner::new(|_, _| true);
    let err = run_search(
        &mut runner,
        workload(),
        &settings(999, 999, 1),
        &Deadline(None),
        &mut Silent,
    );
    assert_eq!(err.unwrap_err(), "runner broke");
}

#[test]
fn observer_sees_every_trial_with_the_bracket() {
    struct Log(Vec<String>);
    impl SearchObserver for Log {
        fn trial_started(&mut self, spec: &TrialSpec, b: Bracket) {
            self.0.push(format!(
                "start c{} t{} [{:?},{:?}]",
                spec.concurrency, spec.trial, b.highest_passing, b.lowest_failing
            ));
        }
        fn trial_finished(&mut self, spec: &TrialSpec, passed: bool, b: Bracket) {
            self.0.push(format!(
                "end c{} t{} {passed} [{:?},{:?}]",
                spec.concurrency, spec.trial, b.highest_passing, b.lowest_failing
            ));
        }
    }
    let mut runner = MockRunner::new(|c, _| c <= 2);
    let mut log = Log(Vec::new());
    run_search(
        &mut runner,
        workload(),
        &settings(1, 8, 1),
        &Deadline(None),
        &mut log,
    )
    .unwrap();
    assert_eq!(
        log.0,
        vec![
            "start c1 t1 [None,None]",
            "end c1 t1 true [Some(1),None]",
            "start c2 t1 [Some(1),None]",
            "end c2 t1 true [Some(2),None]",
            "start c4 t1 [Some(2),None]",
            "end c4 t1 false [Some(2),Some(4)]",
            "start c3 t1 [Some(2),Some(4)]",
            "end c3 t1 false [Some(2),Some(3)]",
        ]
    );
}

#[test]
fn complete_levels_runs_every_trial_of_a_failing_level() {
    let mut runner = MockRunner::new(|c, t| c < 8 || (c == 8 && t != 2));
    let s = SearchSettings {
        complete_levels: true,
        ..settings(1, 1024, 3)
    };
    let out = run_search(&mut runner, workload(), &s, &Deadline(None), &mut Silent).unwrap();
    assert_knee_at_8_with(&out, &[(1, true), (2, false), (3, true)]);
}
