//! Omnigraph's deterministic simulator: the production protocol machines
//! under a seeded scheduler, over a simulated substrate with crashes and
//! storage faults, checked against the protocol's invariants after every step.

pub mod ractor_mode;
pub mod rng;
pub mod sim;
pub mod workload;
pub mod world;

pub use sim::{Config, RunReport, Sim, Violation};

/// Run one seed.
pub fn run_seed(seed: u64, bugs: omnigraph_actors::Bugs, trace: bool) -> RunReport {
    Sim::new(Config {
        seed,
        bugs,
        crashes: true,
        faults: true,
        trace,
        procs: None,
    })
    .run()
}

#[cfg(test)]
mod tests {
    use super::*;
    use omnigraph_actors::Bugs;
    use omnigraph_actors::bugs::NAMES;

    /// Seeds of the clean protocol in the test suite (CI sweeps thousands).
    const CLEAN_SEEDS: u64 = 150;
    /// Every planted bug must be found within this many seeds.
    const BUG_SEEDS: u64 = 2_000;

    #[test]
    fn the_clean_protocol_passes_a_seeded_sweep_with_several_processes() {
        let mut multi = 0;
        for seed in 0..CLEAN_SEEDS {
            let r = run_seed(seed, Bugs::default(), false);
            assert!(r.violation.is_none(), "seed {seed}: {:?}", r.violation);
            multi += usize::from(r.procs > 1);
        }
        assert!(multi > 0, "no run had more than one process");
    }

    #[test]
    fn a_seed_replays_to_the_same_digest() {
        let a = run_seed(7, Bugs::default(), false);
        let b = run_seed(7, Bugs::default(), false);
        assert_eq!(a.digest, b.digest);
    }

    #[test]
    fn every_planted_bug_is_caught() {
        for name in NAMES {
            let bugs = Bugs::parse(name).expect("the simulator builds with planted bugs");
            let found = (0..BUG_SEEDS).find(|&s| run_seed(s, bugs, false).violation.is_some());
            assert!(
                found.is_some(),
                "planted bug {name} not caught in {BUG_SEEDS} seeds"
            );
        }
    }
}
