//! Leases on virtual clocks, as on object storage: each process renews a
//! liveness lease whose deadline is written on its own wall clock (true
//! time plus a bounded skew), trusts it until its last renewal plus the
//! lease time minus the margin on a clock that counts pauses, and is taken
//! over by another process once that one's wall clock is past the deadline
//! plus the margin. A paused process renews nothing; a renewal after a
//! takeover learns that the lease is lost. The decisions are pure
//! functions of the clocks, beside the state they read.

/// Ticks a lease lasts unrenewed.
pub const LEASE: u64 = 60;
/// The clock difference the leases tolerate (production: a fifth of the lease).
pub const MARGIN: u64 = LEASE / 5;
/// Ticks between two renewals of a running process.
pub const RENEW_EVERY: u64 = LEASE / 4;
/// The largest skew of a process's wall clock from true time: any two
/// differ by less than twice this, which is within the margin's bound
/// (`2 * MAX_SKEW < 2 * MARGIN`).
pub const MAX_SKEW: i64 = MARGIN as i64 - 2;
/// The skew of a run that breaks the assumption on purpose: two wall
/// clocks may differ by up to six margins.
pub const BEYOND_MARGIN_SKEW: i64 = 3 * MARGIN as i64;

/// One process's lease and clocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Its wall clock minus true time.
    pub skew: i64,
    /// Its trust clock when it last renewed.
    pub renewed: u64,
    /// The deadline its last renewal wrote, on its wall clock.
    pub deadline: i64,
    /// A renewal found the lease taken over: it never comes back.
    pub lost: bool,
    /// Ticks it spent paused (a clock that stops does not count them).
    pub paused_for: u64,
}

impl Lease {
    /// The lease a process writes when it starts at true time `now`.
    pub fn start(now: u64, skew: i64) -> Self {
        Self {
            skew,
            renewed: now,
            deadline: wall(now, skew) + LEASE as i64,
            lost: false,
            paused_for: 0,
        }
    }

    /// The clock the owner measures its trust with: true time, pauses
    /// included; with `stops`, a clock that stood still while paused.
    pub fn trust_clock(&self, now: u64, stops: bool) -> u64 {
        if stops {
            now.saturating_sub(self.paused_for)
        } else {
            now
        }
    }

    /// A renewal at true time `now` that reached storage.
    pub fn renew(&mut self, now: u64, stops: bool) {
        self.renewed = self.trust_clock(now, stops);
        self.deadline = wall(now, self.skew) + LEASE as i64;
    }

    /// May the owner still act on its lease?
    pub fn trusted(&self, now: u64, stops: bool) -> bool {
        !self.lost && self.trust_clock(now, stops) < self.renewed + LEASE - MARGIN
    }

    /// Has this lease lapsed as a process whose wall clock is skewed by
    /// `observer_skew` judges it at true time `now`?
    pub fn lapsed_for(&self, now: u64, observer_skew: i64) -> bool {
        wall(now, observer_skew) > self.deadline + MARGIN as i64
    }
}

/// A wall clock's reading at true time `now`.
pub fn wall(now: u64, skew: i64) -> i64 {
    now as i64 + skew
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within the skew bound, the owner stops trusting its lease before
    /// any other process may take it over, whatever their clocks say.
    #[test]
    fn trust_ends_before_any_takeover_while_skew_is_within_the_margin() {
        for owner in [-MAX_SKEW, 0, MAX_SKEW] {
            for observer in [-MAX_SKEW, 0, MAX_SKEW] {
                let lease = Lease::start(100, owner);
                let first_takeover = (100..1000)
                    .find(|&t| lease.lapsed_for(t, observer))
                    .expect("it lapses");
                let last_trusted = (100..1000)
                    .take_while(|&t| lease.trusted(t, false))
                    .last()
                    .expect("trusted at first");
                assert!(
                    last_trusted < first_takeover,
                    "owner skew {owner}, observer skew {observer}: trusted until {last_trusted}, taken over at {first_takeover}"
                );
            }
        }
    }

    /// Beyond it, a process can be taken over while it still trusts its lease.
    #[test]
    fn beyond_the_margin_a_takeover_can_come_while_the_owner_trusts() {
        let lease = Lease::start(100, -BEYOND_MARGIN_SKEW);
        let t = 100 + LEASE - MARGIN - 1;
        assert!(lease.trusted(t, false));
        assert!(lease.lapsed_for(t, BEYOND_MARGIN_SKEW));
    }

    /// A clock that stops while paused keeps trusting after the pause; one
    /// that counts pauses does not.
    #[test]
    fn a_pause_counts_against_trust_unless_the_clock_stops() {
        let mut lease = Lease::start(0, 0);
        lease.paused_for = 3 * LEASE;
        let after = 3 * LEASE + 1;
        assert!(!lease.trusted(after, false));
        assert!(lease.trusted(after, true));
    }
}
