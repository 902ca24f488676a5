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
    /// From the fault to the consumer's first delivery of a send started after it.
    pub consumer_resume_ms: Option<u64>,
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
    pub consumer_resume_ms_median: Option<u64>,
    pub consumer_resume_ms_max: Option<u64>,
    /// The same figures per fault kind.
    pub kinds: Vec<KindSummary>,
    pub passed: bool,
}

/// How the faults of one kind went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindSummary {
    pub kind: String,
    pub faults: usize,
    pub recovery_ms_median: Option<u64>,
    pub recovery_ms_max: Option<u64>,
    pub consumer_resume_ms_median: Option<u64>,
    pub consumer_resume_ms_max: Option<u64>,
}

/// The median (the upper one of an even count) and the largest of the values `of` gives.
pub fn median_and_max<'f>(
    faults: impl Iterator<Item = &'f FaultOutcome>,
    of: impl Fn(&FaultOutcome) -> Option<u64>,
) -> (Option<u64>, Option<u64>) {
    let mut values: Vec<u64> = faults.filter_map(of).collect();
    values.sort_unstable();
    (
        values.get(values.len() / 2).copied(),
        values.last().copied(),
    )
}

/// One summary per fault kind, in the order the kinds first occurred.
pub fn fault_kinds(faults: &[FaultOutcome]) -> Vec<KindSummary> {
    let mut kinds: Vec<&str> = Vec::new();
    for fault in faults {
        if !kinds.contains(&fault.kind.as_str()) {
            kinds.push(&fault.kind);
        }
    }
    kinds
        .into_iter()
        .map(|kind| {
            let of_kind = || faults.iter().filter(move |f| f.kind == kind);
            let (recovery_ms_median, recovery_ms_max) =
                median_and_max(of_kind(), |f| f.recovery_ms);
            let (consumer_resume_ms_median, consumer_resume_ms_max) =
                median_and_max(of_kind(), |f| f.consumer_resume_ms);
            KindSummary {
                kind: kind.to_owned(),
                faults: of_kind().count(),
                recovery_ms_median,
                recovery_ms_max,
                consumer_resume_ms_median,
                consumer_resume_ms_max,
            }
        })
        .collect()
}

fn ms(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_owned(), |ms| format!("{ms} ms"))
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
                "  {:>6.1} s {:<16} {} node {node}: first ack after {recovery}, consumer after {}\n",
                fault.at_s,
                fault.kind,
                fault.group,
                ms(fault.consumer_resume_ms)
            ));
            for line in &fault.detail {
                text.push_str(&format!("           {line}\n"));
            }
        }
        if let (Some(median), Some(max)) = (self.recovery_ms_median, self.recovery_ms_max) {
            text.push_str(&format!("recovery: median {median} ms, worst {max} ms\n"));
        }
        for kind in &self.kinds {
            text.push_str(&format!(
                "  {:<16} x{}: first ack median {}, worst {}; consumer median {}, worst {}\n",
                kind.kind,
                kind.faults,
                ms(kind.recovery_ms_median),
                ms(kind.recovery_ms_max),
                ms(kind.consumer_resume_ms_median),
                ms(kind.consumer_resume_ms_max),
            ));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(
        kind: &str,
        recovery_ms: Option<u64>,
        consumer_resume_ms: Option<u64>,
    ) -> FaultOutcome {
        FaultOutcome {
            at_s: 0.0,
            kind: kind.into(),
            group: "g".into(),
            node: None,
            recovery_ms,
            consumer_resume_ms,
            detail: Vec::new(),
        }
    }

    #[test]
    fn kinds_are_summarised_in_order_with_their_median_and_worst() {
        let faults = [
            fault("kill-leader", Some(900), Some(1200)),
            fault("pause-leader", Some(50), None),
            fault("kill-leader", Some(700), Some(1500)),
            fault("kill-leader", None, None),
            fault("kill-leader", Some(800), Some(1100)),
        ];
        let kinds = fault_kinds(&faults);
        assert_eq!(kinds.len(), 2);
        assert_eq!(
            (kinds[0].kind.as_str(), kinds[0].faults),
            ("kill-leader", 4)
        );
        assert_eq!(
            (kinds[0].recovery_ms_median, kinds[0].recovery_ms_max),
            (Some(800), Some(900))
        );
        assert_eq!(
            (
                kinds[0].consumer_resume_ms_median,
                kinds[0].consumer_resume_ms_max
            ),
            (Some(1200), Some(1500))
        );
        assert_eq!(kinds[1].kind, "pause-leader");
        assert_eq!(kinds[1].consumer_resume_ms_median, None);
    }
}
