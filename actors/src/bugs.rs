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
    "accept-any-commit-version",
    "trust-a-clock-that-stops",
    "restore-without-lease",
    "no-fence-on-gate-takeover",
    "ack-before-publish",
    "insert-skips-key-check",
    "fence-on-every-listing",
    "version-before-record",
    "keep-sidecar-when-published",
    "cleanup-ignores-intents",
    "cleanup-ignores-writers",
    "cleanup-frees-shared-files",
    "cleanup-drops-heads",
    "linger-forever",
    "view-before-lock",
    "view-outlives-lock",
    "known-table-ignores-line",
    "known-branch-ignores-schema",
    "abandon-beside-a-landing",
    "stale-commit-failures",
    "group-keeps-a-refused-member",
    "group-acks-a-refused-member",
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
    accept_any_commit_version: bool,
    trust_a_clock_that_stops: bool,
    restore_without_lease: bool,
    no_fence_on_gate_takeover: bool,
    ack_before_publish: bool,
    insert_skips_key_check: bool,
    fence_on_every_listing: bool,
    version_before_record: bool,
    keep_sidecar_when_published: bool,
    cleanup_ignores_intents: bool,
    cleanup_ignores_writers: bool,
    cleanup_frees_shared_files: bool,
    cleanup_drops_heads: bool,
    linger_forever: bool,
    view_before_lock: bool,
    view_outlives_lock: bool,
    known_table_ignores_line: bool,
    known_branch_ignores_schema: bool,
    abandon_beside_a_landing: bool,
    stale_commit_failures: bool,
    group_keeps_a_refused_member: bool,
    group_acks_a_refused_member: bool,
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
            "accept-any-commit-version" => b.accept_any_commit_version = true,
            "trust-a-clock-that-stops" => b.trust_a_clock_that_stops = true,
            "restore-without-lease" => b.restore_without_lease = true,
            "no-fence-on-gate-takeover" => b.no_fence_on_gate_takeover = true,
            "ack-before-publish" => b.ack_before_publish = true,
            "insert-skips-key-check" => b.insert_skips_key_check = true,
            "fence-on-every-listing" => b.fence_on_every_listing = true,
            "version-before-record" => b.version_before_record = true,
            "keep-sidecar-when-published" => b.keep_sidecar_when_published = true,
            "cleanup-ignores-intents" => b.cleanup_ignores_intents = true,
            "cleanup-ignores-writers" => b.cleanup_ignores_writers = true,
            "cleanup-frees-shared-files" => b.cleanup_frees_shared_files = true,
            "cleanup-drops-heads" => b.cleanup_drops_heads = true,
            "linger-forever" => b.linger_forever = true,
            "view-before-lock" => b.view_before_lock = true,
            "view-outlives-lock" => b.view_outlives_lock = true,
            "known-table-ignores-line" => b.known_table_ignores_line = true,
            "known-branch-ignores-schema" => b.known_branch_ignores_schema = true,
            "abandon-beside-a-landing" => b.abandon_beside_a_landing = true,
            "stale-commit-failures" => b.stale_commit_failures = true,
            "group-keeps-a-refused-member" => b.group_keeps_a_refused_member = true,
            "group-acks-a-refused-member" => b.group_acks_a_refused_member = true,
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
    /// The substrate takes whatever version a table commit lands at, as the storage library's rebasing commit gives it, instead of refusing one that is not its base plus one.
    pub fn accept_any_commit_version(&self) -> bool {
        self.accept_any_commit_version
    }
    /// A process measures its trust in its lease on a clock that stops while the process is paused (CLOCK_MONOTONIC across a suspend).
    pub fn trust_a_clock_that_stops(&self) -> bool {
        self.trust_a_clock_that_stops
    }
    /// A table restore does not check the process's lease first.
    pub fn restore_without_lease(&self) -> bool {
        self.restore_without_lease
    }
    /// Taking a gate over from a dead holder publishes no fence.
    pub fn no_fence_on_gate_takeover(&self) -> bool {
        self.no_fence_on_gate_takeover
    }
    /// A writer tells its client the write committed as soon as its first table commit lands, before the publish.
    pub fn ack_before_publish(&self) -> bool {
        self.ack_before_publish
    }
    /// Prepare stages a strict insert without checking that its id is absent.
    pub fn insert_skips_key_check(&self) -> bool {
        self.insert_skips_key_check
    }
    /// Every listing of sidecars publishes a fence, whether or not it took an owner over.
    pub fn fence_on_every_listing(&self) -> bool {
        self.fence_on_every_listing
    }
    /// A publish writes the graph version before the commit record it names, so a failure between leaves a head with no record.
    pub fn version_before_record(&self) -> bool {
        self.version_before_record
    }
    /// Recovery that finds an intent already published leaves its sidecar.
    pub fn keep_sidecar_when_published(&self) -> bool {
        self.keep_sidecar_when_published
    }
    /// Version cleanup leaves unresolved intents' bases out of what it keeps.
    pub fn cleanup_ignores_intents(&self) -> bool {
        self.cleanup_ignores_intents
    }
    /// Version cleanup takes every process for gone when it judges who may still commit an unreferenced file.
    pub fn cleanup_ignores_writers(&self) -> bool {
        self.cleanup_ignores_writers
    }
    /// Trimming a table line frees every data file its removed versions reference, including those later versions share.
    pub fn cleanup_frees_shared_files(&self) -> bool {
        self.cleanup_frees_shared_files
    }
    /// Version cleanup keeps by age and count only, not the latest graph version that holds every branch head.
    pub fn cleanup_drops_heads(&self) -> bool {
        self.cleanup_drops_heads
    }
    /// A gate owner keeps its cross-process lock after its last lease with no timer to end the keeping.
    pub fn linger_forever(&self) -> bool {
        self.linger_forever
    }
    /// A gate owner tells a lease its gate is locked, and reads its view, before the cross-process lock is held.
    pub fn view_before_lock(&self) -> bool {
        self.view_before_lock
    }
    /// A gate owner keeps the view it knows after giving its cross-process lock up, and hands it to a lease once it holds the lock again.
    pub fn view_outlives_lock(&self) -> bool {
        self.view_outlives_lock
    }
    /// A table gate's owner answers a grant from the view it knows whatever
    /// line and version the writer's snapshot names.
    pub fn known_table_ignores_line(&self) -> bool {
        self.known_table_ignores_line
    }
    /// A branch gate's owner answers a grant from the view it knows
    /// whatever happened to the schema gate since (a schema apply moves
    /// every branch's head without its gate).
    pub fn known_branch_ignores_schema(&self) -> bool {
        self.known_branch_ignores_schema
    }
    /// A write whose table commits answered with a conflict drops its
    /// intent even though another of its table commits landed.
    pub fn abandon_beside_a_landing(&self) -> bool {
        self.abandon_beside_a_landing
    }
    /// A write retried after its table commits refused keeps those
    /// refusals, and its next attempt, all landed, goes to recovery.
    pub fn stale_commit_failures(&self) -> bool {
        self.stale_commit_failures
    }
    /// A group commit stages what a member it refused had written before
    /// its failing statement.
    pub fn group_keeps_a_refused_member(&self) -> bool {
        self.group_keeps_a_refused_member
    }
    /// A group commit tells every member it committed, refused ones too.
    pub fn group_acks_a_refused_member(&self) -> bool {
        self.group_acks_a_refused_member
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
    pub const fn accept_any_commit_version(&self) -> bool {
        false
    }
    pub const fn trust_a_clock_that_stops(&self) -> bool {
        false
    }
    pub const fn restore_without_lease(&self) -> bool {
        false
    }
    pub const fn no_fence_on_gate_takeover(&self) -> bool {
        false
    }
    pub const fn ack_before_publish(&self) -> bool {
        false
    }
    pub const fn insert_skips_key_check(&self) -> bool {
        false
    }
    pub const fn fence_on_every_listing(&self) -> bool {
        false
    }
    pub const fn version_before_record(&self) -> bool {
        false
    }
    pub const fn keep_sidecar_when_published(&self) -> bool {
        false
    }
    pub const fn cleanup_ignores_intents(&self) -> bool {
        false
    }
    pub const fn cleanup_ignores_writers(&self) -> bool {
        false
    }
    pub const fn cleanup_frees_shared_files(&self) -> bool {
        false
    }
    pub const fn cleanup_drops_heads(&self) -> bool {
        false
    }
    pub const fn linger_forever(&self) -> bool {
        false
    }
    pub const fn view_before_lock(&self) -> bool {
        false
    }
    pub const fn view_outlives_lock(&self) -> bool {
        false
    }
    pub const fn known_table_ignores_line(&self) -> bool {
        false
    }
    pub const fn known_branch_ignores_schema(&self) -> bool {
        false
    }
    pub const fn abandon_beside_a_landing(&self) -> bool {
        false
    }
    pub const fn stale_commit_failures(&self) -> bool {
        false
    }
    pub const fn group_keeps_a_refused_member(&self) -> bool {
        false
    }
    pub const fn group_acks_a_refused_member(&self) -> bool {
        false
    }
}
