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
    })
    .run()
}
