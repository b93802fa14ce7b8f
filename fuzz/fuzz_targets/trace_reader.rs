//! Any bytes given to the trace reader: it must not panic, hang or allocate without bound.
//! Seed it with the golden traces (tests/golden/); see docs/RELIABILITY.md.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentrace_format::TraceReader;

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = TraceReader::open_bytes(data.to_vec()) else {
        return;
    };
    let _ = reader.integrity().to_string();
    let _ = reader.run_end();
    for i in 0..reader.block_count() {
        if let Ok(block) = reader.decode_block(i) {
            for r in 0..block.requests.len() {
                let _ = block.record(r);
            }
        }
    }
    for request in reader.requests() {
        let _ = request;
    }
});
