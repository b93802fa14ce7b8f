//! `tokentrace protocols`: list the protocols, or print one's every definition.

use std::process::ExitCode;
use tokentrace_analyzer::methodology;
use tokentrace_analyzer::protocol::builtin;

/// Arguments of `tokentrace protocols`.
#[derive(clap::Args)]
pub struct Args {
    /// Print this protocol's definitions (TOML, then its generated methodology).
    pub name: Option<String>,
    /// A TOML protocol file to check and print instead of a built-in one.
    #[arg(long)]
    pub protocol_file: Option<std::path::PathBuf>,
}

/// Runs `tokentrace protocols`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.name.is_none() && args.protocol_file.is_none() {
        let all = builtin::all()?;
        let width = all.iter().map(|p| p.name.len()).max().unwrap_or(0);
        for p in all {
            println!("{:<width$}  v{}  {}", p.name, p.version, p.description);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let protocol = builtin::resolve(args.name.as_deref(), args.protocol_file.as_deref())?;
    println!("{}", protocol.to_toml().trim_end());
    println!();
    println!("# timing_methodology (generated from the definitions above)");
    for (key, text) in methodology::timing_methodology(&protocol) {
        println!("# {key}: {text}");
    }
    Ok(ExitCode::SUCCESS)
}
