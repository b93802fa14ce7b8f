//! The table of a capacity search for people: per workload, one row per recorded trial with
//! its level, each SLO's value (with its unit) and verdict, the throughputs, the errors and
//! the trial's verdict; then the bracket. `capacity` prints it after a search and
//! `analyze --capacity DIR` prints it for a recorded one.

use tokentrace_analyzer::report::table::{layout, number, Align, Grid};
use tokentrace_capacity::judge::DEFAULT_PROTOCOL;
use tokentrace_capacity::reanalyze::SearchView;
use tokentrace_capacity::report::TrialData;
use tokentrace_capacity::TrialSlo;

/// The whole search in lines of at most `width` characters.
pub fn render(view: &SearchView, width: usize) -> String {
    let manifest = &view.manifest;
    let slos: Vec<String> = view.slos.iter().map(|s| s.slo().text.clone()).collect();
    let mut parts = vec![format!("capacity search · model {}", manifest.model)];
    parts.push(format!("SLO {}", slos.join(" and ")));
    parts.push(format!("judged under {}", manifest.protocol));
    let mut sections = vec![layout::join_wrapped(&parts, width, 2)];
    if manifest.protocol != DEFAULT_PROTOCOL {
        // The SLO columns come from the report's metric blocks, which are AIPerf's under
        // every protocol, while the trial verdict is the chosen protocol's.
        sections.push(layout::wrap(
            &format!(
                "note: SLO values are under the report's AIPerf definitions; each trial's \
                 verdict is judged under {}.",
                manifest.protocol
            ),
            width,
            2,
        ));
    }
    for (w, data) in view.workloads.iter().enumerate() {
        let judgement = view.judgement(w);
        let show =
            |c: Option<u32>| c.map_or_else(|| number::MISSING.to_string(), |c| c.to_string());
        let mut title = vec![
            format!(
                "workload {} (input {} tokens, output {} tokens)",
                data.workload.label(),
                data.workload.isl,
                data.workload.osl
            ),
            format!(
                "maximum passing concurrency {}, first failing {}",
                show(judgement.maximum_passing),
                show(judgement.first_failing)
            ),
        ];
        title.extend(judgement.unresolved.map(|why| format!("unresolved: {why}")));
        let title: Vec<String> = title.iter().map(|t| layout::wrap(t, width, 2)).collect();
        sections.push(title.join("\n"));
        if data.levels.is_empty() {
            sections.push("no trial recorded".to_string());
            continue;
        }
        let mut columns = vec![("concurrency", Align::Right), ("trial", Align::Right)];
        columns.extend(slos.iter().map(|s| (s.as_str(), Align::Right)));
        columns.extend([
            ("output", Align::Right),
            ("requests", Align::Right),
            ("errors", Align::Right),
            ("verdict", Align::Left),
        ]);
        let mut grid = Grid::new(&columns);
        for level in &data.levels {
            for trial in &level.trials {
                let mut row = vec![level.concurrency.to_string(), trial.trial.to_string()];
                row.extend(view.slos.iter().map(|slo| slo_cell(slo, trial)));
                row.extend(trial_cells(trial, &manifest.protocol));
                grid.push(row);
            }
        }
        // Level and trial start every row; what does not fit beside them is stacked below.
        sections.push(grid.render_split(2, width));
    }
    let mut out = sections.join("\n\n");
    out.push('\n');
    out
}

/// An SLO's value in a trial with its metric's unit, and whether it holds: `212.0 ms FAIL`.
fn slo_cell(slo: &TrialSlo, trial: &TrialData) -> String {
    let metrics = &trial.metrics;
    let unit = metrics
        .definitions
        .protocol
        .metrics
        .iter()
        .find(|m| m.name == slo.slo().metric)
        .map_or("", |m| m.unit.as_str());
    let verdict = if slo.holds(metrics) { "pass" } else { "FAIL" };
    format!("{} {unit} {verdict}", number::value(slo.observe(metrics)))
}

/// Output and request throughput, errors and the trial's verdict with what failed it
/// (`protocol` being the one the verdict is judged under).
fn trial_cells(trial: &TrialData, protocol: &str) -> [String; 4] {
    let m = &trial.metrics;
    let per_second = |n: u64| (m.duration_s > 0.0).then(|| n as f64 / m.duration_s);
    let c = &trial.correctness;
    let verdict = if trial.passed {
        "pass".to_string()
    } else if c.cancelled {
        "FAIL (cancelled or unfinished)".to_string()
    } else if c.errors > 0 {
        "FAIL (failed requests)".to_string()
    } else if protocol == DEFAULT_PROTOCOL {
        "FAIL (SLO)".to_string()
    } else {
        format!("FAIL (under {protocol})")
    };
    [
        format!("{} tok/s", number::value(per_second(m.output_tokens))),
        format!("{} req/s", number::value(per_second(m.requests))),
        c.errors.to_string(),
        verdict,
    ]
}
