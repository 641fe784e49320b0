//! Reconnect backoff: exponential growth with full jitter. A uniform draw between zero and the
//! exponential ceiling spreads the reconnects of many workers after a broker restart.

use std::sync::Arc;
use std::time::Duration;

/// Full-jitter exponential backoff: after the n-th consecutive failure wait
/// `U[0,1) * min(cap, base * 2^(n-1))`. The random source is injected for tests.
#[derive(Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    random: Arc<dyn Fn() -> f64 + Send + Sync>,
    failures: u32,
}

impl Backoff {
    /// `base` and `cap` of the ceiling; panics unless `0 < base <= cap`.
    pub fn new(base: Duration, cap: Duration) -> Self {
        assert!(!base.is_zero() && base <= cap, "Backoff: need 0 < base <= cap");
        Backoff { base, cap, random: Arc::new(fastrand::f64), failures: 0 }
    }

    /// Draws jitter from `random`, which returns values in [0, 1).
    pub fn with_random(mut self, random: impl Fn() -> f64 + Send + Sync + 'static) -> Self {
        self.random = Arc::new(random);
        self
    }

    /// The largest delay after `failures` consecutive failures (at least 1).
    pub fn ceiling(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(31);
        self.base.saturating_mul(1u32 << exp).min(self.cap)
    }

    /// Records one more failure and returns how long to wait before the next try.
    pub fn next_delay(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.ceiling(self.failures).mul_f64((self.random)())
    }

    /// Forgets past failures, after a connection succeeded.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

impl Default for Backoff {
    /// Base 200 ms, cap 30 s, as every Jobwire library.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(200), Duration::from_secs(30))
    }
}

impl std::fmt::Debug for Backoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backoff").field("base", &self.base).field("cap", &self.cap).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_with_full_jitter_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::default().with_random(|| 0.5);
        let got: Vec<Duration> = (0..10).map(|_| b.next_delay()).collect();
        let want = [100, 200, 400, 800, 1600, 3200, 6400, 12800, 15000, 15000].map(ms);
        assert_eq!(got, want);
        b.reset();
        assert_eq!(b.next_delay(), ms(100));
        let mut zero = Backoff::default().with_random(|| 0.0);
        assert_eq!(zero.next_delay(), Duration::ZERO);
        assert_eq!(Backoff::default().ceiling(1000), ms(30_000));
    }
}
