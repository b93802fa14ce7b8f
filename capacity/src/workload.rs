//! Workloads (`--workload 2048/512`: input/output tokens) and the search settings.

use crate::error::CapacityError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// One input/output length pair; the output is forced with `ignore_eos`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Workload {
    /// Configured input sequence length (tokens).
    pub isl: u32,
    /// Configured output sequence length (tokens).
    pub osl: u32,
}

impl Workload {
    /// The report's label: `2K / 512`, `8K / 1K` (multiples of 1024 printed in K).
    pub fn label(&self) -> String {
        format!("{} / {}", short_tokens(self.isl), short_tokens(self.osl))
    }

    /// The directory holding this workload's trials: `2048x512`.
    pub fn dir_name(&self) -> String {
        format!("{}x{}", self.isl, self.osl)
    }
}

fn short_tokens(tokens: u32) -> String {
    if tokens >= 1024 && tokens.is_multiple_of(1024) {
        format!("{}K", tokens / 1024)
    } else {
        tokens.to_string()
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.isl, self.osl)
    }
}

impl FromStr for Workload {
    type Err = CapacityError;

    fn from_str(spec: &str) -> Result<Workload, CapacityError> {
        let bad = |why: &str| CapacityError::BadWorkload {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        let (isl, osl) = spec
            .trim()
            .split_once('/')
            .ok_or_else(|| bad("expected INPUT/OUTPUT tokens, e.g. 2048/512"))?;
        let parse = |text: &str| -> Result<u32, CapacityError> {
            let value: u32 = text
                .trim()
                .parse()
                .map_err(|_| bad("token counts must be whole numbers"))?;
            if value == 0 {
                return Err(bad("token counts must be at least 1"));
            }
            Ok(value)
        };
        Ok(Workload {
            isl: parse(isl)?,
            osl: parse(osl)?,
        })
    }
}

/// How the search runs: bounds, trials, requests per trial, time budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchSettings {
    /// Lowest concurrency tried (the first level).
    pub min_concurrency: u32,
    /// Highest concurrency tried; passing here ends the search with no failing level.
    pub max_concurrency: u32,
    /// Trials per level; a level passes only if all of them pass.
    pub trials_per_level: u32,
    /// Warmup requests at the start of every trial (excluded from metrics).
    pub warmups_per_trial: u32,
    /// Measured requests per trial.
    pub measured_requests_per_trial: u32,
    /// Run every trial of a level even after one fails (a level still fails if any does).
    #[serde(default)]
    pub complete_levels: bool,
    /// Stop starting trials after this much time (the bracket so far is reported).
    #[serde(with = "optional_seconds")]
    pub time_budget: Option<Duration>,
}

impl Default for SearchSettings {
    fn default() -> Self {
        SearchSettings {
            min_concurrency: 1,
            max_concurrency: 1024,
            trials_per_level: 3,
            warmups_per_trial: 8,
            measured_requests_per_trial: 64,
            complete_levels: false,
            time_budget: None,
        }
    }
}

impl SearchSettings {
    /// Rejects settings the search cannot run with.
    pub fn validate(&self) -> Result<(), CapacityError> {
        let bad = |why: &str| Err(CapacityError::BadSettings(why.to_string()));
        if self.min_concurrency == 0 {
            return bad("--min-concurrency must be at least 1");
        }
        if self.max_concurrency < self.min_concurrency {
            return bad("--max-concurrency must be at least --min-concurrency");
        }
        if self.trials_per_level == 0 {
            return bad("--trials must be at least 1");
        }
        if self.measured_requests_per_trial == 0 {
            return bad("--requests must be at least 1");
        }
        Ok(())
    }
}

mod optional_seconds {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let seconds: Option<f64> = Option::deserialize(d)?;
        Ok(seconds
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_labels_like_the_fixture() {
        let cases = [
            ("2048/512", "2K / 512"),
            ("8192/1024", "8K / 1K"),
            ("16384/2048", "16K / 2K"),
            (" 100 / 7 ", "100 / 7"),
        ];
        for (spec, label) in cases {
            let w: Workload = spec.parse().unwrap();
            assert_eq!(w.label(), label);
        }
        let w: Workload = "2048/512".parse().unwrap();
        assert_eq!((w.isl, w.osl), (2048, 512));
        assert_eq!(w.dir_name(), "2048x512");
        assert_eq!(w.to_string().parse::<Workload>().unwrap(), w);
    }

    #[test]
    fn rejects_bad_workloads() {
        for spec in ["2048", "2048/", "a/b", "0/512", "2048/-1", "1/2/3"] {
            assert!(spec.parse::<Workload>().is_err(), "{spec}");
        }
    }

    #[test]
    fn settings_validation_and_round_trip() {
        let mut s = SearchSettings::default();
        assert!(s.validate().is_ok());
        s.time_budget = Some(Duration::from_secs(90));
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<SearchSettings>(&json).unwrap(), s);
        s.max_concurrency = 0;
        assert!(s.validate().is_err());
        let s = SearchSettings {
            min_concurrency: 0,
            ..SearchSettings::default()
        };
        assert!(s.validate().is_err());
    }
}
