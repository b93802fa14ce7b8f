//! `tokentrace sim`: runs the OpenAI-compatible engine simulator until Ctrl-C or SIGTERM.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use anyhow::Context;
use tokentrace_sim::{SimConfig, SimServer};
use tokio::signal::unix::{signal, SignalKind};

/// Arguments of `tokentrace sim`.
#[derive(clap::Args)]
pub struct Args {
    /// Port to listen on (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Runtime worker threads serving connections (the engine has its own thread).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Engine model, faults and truth log.
    #[command(flatten)]
    config: SimConfig,
}

/// Runs `tokentrace sim`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let runtime = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    }
    .context("starting the runtime")?;
    // Thousands of concurrent streams need more descriptors than the usual soft limit; running
    // with the default limit still works, so a failure here is not fatal.
    let _ = tokentrace_sim::raise_open_file_limit();
    runtime.block_on(async move {
        let addr = SocketAddr::new(args.host, args.port);
        let server = SimServer::start(args.config, addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        // Installed before the address is printed: whoever reads it may signal at once.
        let mut interrupt = signal(SignalKind::interrupt()).context("installing SIGINT")?;
        let mut terminate = signal(SignalKind::terminate()).context("installing SIGTERM")?;
        println!("tokentrace sim listening on {}", server.base_url());
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        server.shutdown().await.context("shutting down")?;
        Ok(ExitCode::SUCCESS)
    })
}
