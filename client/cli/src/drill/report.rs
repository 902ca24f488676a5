//! What a drill found, as text for people and JSON for tools.

use serde::Serialize;

use crate::drill::checker::Verdict;

/// One injected fault and how long its group took to acknowledge a send again.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultOutcome {
    /// Seconds into the run.
    pub at_s: f64,
    pub kind: String,
    pub group: String,
    pub node: Option<u64>,
    /// From the fault to the first acknowledgement of a send started after it.
    pub recovery_ms: Option<u64>,
    /// What the fault damaged and what the node reported it repaired (`corrupt-follower`).
    pub detail: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DrillReport {
    pub duration_s: f64,
    pub groups: usize,
    pub rate_per_s: u32,
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Sends the producer gave up on (never acknowledged: not counted as lost).
    pub send_failures: usize,
    pub delayed_sent: usize,
    pub delayed_delivered: usize,
    pub retries_refused: usize,
    pub retries_delivered: usize,
    /// Times a committed offset was seen lower than before.
    pub offset_regressions: usize,
    /// Samples where two nodes of one group, in one term, ran the schedule service.
    pub schedule_service_overlaps: usize,
    pub faults: Vec<FaultOutcome>,
    pub recovery_ms_median: Option<u64>,
    pub recovery_ms_max: Option<u64>,
    pub passed: bool,
}

impl DrillReport {
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "drill: {:.0} s, {} group(s), {} msg/s\n\
             acknowledged {}  consumed {}  lost {}  duplicates {} (stored twice {})  order violations {}\n\
             send failures {}  delayed {} sent / {} delivered  retries {} refused / {} delivered\n\
             offset regressions {}  schedule service overlaps {}\n",
            self.duration_s,
            self.groups,
            self.rate_per_s,
            self.verdict.acknowledged,
            self.verdict.consumed_unique,
            self.verdict.lost,
            self.verdict.duplicates,
            self.verdict.stored_twice,
            self.verdict.order_violations,
            self.send_failures,
            self.delayed_sent,
            self.delayed_delivered,
            self.retries_refused,
            self.retries_delivered,
            self.offset_regressions,
            self.schedule_service_overlaps,
        );
        for fault in &self.faults {
            let node = fault
                .node
                .map_or_else(|| "all".to_owned(), |node| node.to_string());
            let recovery = fault
                .recovery_ms
                .map_or_else(|| "no ack after it".to_owned(), |ms| format!("{ms} ms"));
            text.push_str(&format!(
                "  {:>6.1} s {:<16} {} node {node}: first ack after {recovery}\n",
                fault.at_s, fault.kind, fault.group
            ));
            for line in &fault.detail {
                text.push_str(&format!("           {line}\n"));
            }
        }
        if let (Some(median), Some(max)) = (self.recovery_ms_median, self.recovery_ms_max) {
            text.push_str(&format!("recovery: median {median} ms, worst {max} ms\n"));
        }
        if !self.verdict.lost_examples.is_empty() {
            text.push_str(&format!(
                "lost, for example: {}\n",
                self.verdict.lost_examples.join(", ")
            ));
        }
        for (id, reconsumes) in &self.verdict.stored_twice_examples {
            text.push_str(&format!(
                "stored twice: {id}, consumed at reconsume counts {reconsumes:?}\n"
            ));
        }
        text.push_str(if self.passed {
            "PASSED: nothing acknowledged was lost\n"
        } else {
            "FAILED\n"
        });
        text
    }
}
