//! The cycle period as one type: nanoseconds inside, every other unit a named conversion. The
//! configuration says it in µs (`cycle.period_us`), the loop's deadlines and the DC setup in ns,
//! the motion planner in seconds; each asks a [`Period`] instead of multiplying by hand.

use std::time::Duration;

/// One cycle period (at most about 584 years; the configuration allows 125 µs..=100 ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Period {
    ns: u64,
}

impl Period {
    /// A period of `us` microseconds.
    pub const fn from_micros(us: u32) -> Period {
        Period {
            ns: us as u64 * 1000,
        }
    }

    /// A period of `ns` nanoseconds.
    pub const fn from_nanos(ns: u64) -> Period {
        Period { ns }
    }

    /// In nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.ns
    }

    /// In whole microseconds.
    pub const fn as_micros(self) -> u64 {
        self.ns / 1000
    }

    /// In seconds.
    pub fn as_secs_f64(self) -> f64 {
        self.ns as f64 * 1e-9
    }

    /// As a [`Duration`].
    pub const fn as_duration(self) -> Duration {
        Duration::from_nanos(self.ns)
    }

    /// How long a cycle waits for its frames when `bus.response_timeout_us` is not set, in ns:
    /// 90 % of the period, leaving the rest for the application and the output copy before the
    /// next deadline.
    pub const fn default_response_timeout_ns(self) -> u64 {
        self.ns - self.ns / 10
    }
}

impl std::fmt::Display for Period {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} µs", self.as_micros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_are_named_and_exact() {
        let p = Period::from_micros(1000);
        assert_eq!(p.as_nanos(), 1_000_000);
        assert_eq!(p.as_micros(), 1000);
        assert_eq!(p.as_secs_f64(), 0.001);
        assert_eq!(p.as_duration(), Duration::from_millis(1));
        assert_eq!(Period::from_nanos(250_000), Period::from_micros(250));
        assert_eq!(p.to_string(), "1000 µs");
    }

    #[test]
    fn default_response_timeout_is_nine_tenths_as_before() {
        // The hand-written rule it replaces: period_us × 900 ns.
        for us in [125u32, 250, 333, 1000, 4000, 100_000, u32::MAX] {
            assert_eq!(
                Period::from_micros(us).default_response_timeout_ns(),
                u64::from(us) * 900,
                "{us} µs"
            );
        }
    }
}
