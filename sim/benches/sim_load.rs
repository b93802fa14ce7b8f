//! Load harness: N concurrent streams against an in-process simulator, reporting the CPU the
//! simulator's own threads used per chunk, so its cost can be compared with the 1,000 streams
//! x 100 chunks/s budget of one core.
//!
//! `cargo bench -p tokentrace-sim --bench sim_load -- [streams] [chunks_per_stream] [truth]`
//! (defaults 1000, 500; a third argument `truth` turns the truth log on).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // criterion generates undocumented items; a bench may fail loudly

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokentrace_sim::{SimConfig, SimServer};

/// CPU seconds used so far by this process's threads, by thread name.
fn cpu_by_thread() -> HashMap<String, f64> {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut out = HashMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_owned();
        let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        let cpu = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // utime and stime are fields 14 and 15 of stat, 11 and 12 after the name.
        *out.entry(name).or_insert(0.0) += (cpu(11) + cpu(12)) / ticks;
    }
    out
}

/// Streams one request; returns (events, seconds from first to last event).
async fn stream(addr: SocketAddr, id: usize, chunks: usize) -> (usize, f64) {
    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
        return (0, 0.0);
    };
    let _ = tcp.set_nodelay(true);
    let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await
    else {
        return (0, 0.0);
    };
    tokio::spawn(conn);
    let body =
        format!(r#"{{"prompt":"load","stream":true,"max_tokens":{chunks},"ignore_eos":true}}"#);
    let Ok(req) = Request::post("/v1/completions")
        .header("host", "sim")
        .header("x-request-id", format!("load-{id}"))
        .body(Full::new(Bytes::from(body)))
    else {
        return (0, 0.0);
    };
    let Ok(resp) = sender.send_request(req).await else {
        return (0, 0.0);
    };
    let mut body = resp.into_body();
    let (mut events, mut first, mut last) = (0, None, Instant::now());
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            events += data.windows(2).filter(|w| w == b"\n\n").count();
            last = Instant::now();
            first.get_or_insert(last);
        }
    }
    (events, first.map_or(0.0, |f| (last - f).as_secs_f64()))
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let streams: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let chunks: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(500);
    let truth = args.get(2).is_some_and(|a| a == "truth");
    let _ = tokentrace_sim::raise_open_file_limit();
    let dir = std::env::temp_dir().join(format!("sim-load-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let config = SimConfig {
        slots: streams,
        step_base_ms: 10.0,
        step_per_seq_ms: 0.0,
        prefill_tok_s: 1e9,
        prefill_base_ms: 0.0,
        truth_log: truth.then(|| dir.join("truth.jsonl")),
        ..Default::default()
    };
    let Ok(handle) = SimServer::spawn_background(config) else {
        eprintln!("could not start the simulator");
        return;
    };
    let addr = handle.addr();
    let Ok(client) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("load-client")
        .enable_all()
        .build()
    else {
        return;
    };
    let sim_threads = ["tokentrace-sim", "sim-engine", "sim-truth-log"];
    let before = cpu_by_thread();
    let started = Instant::now();
    let results = client.block_on(async move {
        let mut tasks = tokio::task::JoinSet::new();
        for id in 0..streams {
            tasks.spawn(stream(addr, id, chunks));
        }
        let mut results = Vec::new();
        while let Some(Ok(r)) = tasks.join_next().await {
            results.push(r);
        }
        results
    });
    let wall = started.elapsed().as_secs_f64();
    let after = cpu_by_thread();
    drop(handle);
    let _ = std::fs::remove_dir_all(&dir);
    let events: usize = results.iter().map(|r| r.0).sum();
    let mut rates: Vec<f64> = results
        .iter()
        .filter(|r| r.1 > 0.0)
        .map(|r| (r.0 as f64 - 1.0) / r.1)
        .collect();
    rates.sort_by(f64::total_cmp);
    let median_rate = rates.get(rates.len() / 2).copied().unwrap_or(0.0);
    println!("streams {streams}, {chunks} tokens each, truth log {truth}");
    println!(
        "wall {wall:.2} s, events {events}, {:.0} events/s",
        events as f64 / wall
    );
    println!("median per-stream rate {median_rate:.1} events/s");
    let mut sim_cpu = 0.0;
    for name in sim_threads {
        let used =
            after.get(name).copied().unwrap_or(0.0) - before.get(name).copied().unwrap_or(0.0);
        sim_cpu += used;
        println!("  {name:<16} {used:.2} CPU s");
    }
    let client_cpu = after.get("load-client").copied().unwrap_or(0.0)
        - before.get("load-client").copied().unwrap_or(0.0);
    println!(
        "simulator: {sim_cpu:.2} CPU s = {:.2} cores, {:.2} us per event; client {client_cpu:.2} CPU s",
        sim_cpu / wall,
        sim_cpu * 1e6 / events.max(1) as f64
    );
}
