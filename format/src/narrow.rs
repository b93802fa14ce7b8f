//! Integer columns that store each value in the width almost every value fits: a chunk's size,
//! text length and read index fit 16 bits, its token count 8, and an arrival time's high 32
//! bits change once every 4.3 s. The rare value that does not fit is kept whole beside the
//! column, so every value comes back exactly.
//!
//! Why: a recorder holds every chunk of every open stream until its response ends; at 1,024
//! streams of 500 tokens that memory is most of its footprint (docs/PERFORMANCE.md, "The
//! recorder's own read path against its targets").

/// An unsigned integer narrower than `u32` that a [`Narrow`] column stores its values in. Its
/// largest value is the escape: it marks a value kept whole.
pub(crate) trait Small: Copy + Eq {
    /// The marker of a value kept whole.
    const ESCAPE: Self;
    /// `value` in this width, unless it does not fit below the escape.
    fn narrow(value: u32) -> Option<Self>;
    /// The value back as a `u32`.
    fn widen(self) -> u32;
}

impl Small for u8 {
    const ESCAPE: u8 = u8::MAX;
    fn narrow(value: u32) -> Option<u8> {
        u8::try_from(value).ok().filter(|&v| v != u8::MAX)
    }
    fn widen(self) -> u32 {
        u32::from(self)
    }
}

impl Small for u16 {
    const ESCAPE: u16 = u16::MAX;
    fn narrow(value: u32) -> Option<u16> {
        u16::try_from(value).ok().filter(|&v| v != u16::MAX)
    }
    fn widen(self) -> u32 {
        u32::from(self)
    }
}

/// A column of `u32` values, each held in `T` when it fits and whole beside the column when
/// not.
#[derive(Debug, Clone, Default)]
pub(crate) struct Narrow<T> {
    small: Vec<T>,
    /// (index, value) of every value held whole, in index order.
    wide: Vec<(usize, u32)>,
}

impl<T: Small> Narrow<T> {
    pub(crate) fn with_capacity(capacity: usize) -> Narrow<T> {
        Narrow {
            small: Vec::with_capacity(capacity),
            wide: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, value: u32) {
        match T::narrow(value) {
            Some(small) => self.small.push(small),
            None => {
                self.wide.push((self.small.len(), value));
                self.small.push(T::ESCAPE);
            }
        }
    }

    /// Value `i` (None past the end).
    pub(crate) fn get(&self, i: usize) -> Option<u32> {
        let small = *self.small.get(i)?;
        if small != T::ESCAPE {
            return Some(small.widen());
        }
        let k = self.wide.partition_point(|&(at, _)| at < i);
        self.wide.get(k).map(|&(_, value)| value)
    }

    /// Every value in order, without a search for the ones held whole.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let mut wide = self.wide.iter();
        self.small.iter().map(move |&small| {
            if small == T::ESCAPE {
                // `push` kept one whole value for every escape, in order.
                wide.next().map_or(0, |&(_, value)| value)
            } else {
                small.widen()
            }
        })
    }

    /// Moves every value of `other` to the end of this column.
    pub(crate) fn append(&mut self, other: &mut Narrow<T>) {
        let base = self.small.len();
        self.wide
            .extend(other.wide.drain(..).map(|(at, value)| (at + base, value)));
        self.small.append(&mut other.small);
    }

    /// A copy of the values from index `from` on (`from` at most `len`).
    pub(crate) fn copy_from(&self, from: usize) -> Narrow<T> {
        let first = self.wide.partition_point(|&(at, _)| at < from);
        Narrow {
            small: self.small[from..].to_vec(),
            wide: self.wide[first..]
                .iter()
                .map(|&(at, value)| (at - from, value))
                .collect(),
        }
    }
}

/// A column of `u64` times: the low 32 bits of each, and the high 32 bits once per run of
/// values that share them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Times {
    low: Vec<u32>,
    /// (first index, high bits) of every run, in index order; the first run starts at 0.
    high: Vec<(usize, u32)>,
}

impl Times {
    pub(crate) fn with_capacity(capacity: usize) -> Times {
        Times {
            low: Vec::with_capacity(capacity),
            high: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, value: u64) {
        let (high, low) = split(value);
        if self.high.last().map(|&(_, h)| h) != Some(high) {
            self.high.push((self.low.len(), high));
        }
        self.low.push(low);
    }

    /// Time `i` (None past the end).
    pub(crate) fn get(&self, i: usize) -> Option<u64> {
        let low = *self.low.get(i)?;
        // The last run starting at or before `i`; the first run starts at 0.
        let k = self.high.partition_point(|&(at, _)| at <= i);
        let high = k.checked_sub(1).and_then(|k| self.high.get(k))?.1;
        Some(join(high, low))
    }

    /// Every time in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        let mut runs = self.high.iter().peekable();
        let mut high = 0;
        self.low.iter().enumerate().map(move |(i, &low)| {
            while let Some(&&(at, h)) = runs.peek() {
                if at > i {
                    break;
                }
                high = h;
                runs.next();
            }
            join(high, low)
        })
    }

    /// Moves every time of `other` to the end of this column.
    pub(crate) fn append(&mut self, other: &mut Times) {
        let base = self.low.len();
        for (at, high) in other.high.drain(..) {
            if self.high.last().map(|&(_, h)| h) != Some(high) {
                self.high.push((at + base, high));
            }
        }
        self.low.append(&mut other.low);
    }

    /// A copy of the times from index `from` on (`from` at most `len`).
    pub(crate) fn copy_from(&self, from: usize) -> Times {
        let low = self.low[from..].to_vec();
        if low.is_empty() {
            return Times::default();
        }
        // The run holding `from` restarts at 0; the later ones move down.
        let k = self.high.partition_point(|&(at, _)| at <= from);
        let high = k
            .checked_sub(1)
            .and_then(|k| self.high.get(k..))
            .unwrap_or_default();
        let high = high
            .iter()
            .enumerate()
            .map(|(n, &(at, h))| (if n == 0 { 0 } else { at - from }, h))
            .collect();
        Times { low, high }
    }
}

fn split(value: u64) -> (u32, u32) {
    // Truncation is the point: the two halves of the value.
    ((value >> 32) as u32, value as u32)
}

fn join(high: u32, low: u32) -> u64 {
    (u64::from(high) << 32) | u64::from(low)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Vec<u32> {
        vec![
            0,
            1,
            254,
            255,
            256,
            65_534,
            65_535,
            65_536,
            u32::MAX,
            7,
            u32::MAX - 1,
            3,
        ]
    }

    fn times() -> Vec<u64> {
        let g = 1u64 << 32;
        vec![0, 5, g - 1, g, g + 9, 3, 3 * g + 1, 3 * g + 2, u64::MAX, 12]
    }

    fn narrow<T: Small + Default>(values: &[u32]) -> Narrow<T> {
        let mut column = Narrow::with_capacity(values.len());
        values.iter().for_each(|&v| column.push(v));
        column
    }

    fn timed(values: &[u64]) -> Times {
        let mut column = Times::with_capacity(values.len());
        values.iter().for_each(|&v| column.push(v));
        column
    }

    /// Values at and around each width's escape come back exactly, by index and in order.
    #[test]
    fn every_value_comes_back() {
        let values = values();
        let bytes: Narrow<u8> = narrow(&values);
        let halves: Narrow<u16> = narrow(&values);
        assert_eq!(bytes.iter().collect::<Vec<_>>(), values);
        assert_eq!(halves.iter().collect::<Vec<_>>(), values);
        for (i, &v) in values.iter().enumerate() {
            assert_eq!(
                (bytes.get(i), halves.get(i)),
                (Some(v), Some(v)),
                "index {i}"
            );
        }
        assert_eq!(bytes.get(values.len()), None);
        assert_eq!(halves.wide.len(), 4, "65,535 and up are held whole");
        let times = times();
        let column = timed(&times);
        assert_eq!(column.iter().collect::<Vec<_>>(), times);
        for (i, &t) in times.iter().enumerate() {
            assert_eq!(column.get(i), Some(t), "index {i}");
        }
        assert_eq!(column.get(times.len()), None);
    }

    /// Copying a tail and appending it to the head gives the whole column back, for every
    /// split.
    #[test]
    fn a_split_copied_and_appended_is_the_whole_column() {
        let values = values();
        let times = times();
        for split in 0..=values.len() {
            let mut head: Narrow<u16> = narrow(&values[..split]);
            let mut tail = narrow::<u16>(&values).copy_from(split);
            assert_eq!(
                tail.iter().collect::<Vec<_>>(),
                values[split..],
                "split {split}"
            );
            head.append(&mut tail);
            assert_eq!(head.iter().collect::<Vec<_>>(), values, "split {split}");
            assert_eq!(head.get(8), Some(u32::MAX), "split {split}");
        }
        for split in 0..=times.len() {
            let mut head = timed(&times[..split]);
            let mut tail = timed(&times).copy_from(split);
            assert_eq!(
                tail.iter().collect::<Vec<_>>(),
                times[split..],
                "split {split}"
            );
            head.append(&mut tail);
            assert_eq!(head.iter().collect::<Vec<_>>(), times, "split {split}");
            let indexed: Vec<_> = (0..times.len()).filter_map(|i| head.get(i)).collect();
            assert_eq!(indexed, times, "split {split}");
        }
    }
}
