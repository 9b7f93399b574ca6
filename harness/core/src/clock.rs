//! The scale of the clock this process runs on (`--time-scale N`, docs/architecture.md "The
//! scaled clock"): 1 is real time; N > 1 means the command line re-executed the harness under
//! libfaketime, so every `tokio::time` deadline and `SystemTime` reading runs N times as fast
//! as the real clock. The scale is set once, before any case starts, and read by what must
//! reason in real time: bounds on tools the clock does not reach, and the reports' real time.

use std::sync::OnceLock;
use std::time::Duration;

static SCALE: OnceLock<u32> = OnceLock::new();

/// Records the scale this process runs at. Only the first call counts: the clock of a process
/// cannot change once it runs.
pub fn set_scale(scale: u32) {
    let _ = SCALE.set(scale.max(1));
}

/// The scale this process runs at (1 unless [`set_scale`] said otherwise).
pub fn scale() -> u32 {
    SCALE.get().copied().unwrap_or(1)
}

/// A bound of `real` real time, as this process's clock measures it: `real` times the scale.
/// For waits on a process that runs on real time (a static binary such as helm or kubectl,
/// which libfaketime cannot reach), whose bound must not shrink with the scale.
pub fn real_time_bound(real: Duration, scale: u32) -> Duration {
    real.saturating_mul(scale.max(1))
}

#[cfg(test)]
mod tests {
    use super::real_time_bound;
    use std::time::Duration;

    #[test]
    fn a_real_time_bound_is_the_same_real_time_at_every_scale() {
        let six_minutes = Duration::from_secs(360);
        assert_eq!(real_time_bound(six_minutes, 1), six_minutes);
        // At x10 the harness's clock counts an hour while helm's six real minutes pass.
        assert_eq!(real_time_bound(six_minutes, 10), Duration::from_secs(3600));
        assert_eq!(
            real_time_bound(six_minutes, 0),
            six_minutes,
            "0 is read as 1"
        );
    }
}
