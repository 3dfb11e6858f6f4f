//! The ManifestPublisher: the one door through which graph state is published.
//! It runs one compare-and-swap at a time, in arrival order, so in-process
//! publishes never race each other; the substrate's CAS guards the rest.

use std::collections::VecDeque;

use tracing::debug;

use crate::machine::*;
use crate::types::*;

#[derive(Default)]
pub struct Publisher {
    queue: VecDeque<(Addr, PublishReq)>,
    in_flight: Option<(ReqId, Addr, OpId)>,
    next_req: ReqId,
    violations: Vec<String>,
}

impl Publisher {
    pub fn new() -> Self {
        Self::default()
    }

    fn pump(&mut self) -> Vec<Effect> {
        if self.in_flight.is_some() {
            return Vec::new();
        }
        let Some((who, req)) = self.queue.pop_front() else {
            return Vec::new();
        };
        self.next_req += 1;
        debug!(op = %req.op, branch = %req.branch, change = ?req.change, "publish");
        self.in_flight = Some((self.next_req, who, req.op.clone()));
        vec![Effect::Io(self.next_req, Io::Publish { req })]
    }
}

impl Machine for Publisher {
    fn on_start(&mut self, _now: Tick) -> Vec<Effect> {
        Vec::new()
    }

    fn on_msg(&mut self, _now: Tick, from: Addr, msg: Msg) -> Vec<Effect> {
        match msg {
            Msg::Publish { req } => {
                self.queue.push_back((from, req));
                self.pump()
            }
            other => {
                self.violations
                    .push(format!("publisher got unexpected {other:?}"));
                Vec::new()
            }
        }
    }

    fn on_io(&mut self, _now: Tick, req: ReqId, out: IoOut) -> Vec<Effect> {
        let Some((id, who, op)) = self.in_flight.take() else {
            return Vec::new();
        };
        if id != req {
            self.in_flight = Some((id, who, op));
            return Vec::new();
        }
        let result = match out {
            IoOut::Published(r) => r,
            other => PublishResult::Unknown(format!("unexpected completion {other:?}")),
        };
        debug!(op = %op, ?result, "publish done");
        let mut effects = vec![Effect::Send(who, Msg::PublishReply { op, result })];
        effects.extend(self.pump());
        effects
    }

    fn check(&self) -> Result<(), String> {
        match self.violations.first() {
            Some(v) => Err(v.clone()),
            None => Ok(()),
        }
    }
}
