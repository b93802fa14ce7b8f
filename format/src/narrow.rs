//! Integer fields stored in the width almost every value fits: a chunk's size, text length
//! and read index fit 16 bits, its token count 8, and an arrival time's high 32 bits change
//! once every 4.3 s. The rare value that does not fit is kept whole in a short list beside the
//! narrow ones, so every value comes back exactly.
//!
//! Why: a recorder holds every chunk of every open stream until its response ends; at 1,024
//! streams of 500 tokens that memory is most of its footprint
//! (docs/performance/2026-12-01-read-path.md, "The recorder's own read path against its targets").

/// An unsigned integer narrower than `u32` that a field is stored in. Its largest value is the
/// escape: it marks a value kept whole in the field's [`Escapes`].
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

/// The values of one field that did not fit its narrow width, kept whole: (index, value) in
/// index order. The narrow value at such an index is the escape.
#[derive(Debug, Clone, Default)]
pub(crate) struct Escapes(Vec<(usize, u32)>);

impl Escapes {
    /// `value` in `T` for entry `index` (the next one), or the escape, the value then kept
    /// here. Touches this list only for a value that does not fit.
    #[inline]
    pub(crate) fn narrow<T: Small>(&mut self, index: usize, value: u32) -> T {
        match T::narrow(value) {
            Some(small) => small,
            None => {
                self.0.push((index, value));
                T::ESCAPE
            }
        }
    }

    /// Entry `index`'s value, whose narrow value is `small`.
    pub(crate) fn widen<T: Small>(&self, index: usize, small: T) -> u32 {
        if small != T::ESCAPE {
            return small.widen();
        }
        let k = self.0.partition_point(|&(at, _)| at < index);
        // `narrow` kept one whole value for every escape.
        self.0.get(k).map_or(0, |&(_, value)| value)
    }

    /// Every value in order, from the narrow values of every entry in order, without a search
    /// for the ones kept whole.
    pub(crate) fn widen_all<'a, T: Small + 'a>(
        &'a self,
        small: impl Iterator<Item = T> + 'a,
    ) -> impl Iterator<Item = u32> + 'a {
        let mut wide = self.0.iter();
        small.map(move |small| {
            if small == T::ESCAPE {
                // `narrow` kept one whole value for every escape, in order.
                wide.next().map_or(0, |&(_, value)| value)
            } else {
                small.widen()
            }
        })
    }

    /// Moves the values of `other`, whose entries come after the first `base`, to the end.
    pub(crate) fn append(&mut self, other: &mut Escapes, base: usize) {
        self.0
            .extend(other.0.drain(..).map(|(at, value)| (at + base, value)));
    }

    /// A copy of the values of entries `from` on, numbered from `from`.
    pub(crate) fn copy_from(&self, from: usize) -> Escapes {
        let first = self.0.partition_point(|&(at, _)| at < from);
        Escapes(
            self.0[first..]
                .iter()
                .map(|&(at, value)| (at - from, value))
                .collect(),
        )
    }
}

/// The high 32 bits of a field of `u64` times, once per run of entries that share them (the
/// low 32 bits are the entries' narrow values).
#[derive(Debug, Clone, Default)]
pub(crate) struct HighRuns {
    /// (first index, high bits) of every run, in index order; the first run starts at 0.
    runs: Vec<(usize, u32)>,
    /// The last run's high bits, so that a time in the current run does not read `runs`.
    last: Option<u32>,
}

impl HighRuns {
    /// The low 32 bits of `value` for entry `index` (the next one), starting a run when its
    /// high bits differ from the previous entry's.
    #[inline]
    pub(crate) fn low(&mut self, index: usize, value: u64) -> u32 {
        let (high, low) = split(value);
        if self.last != Some(high) {
            self.runs.push((index, high));
            self.last = Some(high);
        }
        low
    }

    /// Entry `index`'s time, whose low bits are `low`.
    pub(crate) fn join(&self, index: usize, low: u32) -> u64 {
        // The last run starting at or before `index`; the first run starts at 0.
        let k = self.runs.partition_point(|&(at, _)| at <= index);
        let high = k
            .checked_sub(1)
            .and_then(|k| self.runs.get(k))
            .map_or(0, |&(_, high)| high);
        join(high, low)
    }

    /// Every time in order, from the low bits of every entry in order.
    pub(crate) fn join_all<'a>(
        &'a self,
        lows: impl Iterator<Item = u32> + 'a,
    ) -> impl Iterator<Item = u64> + 'a {
        let mut runs = self.runs.iter().peekable();
        let mut high = 0;
        lows.enumerate().map(move |(i, low)| {
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

    /// Moves the runs of `other`, whose entries come after the first `base`, to the end.
    pub(crate) fn append(&mut self, other: &mut HighRuns, base: usize) {
        for (at, high) in other.runs.drain(..) {
            if self.last != Some(high) {
                self.runs.push((at + base, high));
                self.last = Some(high);
            }
        }
        other.last = None;
    }

    /// The runs of entries `from` on, numbered from `from`, when there are `len` entries in
    /// all (none when `from` is `len`).
    pub(crate) fn copy_from(&self, from: usize, len: usize) -> HighRuns {
        if from >= len {
            return HighRuns::default();
        }
        // The run holding `from` restarts at 0; the later ones move down.
        let k = self.runs.partition_point(|&(at, _)| at <= from);
        let runs: Vec<(usize, u32)> = k
            .checked_sub(1)
            .and_then(|k| self.runs.get(k..))
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(n, &(at, h))| (if n == 0 { 0 } else { at - from }, h))
            .collect();
        let last = runs.last().map(|&(_, h)| h);
        HighRuns { runs, last }
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

    /// A field as a list of rows holds it: the narrow values, and the escapes beside them.
    struct Field<T> {
        small: Vec<T>,
        escapes: Escapes,
    }

    impl<T: Small> Field<T> {
        fn of(values: &[u32]) -> Field<T> {
            let mut escapes = Escapes::default();
            let small = (values.iter().enumerate())
                .map(|(i, &v)| escapes.narrow(i, v))
                .collect();
            Field { small, escapes }
        }

        fn values(&self) -> Vec<u32> {
            self.escapes.widen_all(self.small.iter().copied()).collect()
        }

        fn get(&self, i: usize) -> u32 {
            self.escapes.widen(i, self.small[i])
        }

        fn append(&mut self, other: &mut Field<T>) {
            self.escapes.append(&mut other.escapes, self.small.len());
            self.small.append(&mut other.small);
        }

        fn copy_from(&self, from: usize) -> Field<T> {
            Field {
                small: self.small[from..].to_vec(),
                escapes: self.escapes.copy_from(from),
            }
        }
    }

    /// Times as a list of rows holds them: the low bits, and the runs of high bits beside them.
    struct Timed {
        low: Vec<u32>,
        high: HighRuns,
    }

    impl Timed {
        fn of(values: &[u64]) -> Timed {
            let mut high = HighRuns::default();
            let low = (values.iter().enumerate())
                .map(|(i, &v)| high.low(i, v))
                .collect();
            Timed { low, high }
        }

        fn values(&self) -> Vec<u64> {
            self.high.join_all(self.low.iter().copied()).collect()
        }

        fn get(&self, i: usize) -> u64 {
            self.high.join(i, self.low[i])
        }

        fn push(&mut self, value: u64) {
            let low = self.high.low(self.low.len(), value);
            self.low.push(low);
        }

        fn append(&mut self, other: &mut Timed) {
            self.high.append(&mut other.high, self.low.len());
            self.low.append(&mut other.low);
        }

        fn copy_from(&self, from: usize) -> Timed {
            Timed {
                low: self.low[from..].to_vec(),
                high: self.high.copy_from(from, self.low.len()),
            }
        }
    }

    /// Values at and around each width's escape come back exactly, by index and in order.
    #[test]
    fn every_value_comes_back() {
        let values = values();
        let bytes: Field<u8> = Field::of(&values);
        let halves: Field<u16> = Field::of(&values);
        assert_eq!(bytes.values(), values);
        assert_eq!(halves.values(), values);
        for (i, &v) in values.iter().enumerate() {
            assert_eq!((bytes.get(i), halves.get(i)), (v, v), "index {i}");
        }
        assert_eq!(halves.escapes.0.len(), 4, "65,535 and up are held whole");
        let times = times();
        let column = Timed::of(&times);
        assert_eq!(column.values(), times);
        for (i, &t) in times.iter().enumerate() {
            assert_eq!(column.get(i), t, "index {i}");
        }
    }

    /// Copying a tail and appending it to the head gives the whole field back, for every
    /// split; and a time pushed after an append starts a run only when its high bits differ.
    #[test]
    fn a_split_copied_and_appended_is_the_whole_field() {
        let values = values();
        let times = times();
        for split in 0..=values.len() {
            let mut head: Field<u16> = Field::of(&values[..split]);
            let mut tail = Field::<u16>::of(&values).copy_from(split);
            assert_eq!(tail.values(), values[split..], "split {split}");
            head.append(&mut tail);
            assert_eq!(head.values(), values, "split {split}");
            assert_eq!(head.get(8), u32::MAX, "split {split}");
        }
        for split in 0..=times.len() {
            let mut head = Timed::of(&times[..split]);
            let mut tail = Timed::of(&times).copy_from(split);
            assert_eq!(tail.values(), times[split..], "split {split}");
            head.append(&mut tail);
            assert_eq!(head.values(), times, "split {split}");
            let indexed: Vec<_> = (0..times.len()).map(|i| head.get(i)).collect();
            assert_eq!(indexed, times, "split {split}");
            let (last, other) = (times[times.len() - 1], 5u64 << 32);
            head.push(last + 1);
            head.push(other);
            let mut more = times.clone();
            more.extend([last + 1, other]);
            assert_eq!(head.values(), more, "split {split}");
        }
    }
}
