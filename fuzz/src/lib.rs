//! What the fuzz targets share: cutting one input into the reads a socket might have given.

/// `bytes` cut into reads whose lengths cycle through `lengths` (each at least 1), the last
/// read shorter if the bytes run out.
pub fn cut_by_lengths<'a>(bytes: &'a [u8], lengths: &[usize]) -> Vec<&'a [u8]> {
    let mut reads = Vec::new();
    let mut from = 0;
    for &length in lengths.iter().cycle() {
        if from >= bytes.len() {
            break;
        }
        let end = (from + length.max(1)).min(bytes.len());
        reads.push(&bytes[from..end]);
        from = end;
    }
    reads
}
