//! The recorder's HTTP clients against the same streams: the own HTTP/1.1 client (the
//! default), whose stream reader thread reads every body, the same client with each request's
//! task reading its own socket (`--client own-task`), and hyper's (`--client hyper`).
//! They must record the same events, outcomes and failures (the fault matrix, the
//! engine behaviours and the answers that are not streams run over each in
//! `record_faults.rs` and `record_engines.rs`). (`TOKENTRACE_TEST_CLIENT=hyper
//! cargo test`, or `=own-task`, runs every recording test over that client.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::*;
use common::tls::proxied_sim;
use tokentrace_format::{Channel, Outcome, RequestRecord};
use tokentrace_sim::{FaultConfig, SimConfig};

const CLIENTS: [&str; 3] = ["hyper", "own", "own-task"];

fn with_client<'a>(args: &[&'a str], client: &'a str) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.extend(["--client", client]);
    all
}

/// Per request: its outcome and its chunks' channels (the simulator's words are random).
fn shape(records: &[RequestRecord]) -> Vec<(u64, Outcome, Vec<Channel>)> {
    records
        .iter()
        .map(|r| {
            let chunks = r.chunks.iter().map(|c| c.channel).collect();
            (r.meta.id, r.meta.outcome, chunks)
        })
        .collect()
}

#[test]
fn every_client_records_the_same_events_of_the_same_streams() {
    let server = sim(SimConfig {
        reasoning_tokens: 3,
        ..fast_sim()
    });
    let dir = tempfile::tempdir().unwrap();
    let prompts = prompt_file(dir.path(), 6);
    let args = [
        "--requests",
        "24",
        "--concurrency",
        "4",
        "--max-tokens",
        "12",
        "--ignore-eos",
        "--prompts",
        prompts.to_str().unwrap(),
    ];
    let runs: Vec<_> = CLIENTS
        .iter()
        .map(|client| {
            let out = dir.path().join(format!("{client}.ttrace"));
            let (reader, records) =
                record_ok(&server.base_url(), &out, &with_client(&args, client));
            let name = reader.manifest().extra["http_client"].clone();
            (name, records)
        })
        .collect();
    assert_eq!(runs[0].0, "hyper");
    assert_eq!(runs[1].0, "own-http1");
    assert_eq!(runs[2].0, "own-http1-task");
    let hyper = &runs[0].1;
    for (h, o) in runs[1..].iter().flat_map(|(_, own)| {
        assert_eq!(own.len(), 24);
        assert!(own.iter().all(|r| r.meta.outcome == Outcome::Ok));
        assert_eq!(shape(hyper), shape(own));
        hyper.iter().zip(own)
    }) {
        assert_eq!(h.meta.usage, o.meta.usage, "request {}", h.meta.id);
        let text = |r: &RequestRecord| r.chunks.iter().map(|c| c.text_len).sum::<u32>();
        assert_eq!(o.meta.output_bytes, text(o), "request {}", o.meta.id);
        // Headers never come after the first chunk, chunks never go back in time.
        let headers = o.meta.headers_ns.unwrap();
        assert!(o.meta.send_ns <= headers && headers <= o.chunks[0].arrival_ns);
        assert!(o
            .chunks
            .windows(2)
            .all(|w| w[0].arrival_ns <= w[1].arrival_ns));
    }
}

#[test]
fn a_stall_times_out_over_the_own_client() {
    let server = sim(SimConfig {
        faults: FaultConfig {
            stall_every: 1,
            stall_ms: 5_000,
            after_chunks: 2,
            ..FaultConfig::default()
        },
        ..fast_sim()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stall.ttrace");
    let (_, records) = record_ok(
        &server.base_url(),
        &out,
        &[
            "--requests",
            "1",
            "--max-tokens",
            "8",
            "--timeout",
            "1",
            "--client",
            "own",
        ],
    );
    assert_eq!(records[0].meta.outcome, Outcome::Timeout);
    assert!(
        !records[0].chunks.is_empty(),
        "the chunks before the stall are kept"
    );
}

#[test]
fn the_own_client_speaks_tls_and_refuses_an_unknown_ca() {
    let tls = proxied_sim(fast_sim(), &[b"http/1.1"]);
    let (url, ca, dir) = (&tls.url, &tls.ca, &tls.dir);
    let args = [
        "--requests",
        "6",
        "--concurrency",
        "2",
        "--max-tokens",
        "4",
        "--client",
        "own",
    ];
    // Over the stream reader and the task's own reads; 6 requests on 2 streams reuse the
    // kept-alive connections, whose sockets go to the reader and back.
    for client in ["own", "own-task"] {
        let out = dir.path().join(format!("tls-{client}.ttrace"));
        let mut with_ca = with_client(&args[..6], client);
        with_ca.extend(["--ca-cert", ca.to_str().unwrap()]);
        let (_, records) = record_ok(url, &out, &with_ca);
        assert_eq!(records.len(), 6);
        assert!(
            records.iter().all(|r| r.meta.outcome == Outcome::Ok),
            "{client}: {:?}",
            records.iter().map(|r| &r.meta.error).collect::<Vec<_>>()
        );
    }
    // Preflight (hyper) refuses the unknown CA before any measured request.
    record(url, &dir.path().join("refused.ttrace"), &args)
        .assert()
        .failure();
}

/// A request larger than a socket takes at once (a long-context prompt, about 4 MiB here): on
/// the default client the request's task writes what the socket takes without tokio's reactor,
/// then sends the rest there before the head is read. Every request is answered whole, on a
/// new connection and on a kept-alive one, on every client.
#[test]
fn a_request_larger_than_the_socket_takes_at_once_is_sent_whole() {
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("long.jsonl");
    let long = "rivers and trees ".repeat(250_000);
    let line = serde_json::json!({ "prompt": long }).to_string();
    std::fs::write(&prompts, format!("{line}\n{line}\n{line}\n")).unwrap();
    assert!(line.len() > 4_000_000);
    for client in CLIENTS {
        let server = sim(fast_sim());
        let out = dir.path().join(format!("{client}.ttrace"));
        let args = [
            "--requests",
            "3",
            "--concurrency",
            "1",
            "--max-tokens",
            "4",
            "--http",
            "1",
            "--prompts",
            prompts.to_str().unwrap(),
            "--client",
            client,
        ];
        let (_, records) = record_ok(&server.base_url(), &out, &args);
        assert_eq!(records.len(), 3, "{client}");
        for r in &records {
            assert_ok(r);
            assert!(!r.chunks.is_empty(), "{client}: request {}", r.meta.id);
            assert_eq!(r.meta.retries, 0, "{client}: request {}", r.meta.id);
        }
    }
}

/// The most requests in flight at once: each counts from its send to its end.
fn most_in_flight(records: &[RequestRecord]) -> usize {
    let mut edges: Vec<(u64, i32)> = records
        .iter()
        .flat_map(|r| [(r.meta.send_ns, 1), (r.meta.end_ns, -1)])
        .collect();
    // An end and a send at the same nanosecond: the end first.
    edges.sort();
    let mut open = 0i32;
    let mut most = 0i32;
    for (_, step) in edges {
        open += step;
        most = most.max(open);
    }
    most as usize
}

/// In a closed loop over the own client, the stream reader sends each slot's next request
/// itself on the connection the last response left; the loop's rules hold all the same: no
/// more requests at once than the concurrency, the measured ones only after every warmup
/// one has ended, every request once. The first request of each slot after the warmup is
/// its task's; so are all requests of the other clients and of an open loop.
#[test]
fn in_a_closed_loop_the_stream_reader_sends_the_next_request_itself() {
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let closed = [
        "--requests",
        "20",
        "--warmup",
        "2",
        "--concurrency",
        "2",
        "--max-tokens",
        "8",
        "--ignore-eos",
        "--no-calibrate",
    ];
    let open = [
        "--requests",
        "10",
        "--rate",
        "200",
        "--max-tokens",
        "8",
        "--ignore-eos",
        "--no-calibrate",
    ];
    let cases: [(&[&str], &str, u64); 4] = [
        (&closed, "own", 18),
        (&closed, "own-task", 0),
        (&closed, "hyper", 0),
        (&open, "own", 0),
    ];
    // Events the template took whole, per client of the closed loop: the same for all.
    let mut read_whole = Vec::new();
    for (args, client, reader_sent) in cases {
        let out = dir.path().join(format!("{client}-{reader_sent}.ttrace"));
        let (reader, records) = record_ok(&server.base_url(), &out, &with_client(args, client));
        let health = &reader.run_end().unwrap().client_health;
        assert_eq!(health.reader_sent_requests, Some(reader_sent), "{client}");
        // The simulator frames each event as its own HTTP chunk: from the second content
        // event of a response on, its template takes them whole, whichever client reads.
        // Each response's first events, its finishing one and `[DONE]` go through the parser.
        let whole = health.events_read_whole.unwrap();
        let chunks: u64 = records.iter().map(|r| r.chunks.len() as u64).sum();
        assert!(whole > 0, "{client}");
        assert!(
            whole <= chunks - 3 * records.len() as u64,
            "{client}: {whole} of {chunks}"
        );
        if args == closed {
            read_whole.push((client, whole));
        }
        let mut ids: Vec<u64> = records.iter().map(|r| r.meta.id).collect();
        ids.sort_unstable();
        let total = if args == closed { 22 } else { 10 };
        assert_eq!(ids, (0..total).collect::<Vec<_>>(), "{client}");
        assert!(records.iter().all(|r| r.meta.outcome == Outcome::Ok));
        if args != closed {
            continue;
        }
        assert!(most_in_flight(&records) <= 2, "{client}");
        let warmup_end = records
            .iter()
            .filter(|r| r.meta.id < 2)
            .map(|r| r.meta.end_ns)
            .max()
            .unwrap();
        for r in records.iter().filter(|r| r.meta.id >= 2) {
            assert!(r.meta.intended_ns >= warmup_end, "{client}: {}", r.meta.id);
            assert!(
                r.meta.send_ns >= r.meta.intended_ns,
                "{client}: {}",
                r.meta.id
            );
            assert_eq!(r.chunks.last().unwrap().channel, Channel::Done);
        }
    }
    assert!(
        read_whole.windows(2).all(|w| w[0].1 == w[1].1),
        "the same streams, the same count whoever reads them: {read_whole:?}"
    );
}
