//! Weighted distributions, summarized the way GuideLLM does (token-weighted TPOT and ITL).

/// A weighted distribution as GuideLLM's `DistributionSummary.from_values` builds it: sorted,
/// equal values merged, zero weights dropped.
#[derive(Debug, Clone, PartialEq)]
pub struct Weighted {
    values: Vec<f64>,
    probabilities: Vec<f64>,
    total_weight: f64,
}

impl Weighted {
    /// Builds the distribution from (value, weight) pairs; None when no weight is positive.
    pub fn new(mut pairs: Vec<(f64, f64)>) -> Option<Weighted> {
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut merged: Vec<(f64, f64)> = Vec::with_capacity(pairs.len());
        for (v, w) in pairs {
            match merged.last_mut() {
                Some((last, weight)) if *last == v => *weight += w,
                _ => merged.push((v, w)),
            }
        }
        merged.retain(|&(_, w)| w > 0.0);
        let total_weight: f64 = merged.iter().map(|&(_, w)| w).sum();
        if merged.is_empty() || total_weight <= 0.0 {
            return None;
        }
        Some(Weighted {
            values: merged.iter().map(|&(v, _)| v).collect(),
            probabilities: merged.iter().map(|&(_, w)| w / total_weight).collect(),
            total_weight,
        })
    }

    /// Σ v·p.
    pub fn mean(&self) -> f64 {
        self.values
            .iter()
            .zip(&self.probabilities)
            .map(|(v, p)| v * p)
            .sum()
    }

    /// sqrt(Σ (v - mean)²·p): the population standard deviation.
    pub fn std(&self) -> f64 {
        let mean = self.mean();
        let var: f64 = self
            .values
            .iter()
            .zip(&self.probabilities)
            .map(|(v, p)| (v - mean) * (v - mean) * p)
            .sum();
        var.sqrt()
    }

    /// round(Σ w).
    pub fn count(&self) -> f64 {
        self.total_weight.round()
    }

    /// Smallest value with positive weight.
    pub fn min(&self) -> f64 {
        self.values[0]
    }

    /// Largest value with positive weight.
    pub fn max(&self) -> f64 {
        self.values[self.values.len() - 1]
    }

    /// The first value whose cumulative probability reaches p/100 (numpy `searchsorted`
    /// side="left" on `cumsum`).
    pub fn percentile(&self, p: f64) -> Option<f64> {
        let q = p / 100.0;
        let mut cdf = 0.0;
        for (v, prob) in self.values.iter().zip(&self.probabilities) {
            cdf += prob;
            if cdf >= q {
                return Some(*v);
            }
        }
        self.values.last().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{percentile, PercentileMethod};

    #[test]
    fn weighted_distribution_follows_guidellm() {
        // Values 10 (weight 1), 20 (weight 3): mean 17.5, population std sqrt(18.75).
        let w = Weighted::new(vec![(20.0, 1.0), (10.0, 1.0), (20.0, 2.0), (99.0, 0.0)]).unwrap();
        assert_eq!(w.mean(), 17.5);
        assert_eq!(w.std(), 18.75f64.sqrt());
        assert_eq!((w.min(), w.max(), w.count()), (10.0, 20.0, 4.0));
        assert_eq!(w.percentile(25.0), Some(10.0));
        assert_eq!(w.percentile(25.1), Some(20.0));
        assert_eq!(Weighted::new(vec![(1.0, 0.0)]), None);
        // Unit weights: the first value whose share reaches q.
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0, PercentileMethod::CdfSearch), Some(2.0));
        assert_eq!(percentile(&v, 50.1, PercentileMethod::CdfSearch), Some(3.0));
    }
}
