//! `tokentrace report`: one self-contained HTML page of traces, or of a capacity search.

use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use tokentrace_analyzer::analysis::{self, Analysis};
use tokentrace_analyzer::dataset::Dataset;
use tokentrace_analyzer::facts::FactsOptions;
use tokentrace_analyzer::protocol::builtin;
use tokentrace_html::{Run, VersusInput};

/// Arguments of `tokentrace report`.
#[derive(clap::Args)]
pub struct Args {
    /// Trace files (each one run; two or more are overlaid and compared with the first), or
    /// one `tokentrace capacity` output directory.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Where to write the page.
    #[arg(long, short = 'o', default_value = "report.html")]
    pub output: PathBuf,
    /// Protocol name (see `tokentrace protocols`); for a capacity directory, the search's own
    /// when absent.
    #[arg(long, short = 'p')]
    pub protocol: Option<String>,
    /// A TOML file defining a protocol.
    #[arg(long)]
    pub protocol_file: Option<PathBuf>,
    /// Add a methodology panel: the first trace under this second protocol, side by side.
    #[arg(long, value_name = "PROTOCOL")]
    pub versus: Option<String>,
    /// Service-level objectives, as `analyze --slo` takes them (repeatable).
    #[arg(long = "slo")]
    pub slos: Vec<String>,
    /// Count warmup requests too.
    #[arg(long)]
    pub include_warmup: bool,
    /// The page's title (default: the input's file name).
    #[arg(long)]
    pub title: Option<String>,
    /// Overwrite the output file when it exists.
    #[arg(long)]
    pub force: bool,
}

/// Runs `tokentrace report`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.output.exists() && !args.force {
        anyhow::bail!(
            "{} exists; pass --force to replace it",
            args.output.display()
        );
    }
    let html = match args.inputs.as_slice() {
        [dir] if dir.is_dir() => capacity_page(&args, dir)?,
        _ => traces_page(&args)?,
    };
    // Written aside and renamed, so an interrupted run never leaves half a page under the name.
    let partial = args.output.with_extension("html.partial");
    std::fs::write(&partial, html).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, &args.output).with_context(|| {
        format!(
            "renaming {} to {}",
            partial.display(),
            args.output.display()
        )
    })?;
    eprintln!("wrote {}", args.output.display());
    Ok(ExitCode::SUCCESS)
}

fn title(args: &Args) -> String {
    args.title.clone().unwrap_or_else(|| {
        let names: Vec<String> = args
            .inputs
            .iter()
            .map(|p| {
                p.file_name()
                    .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
            })
            .collect();
        format!("tokentrace report: {}", names.join(", "))
    })
}

fn traces_page(args: &Args) -> anyhow::Result<String> {
    let protocol = builtin::resolve(args.protocol.as_deref(), args.protocol_file.as_deref())?;
    let options = super::analyze::options(&protocol, &args.slos, args.include_warmup)?;
    // The timeline and the ITL panel read every request's gaps, whatever the protocol keeps.
    let facts = FactsOptions {
        keep_gaps: true,
        threads: super::analyze::default_threads(),
        ..analysis::facts_options(&protocol, &options)
    };
    let dataset = Dataset::load(&args.inputs, facts)?;
    for trace in &dataset.traces {
        for warning in &trace.warnings {
            eprintln!("warning: {}: {warning}", trace.path.display());
        }
    }
    let runs: Vec<Run<'_>> = (0..dataset.traces.len() as u32)
        .map(|t| Run {
            label: dataset.traces[t as usize].label.clone(),
            analysis: Analysis::new(&protocol, &dataset, &[t], &options),
        })
        .collect();
    let versus_protocol = args
        .versus
        .as_deref()
        .map(|b| builtin::resolve(Some(b), None))
        .transpose()?;
    let versus_data = match &versus_protocol {
        Some(b) => {
            let options_b = super::analyze::options(b, &[], args.include_warmup)?;
            let facts_b = FactsOptions {
                threads: super::analyze::default_threads(),
                ..analysis::facts_options(b, &options_b)
            };
            let first = std::slice::from_ref(&args.inputs[0]);
            Some((Dataset::load(first, facts_b)?, options_b))
        }
        None => None,
    };
    let versus = match (&versus_protocol, &versus_data) {
        (Some(b), Some((dataset_b, options_b))) => {
            let a = Analysis::new(&protocol, &dataset, &[0], &options);
            let bb = Analysis::new(b, dataset_b, &[0], options_b);
            Some(VersusInput {
                versus: tokentrace_analyzer::versus::versus(&a, &bb),
                a: &protocol,
                b,
            })
        }
        _ => None,
    };
    Ok(tokentrace_html::traces_report(
        &title(args),
        &runs,
        versus.as_ref(),
    )?)
}

fn capacity_page(args: &Args, dir: &std::path::Path) -> anyhow::Result<String> {
    if args.versus.is_some() || args.protocol_file.is_some() {
        anyhow::bail!("--versus and --protocol-file apply to traces, not a capacity directory");
    }
    let slos = if args.slos.is_empty() {
        Vec::new()
    } else {
        tokentrace_capacity::slo::parse_all(&args.slos)?
    };
    let given = (!slos.is_empty()).then_some(slos.as_slice());
    let view = tokentrace_capacity::reanalyze::search_view(dir, args.protocol.as_deref(), given)?;
    Ok(tokentrace_html::capacity::report(&title(args), &view)?)
}
