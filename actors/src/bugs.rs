//! Planted protocol bugs, used to prove that the simulator can fail. They
//! exist only when the `planted-bugs` feature is on; in a normal build every
//! switch is a constant `false` and the buggy branches compile away.

/// The names accepted by [`Bugs::parse`].
pub const NAMES: &[&str] = &[
    "reverse-gate-order",
    "skip-sidecar",
    "publish-before-commit",
    "delete-sidecar-first",
    "skip-recheck",
    "release-gates-early",
    "recover-live-intent",
    "skip-process-lock",
    "delete-sidecar-before-restore",
    "recover-merge-without-source",
    "schema-apply-shared",
    "gc-records-first",
    "gc-ignores-writers",
];

#[cfg(feature = "planted-bugs")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bugs {
    reverse_gate_order: bool,
    skip_sidecar: bool,
    publish_before_commit: bool,
    delete_sidecar_first: bool,
    skip_recheck: bool,
    release_gates_early: bool,
    recover_live_intent: bool,
    skip_process_lock: bool,
    delete_sidecar_before_restore: bool,
    recover_merge_without_source: bool,
    schema_apply_shared: bool,
    gc_records_first: bool,
    gc_ignores_writers: bool,
}

#[cfg(feature = "planted-bugs")]
impl Bugs {
    pub fn parse(name: &str) -> Option<Self> {
        let mut b = Self::default();
        match name {
            "reverse-gate-order" => b.reverse_gate_order = true,
            "skip-sidecar" => b.skip_sidecar = true,
            "publish-before-commit" => b.publish_before_commit = true,
            "delete-sidecar-first" => b.delete_sidecar_first = true,
            "skip-recheck" => b.skip_recheck = true,
            "release-gates-early" => b.release_gates_early = true,
            "recover-live-intent" => b.recover_live_intent = true,
            "skip-process-lock" => b.skip_process_lock = true,
            "delete-sidecar-before-restore" => b.delete_sidecar_before_restore = true,
            "recover-merge-without-source" => b.recover_merge_without_source = true,
            "schema-apply-shared" => b.schema_apply_shared = true,
            "gc-records-first" => b.gc_records_first = true,
            "gc-ignores-writers" => b.gc_ignores_writers = true,
            _ => return None,
        }
        Some(b)
    }
    pub fn reverse_gate_order(&self) -> bool {
        self.reverse_gate_order
    }
    pub fn skip_sidecar(&self) -> bool {
        self.skip_sidecar
    }
    pub fn publish_before_commit(&self) -> bool {
        self.publish_before_commit
    }
    pub fn delete_sidecar_first(&self) -> bool {
        self.delete_sidecar_first
    }
    pub fn skip_recheck(&self) -> bool {
        self.skip_recheck
    }
    pub fn release_gates_early(&self) -> bool {
        self.release_gates_early
    }
    pub fn recover_live_intent(&self) -> bool {
        self.recover_live_intent
    }
    pub fn skip_process_lock(&self) -> bool {
        self.skip_process_lock
    }
    pub fn delete_sidecar_before_restore(&self) -> bool {
        self.delete_sidecar_before_restore
    }
    /// A recovery that rolls a merge forward publishes it as a plain commit.
    pub fn recover_merge_without_source(&self) -> bool {
        self.recover_merge_without_source
    }
    /// A schema apply takes the schema gate shared, like a data write.
    pub fn schema_apply_shared(&self) -> bool {
        self.schema_apply_shared
    }
    /// Index-file collection reads the records before it judges the writers.
    pub fn gc_records_first(&self) -> bool {
        self.gc_records_first
    }
    /// Index-file collection takes every unrecorded file for garbage.
    pub fn gc_ignores_writers(&self) -> bool {
        self.gc_ignores_writers
    }
}

/// No bug can be planted: every switch below is a constant `false`. (A
/// field, not a unit struct, so that `Bugs::default()` reads the same in
/// both builds.)
#[cfg(not(feature = "planted-bugs"))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bugs {
    _none: (),
}

#[cfg(not(feature = "planted-bugs"))]
impl Bugs {
    pub fn parse(_name: &str) -> Option<Self> {
        None
    }
    pub const fn reverse_gate_order(&self) -> bool {
        false
    }
    pub const fn skip_sidecar(&self) -> bool {
        false
    }
    pub const fn publish_before_commit(&self) -> bool {
        false
    }
    pub const fn delete_sidecar_first(&self) -> bool {
        false
    }
    pub const fn skip_recheck(&self) -> bool {
        false
    }
    pub const fn release_gates_early(&self) -> bool {
        false
    }
    pub const fn recover_live_intent(&self) -> bool {
        false
    }
    pub const fn skip_process_lock(&self) -> bool {
        false
    }
    pub const fn delete_sidecar_before_restore(&self) -> bool {
        false
    }
    pub const fn recover_merge_without_source(&self) -> bool {
        false
    }
    pub const fn schema_apply_shared(&self) -> bool {
        false
    }
    pub const fn gc_records_first(&self) -> bool {
        false
    }
    pub const fn gc_ignores_writers(&self) -> bool {
        false
    }
}
