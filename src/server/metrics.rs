//! The server's Prometheus metrics: requests by route, method and status,
//! latency histograms by route, writes committed and writes that met
//! contention per graph, and the open graph handles. Rendered as the
//! Prometheus text format (version 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use parking_lot::Mutex;

/// Upper bounds of the latency buckets, in seconds (the last is +Inf).
const BUCKETS_S: [f64; 14] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0,
];

#[derive(Default)]
struct Histogram {
    /// Per bucket, the observations at or under its bound (not cumulative).
    counts: [u64; BUCKETS_S.len() + 1],
    sum_s: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, s: f64) {
        let i = BUCKETS_S
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(BUCKETS_S.len());
        self.counts[i] += 1;
        self.sum_s += s;
        self.count += 1;
    }
}

#[derive(Default)]
struct Counts {
    /// (route, method, status) → requests.
    requests: BTreeMap<(String, String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
    /// graph → writes that committed.
    writes: BTreeMap<String, u64>,
    /// graph → writes refused because another writer got in the way.
    contended: BTreeMap<String, u64>,
    /// Policy reloads that put a new policy in force, and that failed.
    reloads: [u64; 2],
}

#[derive(Default)]
pub struct Metrics {
    counts: Mutex<Counts>,
}

/// A label value with `\`, `"` and line ends escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn bump(counts: &mut BTreeMap<String, u64>, graph: &str) {
    *counts.entry(graph.to_string()).or_default() += 1;
}

/// A counter with one series per graph.
fn per_graph(o: &mut String, name: &str, help: &str, counts: &BTreeMap<String, u64>) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} counter");
    for (g, n) in counts {
        let _ = writeln!(o, "{name}{{graph=\"{}\"}} {n}", label(g));
    }
}

impl Metrics {
    pub fn request(&self, route: &str, method: &str, status: u16, took: Duration) {
        let mut c = self.counts.lock();
        *c.requests
            .entry((route.to_string(), method.to_string(), status))
            .or_default() += 1;
        c.latency
            .entry(route.to_string())
            .or_default()
            .observe(took.as_secs_f64());
    }

    pub fn write_committed(&self, graph: &str) {
        bump(&mut self.counts.lock().writes, graph);
    }

    pub fn policy_reload(&self, ok: bool) {
        self.counts.lock().reloads[usize::from(!ok)] += 1;
    }

    pub fn write_contended(&self, graph: &str) {
        bump(&mut self.counts.lock().contended, graph);
    }

    /// The text exposition, with `open_handles` graphs open and the
    /// calls each graph's policy refused, by action.
    pub fn render(
        &self,
        open_handles: usize,
        denials: &[(String, crate::policy::Action, u64)],
    ) -> String {
        let c = self.counts.lock();
        let mut o = String::new();
        o.push_str("# HELP omnigraph_http_requests_total HTTP requests answered.\n");
        o.push_str("# TYPE omnigraph_http_requests_total counter\n");
        for ((route, method, status), n) in &c.requests {
            let _ = writeln!(
                o,
                "omnigraph_http_requests_total{{route=\"{}\",method=\"{}\",status=\"{status}\"}} {n}",
                label(route),
                label(method)
            );
        }
        o.push_str("# HELP omnigraph_http_request_duration_seconds Time to answer a request (to its first body byte).\n");
        o.push_str("# TYPE omnigraph_http_request_duration_seconds histogram\n");
        for (route, h) in &c.latency {
            let route = label(route);
            let mut cumulative = 0;
            for (i, n) in h.counts.iter().enumerate() {
                cumulative += n;
                let le = BUCKETS_S
                    .get(i)
                    .map_or("+Inf".to_string(), |b| b.to_string());
                let _ = writeln!(
                    o,
                    "omnigraph_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{le}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                o,
                "omnigraph_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                h.sum_s
            );
            let _ = writeln!(
                o,
                "omnigraph_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                h.count
            );
        }
        per_graph(
            &mut o,
            "omnigraph_writes_committed_total",
            "Writes that committed, per graph.",
            &c.writes,
        );
        per_graph(
            &mut o,
            "omnigraph_writes_contended_total",
            "Writes that waited on another writer past their limit or lost a race, per graph.",
            &c.contended,
        );
        o.push_str("# HELP omnigraph_policy_denials_total Calls the policy refused, per graph and action.\n");
        o.push_str("# TYPE omnigraph_policy_denials_total counter\n");
        for (g, action, n) in denials {
            let _ = writeln!(
                o,
                "omnigraph_policy_denials_total{{graph=\"{}\",action=\"{}\"}} {n}",
                label(g),
                action.name()
            );
        }
        o.push_str("# HELP omnigraph_policy_reloads_total Policy reloads (SIGHUP), by outcome.\n");
        o.push_str("# TYPE omnigraph_policy_reloads_total counter\n");
        for (outcome, n) in ["ok", "failed"].iter().zip(c.reloads) {
            let _ = writeln!(
                o,
                "omnigraph_policy_reloads_total{{outcome=\"{outcome}\"}} {n}"
            );
        }
        o.push_str("# HELP omnigraph_open_handles Graph handles this server holds open.\n");
        o.push_str("# TYPE omnigraph_open_handles gauge\n");
        let _ = writeln!(o, "omnigraph_open_handles {open_handles}");
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_end_in_inf() {
        let m = Metrics::default();
        m.request("/q", "POST", 200, Duration::from_micros(50));
        m.request("/q", "POST", 200, Duration::from_millis(3));
        m.request("/q", "POST", 500, Duration::from_secs(60));
        let t = m.render(1, &[]);
        assert!(t.contains("route=\"/q\",le=\"0.0001\"} 1\n"), "{t}");
        assert!(t.contains("route=\"/q\",le=\"0.005\"} 2\n"), "{t}");
        assert!(t.contains("route=\"/q\",le=\"30\"} 2\n"), "{t}");
        assert!(t.contains("route=\"/q\",le=\"+Inf\"} 3\n"), "{t}");
        assert!(t.contains("omnigraph_http_request_duration_seconds_count{route=\"/q\"} 3\n"));
        assert!(t.contains(
            "omnigraph_http_requests_total{route=\"/q\",method=\"POST\",status=\"500\"} 1\n"
        ));
        assert!(t.contains("omnigraph_open_handles 1\n"));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
