//! The lease queue behind every gate: first come, first served; shared holders
//! coexist, an exclusive holder is alone; a shared request never overtakes a
//! queued exclusive one (no starvation).

use std::collections::VecDeque;

use crate::types::{Addr, GateMode, OpId};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub who: Addr,
    pub op: OpId,
    pub mode: GateMode,
}

#[derive(Clone, Debug, Default)]
pub struct Gate {
    holders: Vec<Lease>,
    queue: VecDeque<Lease>,
}

impl Gate {
    /// Queue a request; returns the leases granted as a result. A repeated
    /// request from an op that already holds or waits is ignored.
    pub fn request(&mut self, who: Addr, op: OpId, mode: GateMode) -> Vec<Lease> {
        if self.holds(&op) || self.queue.iter().any(|l| l.op == op) {
            return Vec::new();
        }
        self.queue.push_back(Lease { who, op, mode });
        self.grant()
    }

    /// Release a held lease, or withdraw a queued request. Returns the leases
    /// granted as a result, or `None` when `op` neither held nor waited.
    pub fn release(&mut self, op: &OpId) -> Option<Vec<Lease>> {
        if let Some(i) = self.holders.iter().position(|l| &l.op == op) {
            self.holders.remove(i);
        } else if let Some(i) = self.queue.iter().position(|l| &l.op == op) {
            self.queue.remove(i);
        } else {
            return None;
        }
        Some(self.grant())
    }

    pub fn holds(&self, op: &OpId) -> bool {
        self.holders.iter().any(|l| &l.op == op)
    }

    pub fn holders(&self) -> &[Lease] {
        &self.holders
    }

    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    fn grant(&mut self) -> Vec<Lease> {
        let mut granted = Vec::new();
        while let Some(next) = self.queue.front() {
            let compatible = self.holders.iter().all(|h| next.mode.coexists_with(h.mode));
            if !compatible {
                break;
            }
            let lease = self.queue.pop_front().expect("front exists");
            self.holders.push(lease.clone());
            granted.push(lease);
        }
        granted
    }

    /// Never two holders unless all are shared; no holder waits as well.
    pub fn check(&self) -> Result<(), String> {
        let exclusive = self
            .holders
            .iter()
            .filter(|h| h.mode == GateMode::Exclusive)
            .count();
        if exclusive > 0 && self.holders.len() > 1 {
            return Err(format!(
                "gate has an exclusive holder beside others: {:?}",
                self.holders
            ));
        }
        for h in &self.holders {
            if self.queue.iter().any(|q| q.op == h.op) {
                return Err(format!("{:?} both holds and waits", h.op));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(s: &str) -> OpId {
        OpId(s.into())
    }
    fn who(s: &str) -> Addr {
        Addr::Writer(op(s))
    }

    #[test]
    fn exclusive_is_fifo_and_alone() {
        let mut g = Gate::default();
        assert_eq!(g.request(who("a"), op("a"), GateMode::Exclusive).len(), 1);
        assert!(g.request(who("b"), op("b"), GateMode::Exclusive).is_empty());
        assert!(g.request(who("c"), op("c"), GateMode::Exclusive).is_empty());
        let next = g.release(&op("a")).unwrap();
        assert_eq!(next[0].op, op("b"));
        g.check().unwrap();
        assert!(g.release(&op("zzz")).is_none());
    }

    #[test]
    fn shared_requests_coexist_but_do_not_overtake_exclusive() {
        let mut g = Gate::default();
        assert_eq!(g.request(who("a"), op("a"), GateMode::Shared).len(), 1);
        assert_eq!(g.request(who("b"), op("b"), GateMode::Shared).len(), 1);
        assert!(g.request(who("x"), op("x"), GateMode::Exclusive).is_empty());
        // A shared request behind a queued exclusive one waits.
        assert!(g.request(who("c"), op("c"), GateMode::Shared).is_empty());
        assert!(g.release(&op("a")).unwrap().is_empty());
        let next = g.release(&op("b")).unwrap();
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].op, op("x"));
        let next = g.release(&op("x")).unwrap();
        assert_eq!(next[0].op, op("c"));
        g.check().unwrap();
    }

    #[test]
    fn withdrawing_a_queued_request_unblocks_nothing_it_should_not() {
        let mut g = Gate::default();
        g.request(who("a"), op("a"), GateMode::Exclusive);
        g.request(who("b"), op("b"), GateMode::Exclusive);
        assert!(g.release(&op("b")).unwrap().is_empty());
        assert_eq!(g.waiting(), 0);
        assert!(g.holds(&op("a")));
    }
}
