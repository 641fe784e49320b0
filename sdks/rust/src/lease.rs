//! The worker's own view of a lease: when it gives a lease up if the broker does not extend it.
//!
//! A broker that is frozen or cut off cannot send Cancel, yet its lease runs out all the same and
//! the job's next attempt may start elsewhere. So the worker cancels a handler (reason
//! [`CancelReason::LeaseLost`](crate::CancelReason::LeaseLost)) once its lease has passed on the
//! worker's own clock without an extension; see "Leases, fencing tokens and heartbeats" in
//! docs/protocol.md. The worker counts a lease from the arrival of its Assignment, and an
//! extension from when it sent the oldest heartbeat that named the lease and had no answer yet.

use std::time::Duration;

const MIN_MARGIN: Duration = Duration::from_millis(250);
const MAX_MARGIN: Duration = Duration::from_secs(5);

/// How much sooner than the broker the worker gives a lease up: a tenth of the lease, at least
/// 250 ms and at most 5 s, and never more than half of what a heartbeat has left
/// (lease - heartbeat), so that a healthy broker's extension arrives in time.
pub(crate) fn margin(lease: Duration, heartbeat: Duration) -> Duration {
    let m = (lease / 10).clamp(MIN_MARGIN, MAX_MARGIN);
    m.min(lease.saturating_sub(heartbeat) / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_follows_the_protocol() {
        let ms = Duration::from_millis;
        let cases = [
            ("broker defaults: a tenth", ms(30_000), ms(10_000), ms(3_000)),
            ("short lease: the floor", ms(1_000), ms(333), ms(250)),
            ("long lease: the ceiling", ms(600_000), ms(200_000), ms(5_000)),
            ("heartbeat close to the lease", ms(3_000), ms(2_800), ms(100)),
            ("heartbeat past the lease", ms(3_000), ms(4_000), ms(0)),
        ];
        for (name, lease, hb, want) in cases {
            assert_eq!(margin(lease, hb), want, "{name}");
        }
    }
}
