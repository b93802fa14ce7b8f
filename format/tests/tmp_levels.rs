use std::time::Duration;
use tokentrace_format::*;
#[test]
fn levels() {
    let dir = tempfile::tempdir().unwrap();
    let records = synthetic::requests(42, 2000, 256, false);
    let chunks: u64 = records.iter().map(|r| r.chunks.len() as u64).sum();
    for level in [1, 3, 6, 9] {
        let path = dir.path().join(format!("{level}.trace"));
        let config = WriterConfig {
            zstd_level: level,
            block_max_age: Duration::from_secs(600),
            ..Default::default()
        };
        let h = Header {
            major: 1,
            minor: 0,
            anchor: ClockAnchor {
                mono_ns: 0,
                realtime_ns: 0,
            },
            host: "b".into(),
            shard: 0,
        };
        let cpu0 = clock::process_cpu_ns();
        let w = TraceWriter::create(&path, h, &Manifest::default(), config).unwrap();
        let s = w.sender();
        for r in &records {
            s.send(r.clone()).unwrap();
        }
        let st = w.finish(RunEnd::default()).unwrap();
        let cpu = clock::process_cpu_ns() - cpu0;
        println!(
            "level {level}: {:.2} bytes/chunk, {:.1} M chunks/CPU-s (one run)",
            st.file_bytes as f64 / chunks as f64,
            chunks as f64 / cpu as f64 * 1e3
        );
    }
}
