//! Writes nobody waits for: the version hints (Lance's per table, the
//! graph's `_graph/latest`), sent after the request they speed up later
//! reads of, off that request's path. A hint that lags or is lost costs a
//! reader one more probe, never a wrong answer; a handle that closes waits
//! for the ones still under way, so a process that exits leaves them
//! written.

use std::future::Future;

use parking_lot::Mutex;
use tokio::task::JoinHandle;

/// Process-wide: a hint is a file of the store, not of one handle.
static PENDING: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

/// Start `write` now; nobody waits for it but [`settle`].
pub fn spawn(write: impl Future<Output = ()> + Send + 'static) {
    let mut pending = PENDING.lock();
    pending.retain(|h| !h.is_finished());
    pending.push(tokio::spawn(write));
}

/// Wait for every write [`spawn`] started so far.
pub async fn settle() {
    let pending: Vec<JoinHandle<()>> = std::mem::take(&mut *PENDING.lock());
    for h in pending {
        let _ = h.await;
    }
}
