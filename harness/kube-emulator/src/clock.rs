//! The cluster's clock: a fixed epoch plus tokio's elapsed time, so paused (virtual) time gives
//! deterministic timestamps and real time gives real-looking ones.

use k8s_openapi::jiff::Timestamp;
use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct Clock {
    epoch_unix: u64,
    epoch_subsec_nanos: u32,
    start: tokio::time::Instant,
}

impl Clock {
    /// Must be called inside a tokio runtime (the start instant is tokio's).
    pub(crate) fn new(epoch_unix: u64, epoch_subsec_nanos: u32) -> Self {
        Self {
            epoch_unix,
            epoch_subsec_nanos,
            start: tokio::time::Instant::now(),
        }
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Nanoseconds since the Unix epoch, in cluster time.
    pub(crate) fn now_nanos(&self) -> i128 {
        (self.epoch_unix as i128) * 1_000_000_000
            + self.epoch_subsec_nanos as i128
            + self.elapsed().as_nanos() as i128
    }

    pub(crate) fn now_unix(&self) -> u64 {
        (self.now_nanos() / 1_000_000_000) as u64
    }

    /// `metav1.Time` (RFC 3339, second precision).
    pub(crate) fn now_rfc3339(&self) -> String {
        format_unix(self.now_unix() as i64)
    }
}

pub(crate) fn format_unix(secs: i64) -> String {
    Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

pub(crate) fn format_nanos(nanos: i128) -> String {
    Timestamp::from_nanosecond(nanos)
        .map(|t| format!("{t:.9}"))
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000000000Z".into())
}

/// Parses a `metav1.Time` into Unix seconds.
pub fn parse_unix(s: &str) -> Option<i64> {
    s.parse::<Timestamp>().ok().map(|t| t.as_second())
}

/// Kubernetes' short age rendering (`translateTimestampSince` / `duration.HumanDuration`).
pub(crate) fn human_age(secs: i64) -> String {
    let s = secs.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        let rs = s % 60;
        return if rs == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{rs}s")
        };
    }
    if m < 180 {
        return format!("{m}m");
    }
    let h = s / 3600;
    if h < 8 {
        let rm = (s % 3600) / 60;
        return if rm == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{rm}m")
        };
    }
    if h < 48 {
        return format!("{h}h");
    }
    let d = h / 24;
    if d < 8 {
        let rh = h % 24;
        return if rh == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{rh}h")
        };
    }
    if d < 730 {
        return format!("{d}d");
    }
    format!("{}y", d / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_render_as_rfc3339() {
        assert_eq!(format_unix(1_767_225_600), "2026-01-01T00:00:00Z");
        assert_eq!(parse_unix("2026-01-01T00:00:00Z"), Some(1_767_225_600));
        assert_eq!(
            format_nanos(1_767_225_600_000_000_001),
            "2026-01-01T00:00:00.000000001Z"
        );
    }

    #[test]
    fn ages_render_like_kubectl() {
        assert_eq!(human_age(5), "5s");
        assert_eq!(human_age(150), "2m30s");
        assert_eq!(human_age(3600 * 3), "3h");
        assert_eq!(human_age(86400 * 3), "3d");
    }
}
