//! How many cores Lance's CPU pool may use in a process Omnigraph owns.

/// The variable Lance reads, once, to size the pool that encodes and
/// decodes its pages.
const LANCE_CPU_THREADS: &str = "LANCE_CPU_THREADS";

/// Lance keeps two cores for I/O and gives its CPU pool the rest, but never
/// fewer than one: on a machine of two or three cores every page of a load
/// is encoded on one core while the others idle. A process whose main job
/// is Omnigraph (the CLI, the benchmarks) lets the pool have at least two
/// cores there, unless `LANCE_CPU_THREADS` is already set. Returns the
/// value set, if any.
///
/// # Safety
/// Sets an environment variable: call before any other thread starts.
pub unsafe fn let_lance_use_the_cores() -> Option<usize> {
    if std::env::var_os(LANCE_CPU_THREADS).is_some() {
        return None;
    }
    let want = pool_size(std::thread::available_parallelism().map_or(1, |n| n.get()))?;
    // SAFETY: the caller guarantees no other thread runs yet.
    unsafe { std::env::set_var(LANCE_CPU_THREADS, want.to_string()) };
    Some(want)
}

/// The pool size to ask for on `cores` cores, when Lance's own would be
/// smaller.
fn pool_size(cores: usize) -> Option<usize> {
    let lance_would = cores.saturating_sub(2).max(1);
    let want = lance_would.max(cores.min(2));
    (want != lance_would).then_some(want)
}

#[cfg(test)]
mod tests {
    use super::pool_size;

    #[test]
    fn small_machines_get_two_and_big_ones_keep_lances_choice() {
        let sizes: Vec<Option<usize>> = (1..=6).map(pool_size).collect();
        assert_eq!(sizes, [None, Some(2), Some(2), None, None, None]);
    }
}
