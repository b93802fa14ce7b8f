//! Writes the seven chunk columns of a block payload (docs/FORMAT.md 4.4), the mirror of
//! `chunk_columns.rs`. Every chunk a recorder records passes here once, so the elements are
//! written by hand against the byte spec rather than through bincode's generic encoder (whose
//! per-element `Result` plumbing and writer calls were most of the writer's own CPU after zstd).
//! The bytes are bincode's `standard()` encoding exactly; the tests hold them to bincode's own.

/// One element of a chunk column, written as bincode's standard configuration writes it.
pub(crate) trait ColumnItem {
    /// Appends the element's bytes to `out`.
    fn put(self, out: &mut Vec<u8>);
}

/// An unsigned varint: one byte up to 250, else a 251/252/253 prefix and 2/4/8 LE bytes.
#[inline(always)]
fn put_varint(out: &mut Vec<u8>, v: u64) {
    if v < 251 {
        out.push(v as u8);
    } else if v <= u64::from(u16::MAX) {
        out.push(251);
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v <= u64::from(u32::MAX) {
        out.push(252);
        out.extend_from_slice(&(v as u32).to_le_bytes());
    } else {
        out.push(253);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

impl ColumnItem for u8 {
    #[inline(always)]
    fn put(self, out: &mut Vec<u8>) {
        out.push(self);
    }
}

impl ColumnItem for u32 {
    #[inline(always)]
    fn put(self, out: &mut Vec<u8>) {
        put_varint(out, u64::from(self));
    }
}

impl ColumnItem for i64 {
    /// Zigzag, then the unsigned varint.
    #[inline(always)]
    fn put(self, out: &mut Vec<u8>) {
        put_varint(out, ((self << 1) ^ (self >> 63)) as u64);
    }
}

impl<T: ColumnItem> ColumnItem for Option<T> {
    #[inline(always)]
    fn put(self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                v.put(out);
            }
        }
    }
}

impl ColumnItem for &str {
    /// The length as a varint, then the bytes.
    #[inline(always)]
    fn put(self, out: &mut Vec<u8>) {
        put_varint(out, self.len() as u64);
        out.extend_from_slice(self.as_bytes());
    }
}

/// `items` (exactly `len` of them) as bincode encodes them gathered in a `Vec`: the count as a
/// varint, then each element, without the `Vec`. Err when the iterator yields another count.
pub(crate) fn put_seq<T: ColumnItem>(
    out: &mut Vec<u8>,
    len: usize,
    items: impl Iterator<Item = T>,
) -> Result<(), String> {
    put_varint(out, len as u64);
    let mut written = 0usize;
    for item in items {
        item.put(out);
        written += 1;
    }
    if written != len {
        return Err(format!("a column of {len} entries yielded {written}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ours<T: ColumnItem + Clone>(items: &[T]) -> Vec<u8> {
        let mut out = Vec::new();
        put_seq(&mut out, items.len(), items.iter().cloned()).unwrap();
        out
    }

    fn bincodes<T: bincode::Encode>(items: &[T]) -> Vec<u8> {
        bincode::encode_to_vec(items, bincode::config::standard()).unwrap()
    }

    /// Every width's edges, where a hand-written varint goes wrong first.
    const EDGES: [u64; 10] = [
        0,
        250,
        251,
        u16::MAX as u64,
        u16::MAX as u64 + 1,
        u32::MAX as u64,
        u32::MAX as u64 + 1,
        u64::MAX - 1,
        u64::MAX,
        1 << 40,
    ];

    #[test]
    fn widths_at_their_edges_are_bincodes() {
        let u32s: Vec<u32> = EDGES.iter().map(|&v| v as u32).collect();
        assert_eq!(ours(&u32s), bincodes(&u32s));
        let i64s: Vec<i64> = EDGES
            .iter()
            .flat_map(|&v| [v as i64, (v as i64).wrapping_neg(), (v / 2) as i64])
            .chain([i64::MIN, i64::MAX, -1, -125, -126])
            .collect();
        assert_eq!(ours(&i64s), bincodes(&i64s));
    }

    #[test]
    fn a_count_the_iterator_does_not_keep_is_refused() {
        let mut out = Vec::new();
        let err = put_seq(&mut out, 3, [1u32, 2].into_iter()).unwrap_err();
        assert_eq!(err, "a column of 3 entries yielded 2");
    }

    proptest! {
        #[test]
        fn every_column_type_writes_bincodes_bytes(
            u8s in proptest::collection::vec(any::<u8>(), 0..64),
            u32s in proptest::collection::vec(any::<u32>(), 0..64),
            i64s in proptest::collection::vec(any::<i64>(), 0..64),
            small in proptest::collection::vec(-70_000i64..70_000, 0..64),
            tokens in proptest::collection::vec(proptest::option::of(any::<u32>()), 0..64),
            texts in proptest::collection::vec(proptest::option::of(".{0,300}"), 0..16),
        ) {
            prop_assert_eq!(ours(&u8s), bincodes(&u8s));
            prop_assert_eq!(ours(&u32s), bincodes(&u32s));
            prop_assert_eq!(ours(&i64s), bincodes(&i64s));
            prop_assert_eq!(ours(&small), bincodes(&small));
            prop_assert_eq!(ours(&tokens), bincodes(&tokens));
            let texts: Vec<Option<&str>> = texts.iter().map(|t| t.as_deref()).collect();
            prop_assert_eq!(ours(&texts), bincodes(&texts));
        }
    }
}
