//! Insights as OTLP log records: one record when an insight opens and one when it closes, with
//! its severity, id, subject (process, job, rank or node), evidence and what to try as
//! attributes and its one-line summary as the body. They go through the same bounded queue as
//! the health events ([`super::logs`]): a full queue drops the oldest record and counts it, and
//! transitions the engine's closed history no longer holds when they are looked for are counted
//! as dropped too.
use std::time::SystemTime;

use opentelemetry::logs::{AnyValue, Severity as OtelSeverity};

use super::logs::RecordFields;
use crate::model::insights::{Insight, InsightEngine, Severity, Subject};

/// `event.name` of the records.
pub const INSIGHT_OPENED_NAME: &str = "tierscope.insight.opened";
pub const INSIGHT_CLOSED_NAME: &str = "tierscope.insight.closed";

/// What happened to an insight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    Opened,
    Closed,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Opened => "opened",
            Change::Closed => "closed",
        }
    }
}

/// Insight severities on OpenTelemetry's scale.
pub fn severity(s: Severity) -> (OtelSeverity, &'static str) {
    match s {
        Severity::Info => (OtelSeverity::Info, "INFO"),
        Severity::Warning => (OtelSeverity::Warn, "WARN"),
        Severity::Critical => (OtelSeverity::Error, "ERROR"),
    }
}

/// Which insights opened or closed since the last call, oldest first (an open before a close at
/// the same reading). Opens are found among the open insights and the closed history by their
/// opening time, closes in the closed history by their closing time; what the engine counted but
/// no longer holds is returned as `missed`.
#[derive(Clone, Debug, Default)]
pub struct InsightCursor {
    /// The engine's clock at the last call.
    last_ns: Option<u64>,
    opened_seen: u64,
    closed_seen: u64,
}

impl InsightCursor {
    pub fn take<'a>(&mut self, e: &'a InsightEngine, now_ns: u64) -> (Vec<(Change, &'a Insight)>, u64) {
        let after = |t: u64| self.last_ns.is_none_or(|l| t > l);
        let mut out: Vec<(u64, Change, &Insight)> = e
            .open()
            .into_iter()
            .chain(e.closed.iter())
            .filter(|i| after(i.opened_ns))
            .map(|i| (i.opened_ns, Change::Opened, i))
            .collect();
        out.extend(e.closed.iter().filter_map(|i| i.closed_ns.filter(|&c| after(c)).map(|c| (c, Change::Closed, i))));
        out.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        let opened = out.iter().filter(|c| c.1 == Change::Opened).count() as u64;
        let closed = out.len() as u64 - opened;
        let missed = e.opened_total.saturating_sub(self.opened_seen).saturating_sub(opened)
            + e.closed_total.saturating_sub(self.closed_seen).saturating_sub(closed);
        self.opened_seen = e.opened_total;
        self.closed_seen = e.closed_total;
        self.last_ns = Some(self.last_ns.map_or(now_ns, |l| l.max(now_ns)));
        (out.into_iter().map(|(_, c, i)| (c, i)).collect(), missed)
    }
}

fn text(s: &str) -> AnyValue {
    AnyValue::String(s.to_string().into())
}

/// The subject's attributes, named like the metrics' (`process.pid`, `tierscope.job`...).
fn subject_attributes(s: &Subject, a: &mut Vec<(String, AnyValue)>) {
    a.push(("tierscope.insight.subject".into(), text(&s.key())));
    match s {
        Subject::Process { pid, comm } => {
            a.push(("process.pid".into(), AnyValue::Int(i64::from(*pid))));
            a.push(("process.executable.name".into(), text(comm)));
        }
        Subject::Job { job } => a.push(("tierscope.job".into(), text(job))),
        Subject::Rank { job, rank, pid } => {
            a.push(("tierscope.job".into(), text(job)));
            a.push(("tierscope.rank".into(), AnyValue::Int(i64::from(*rank))));
            a.push(("process.pid".into(), AnyValue::Int(i64::from(*pid))));
        }
        Subject::Node { node } => a.push(("tierscope.numa.node".into(), AnyValue::Int(i64::from(*node)))),
    }
}

/// The record of one change. `mono_to_wall` places the engine's monotonic times on the wall
/// clock. Attributes: `tierscope.insight.id`, `.severity`, `.state` (opened/closed), the subject,
/// every evidence figure as `tierscope.insight.evidence.<name>` (a double, the unit in the name),
/// the detail lines, what to try, and for a close how long it was open. The body is the summary
/// (a close says so in front of it).
pub fn insight_record(i: &Insight, change: Change, mono_to_wall: Option<&dyn Fn(u64) -> SystemTime>) -> RecordFields {
    let (sev, sev_text) = severity(i.severity);
    let mut a: Vec<(String, AnyValue)> = vec![
        ("tierscope.insight.id".into(), AnyValue::from(i.id.as_str())),
        ("tierscope.insight.severity".into(), AnyValue::from(i.severity.as_str())),
        ("tierscope.insight.state".into(), AnyValue::from(change.as_str())),
    ];
    subject_attributes(&i.subject, &mut a);
    for (k, v) in &i.evidence {
        a.push((format!("tierscope.insight.evidence.{k}"), AnyValue::Double(*v)));
    }
    if !i.details.is_empty() {
        a.push((
            "tierscope.insight.details".into(),
            AnyValue::ListAny(Box::new(i.details.iter().map(|d| text(d)).collect())),
        ));
    }
    a.push(("tierscope.insight.try".into(), text(&i.try_this)));
    let at = match (change, i.closed_ns) {
        (Change::Closed, Some(c)) => {
            a.push(("tierscope.insight.open_s".into(), AnyValue::Double(c.saturating_sub(i.opened_ns) as f64 / 1e9)));
            c
        }
        _ => i.opened_ns,
    };
    let body = match change {
        Change::Opened => format!("{} on {}: {}", i.id.as_str(), i.subject.text(), i.summary),
        Change::Closed => format!("closed: {} on {}: {}", i.id.as_str(), i.subject.text(), i.summary),
    };
    RecordFields {
        event_name: match change {
            Change::Opened => INSIGHT_OPENED_NAME,
            Change::Closed => INSIGHT_CLOSED_NAME,
        },
        severity: sev,
        severity_text: sev_text,
        body,
        time: mono_to_wall.map(|f| f(at)),
        attributes: a,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::insights::{Finding, InsightConfig, InsightId, Level, CLOSED_HISTORY};

    const S: u64 = 1_000_000_000;

    fn finding(pid: u32, level: Level) -> Finding {
        Finding {
            id: InsightId::AllocationChurn,
            severity: Severity::Warning,
            subject: Subject::Process { pid, comm: "trainer".into() },
            level,
            summary: "12000 pages/s allocated".into(),
            evidence: [("alloc_pages_per_s".to_string(), 12000.0), ("window_s".to_string(), 5.0)].into(),
            details: vec!["40 pages from main+0x10 (a.out)".into()],
            try_this: "reuse buffers".into(),
        }
    }

    fn engine() -> InsightEngine {
        InsightEngine::new(InsightConfig { open_after_s: 1.0, close_after_s: 2.0, ..InsightConfig::default() })
    }

    fn attr<'a>(f: &'a RecordFields, k: &str) -> Option<&'a AnyValue> {
        f.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v)
    }

    #[test]
    fn each_open_and_close_is_taken_once_in_order() {
        let mut e = engine();
        let mut c = InsightCursor::default();
        let mut seen = vec![];
        let mut take = |e: &InsightEngine, t: u64, seen: &mut Vec<(u64, Change, u32)>| {
            let (v, missed) = c.take(e, t * S);
            assert_eq!(missed, 0);
            for (ch, i) in v {
                let Subject::Process { pid, .. } = i.subject else { panic!() };
                seen.push((t, ch, pid));
            }
        };
        // pid 1 holds from 0 s (opens at 1 s), is clear from 3 s (closes at 5 s); pid 2 opens at 3 s.
        for t in 0..8 {
            let mut f = vec![finding(1, if t < 3 { Level::Open } else { Level::Clear })];
            if t >= 2 {
                f.push(finding(2, Level::Open));
            }
            e.step(t * S, f);
            take(&e, t, &mut seen);
        }
        assert_eq!(seen, vec![(1, Change::Opened, 1), (3, Change::Opened, 2), (5, Change::Closed, 1)]);
        // Opened and closed between two looks: both, the open first.
        let mut e = engine();
        let mut c = InsightCursor::default();
        assert!(c.take(&e, 0).0.is_empty());
        for t in 1..10 {
            e.step(t * S, vec![finding(7, if t < 4 { Level::Open } else { Level::Clear })]);
        }
        let (v, missed) = c.take(&e, 9 * S);
        assert_eq!(v.iter().map(|(ch, _)| *ch).collect::<Vec<_>>(), vec![Change::Opened, Change::Closed]);
        assert_eq!(missed, 0);
    }

    #[test]
    fn transitions_that_scrolled_out_of_the_history_are_counted() {
        let mut e =
            InsightEngine::new(InsightConfig { open_after_s: 0.0, close_after_s: 0.0, ..InsightConfig::default() });
        let mut c = InsightCursor::default();
        c.take(&e, 0);
        let n = CLOSED_HISTORY as u64 + 3;
        for pid in 0..n {
            let t = 1 + pid * 2;
            e.step(t * S, vec![finding(pid as u32, Level::Open)]);
            e.step((t + 1) * S, vec![]);
        }
        let (v, missed) = c.take(&e, 1000 * S);
        assert_eq!(v.len() as u64, 2 * CLOSED_HISTORY as u64);
        assert_eq!(missed, 6, "3 insights opened and closed out of sight: 6 records");
    }

    #[test]
    fn a_record_carries_id_severity_subject_and_evidence() {
        let mut e = engine();
        e.step(S, vec![finding(42, Level::Open)]);
        e.step(2 * S, vec![finding(42, Level::Open)]);
        let wall = |ns: u64| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns);
        let f = insight_record(e.open()[0], Change::Opened, Some(&wall));
        assert_eq!((f.event_name, f.severity, f.severity_text), (INSIGHT_OPENED_NAME, OtelSeverity::Warn, "WARN"));
        assert_eq!(f.body, "allocation_churn on trainer 42: 12000 pages/s allocated");
        assert_eq!(f.time, Some(SystemTime::UNIX_EPOCH + Duration::from_secs(2)));
        assert_eq!(attr(&f, "tierscope.insight.id"), Some(&AnyValue::from("allocation_churn")));
        assert_eq!(attr(&f, "tierscope.insight.severity"), Some(&AnyValue::from("warning")));
        assert_eq!(attr(&f, "process.pid"), Some(&AnyValue::Int(42)));
        assert_eq!(attr(&f, "tierscope.insight.subject"), Some(&AnyValue::from("process:42")));
        assert_eq!(attr(&f, "tierscope.insight.evidence.alloc_pages_per_s"), Some(&AnyValue::Double(12000.0)));
        assert_eq!(attr(&f, "tierscope.insight.try"), Some(&AnyValue::from("reuse buffers")));
        assert_eq!(attr(&f, "tierscope.insight.open_s"), None);
        for t in 3..6 {
            e.step(t * S, vec![]);
        }
        let closed = e.closed.back().expect("closed");
        let f = insight_record(closed, Change::Closed, Some(&wall));
        assert_eq!(f.event_name, INSIGHT_CLOSED_NAME);
        assert!(f.body.starts_with("closed: allocation_churn on trainer 42"), "{}", f.body);
        assert_eq!(attr(&f, "tierscope.insight.state"), Some(&AnyValue::from("closed")));
        assert_eq!(attr(&f, "tierscope.insight.open_s"), Some(&AnyValue::Double(3.0)));
        assert_eq!(f.time, Some(SystemTime::UNIX_EPOCH + Duration::from_secs(5)));
        let rank = Subject::Rank { job: "j".into(), rank: 3, pid: 9 };
        let mut a = vec![];
        subject_attributes(&rank, &mut a);
        assert!(a.contains(&("tierscope.rank".to_string(), AnyValue::Int(3))), "{a:?}");
        assert!(a.contains(&("tierscope.job".to_string(), AnyValue::from("j"))), "{a:?}");
        assert_eq!(severity(Severity::Critical).0, OtelSeverity::Error);
    }
}
