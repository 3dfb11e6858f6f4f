//! The clocks a lease is read on. Other processes compare a lease's
//! deadline with their wall clock; its owner bounds how long it trusts the
//! lease with a clock that keeps counting while the process is stopped or
//! the machine suspended (Linux's CLOCK_BOOTTIME). `Instant` would not do:
//! it is CLOCK_MONOTONIC there, which stops during a suspend, so a resumed
//! process would go on trusting a lease others took over long ago.
//! Injectable, so tests can skew the wall clock and move the other.

use std::time::Duration;

pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch: what lease deadlines are written in.
    fn wall_ms(&self) -> u64;
    /// Time since boot, suspended and stopped time included: what a process
    /// measures its own trust in its lease with.
    fn boot(&self) -> Duration;
}

/// The machine's clocks.
pub struct SystemClock;

impl Clock for SystemClock {
    fn wall_ms(&self) -> u64 {
        super::ulid::now_ms()
    }

    #[cfg(target_os = "linux")]
    fn boot(&self) -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_BOOTTIME exists
        // on every Linux this builds for (2.6.39 and later).
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME) failed");
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    /// Elsewhere the monotonic clock: it may stop while the machine sleeps,
    /// which docs/architecture.md names as a limit off Linux.
    #[cfg(not(target_os = "linux"))]
    fn boot(&self) -> Duration {
        use std::sync::OnceLock;
        static START: OnceLock<std::time::Instant> = OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed()
    }
}

/// The machine's clocks moved by test-set offsets: a wall clock skewed
/// against other processes', and a boot clock that jumps (a suspend).
#[cfg(test)]
#[derive(Default)]
pub struct ShiftedClock {
    pub wall_offset_ms: std::sync::atomic::AtomicI64,
    pub boot_offset_ms: std::sync::atomic::AtomicU64,
}

#[cfg(test)]
impl ShiftedClock {
    pub fn skewed(wall_offset_ms: i64) -> Self {
        Self {
            wall_offset_ms: wall_offset_ms.into(),
            boot_offset_ms: 0.into(),
        }
    }
}

#[cfg(test)]
impl Clock for ShiftedClock {
    fn wall_ms(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        (SystemClock.wall_ms() as i64 + self.wall_offset_ms.load(Relaxed)) as u64
    }

    fn boot(&self) -> Duration {
        use std::sync::atomic::Ordering::Relaxed;
        SystemClock.boot() + Duration::from_millis(self.boot_offset_ms.load(Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_moves_with_time_and_never_back() {
        let c = SystemClock;
        let a = c.boot();
        std::thread::sleep(Duration::from_millis(20));
        let b = c.boot();
        assert!(b >= a + Duration::from_millis(20), "{a:?} then {b:?}");
    }
}
