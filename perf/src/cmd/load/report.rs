//! The load test's report, in Markdown for people and JSON for CI: what the sessions
//! saw, what the tester itself cost, and what the server's metrics say.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use super::scrape::{Scrape, SeriesChange, changes};
use crate::bench::sessions::load_test::{Outcome, Pilot, Plan, SessionRecord, Target};
use crate::bench::sessions::quantile_ms;

/// The share of a core above which a client thread may have been the limit.
const BUSY_THREAD: f64 = 0.85;
/// The share of frames skipped above which the tester was the limit.
const SKIPPED_FRAMES: f64 = 0.001;
/// Sign-ups this late mean the tester did not keep the rate.
const LATE_SIGNUP: Duration = Duration::from_millis(500);
/// The `/metrics` series the Markdown report lists at most (the JSON has them all).
const SHOWN_SERIES: usize = 60;

/// The tester's and the host's CPU over the hold.
#[derive(Clone, Copy, Debug)]
pub struct HoldCpu {
    /// Cores the tester's process used on average.
    pub tester_cores: f64,
    /// The share of all the host's CPUs that was busy.
    pub host_busy: f64,
    /// The host's CPUs.
    pub cpus: usize,
}

/// What the report says, from the run.
#[derive(Debug)]
pub struct Report<'a> {
    /// Where the sessions signed up.
    pub target: &'a Target,
    /// How the load was made.
    pub plan: &'a Plan,
    /// What the pilot session saw.
    pub pilot: &'a Pilot,
    /// What the load's sessions saw.
    pub outcome: &'a Outcome,
    /// The tester's and the host's CPU over the hold, when it was read.
    pub hold_cpu: Option<HoldCpu>,
    /// The server's metrics before the load, in the middle of the hold, after it.
    pub readings: (Vec<Scrape>, Option<Vec<Scrape>>, Vec<Scrape>),
}

/// The setup steps the report times, and how each is read from a session.
type Step = (
    &'static str,
    &'static str,
    fn(&SessionRecord) -> Option<Duration>,
);
const STEPS: [Step; 4] = [
    ("answered", "POST answered (DNS, TCP, TLS included)", |s| {
        s.answered
    }),
    ("connected", "ICE + DTLS connected", |s| s.connected),
    ("channel_open", "events channel open", |s| s.channel_open),
    (
        "first_audio",
        "first audio back (sent once the channel is open)",
        |s| s.first_audio,
    ),
];

/// p50, p90, p99 and max of `values` in ms; `None` for no values.
fn percentiles(mut values: Vec<Duration>) -> Option<[f64; 4]> {
    if values.is_empty() {
        return None;
    }
    Some([0.5, 0.9, 0.99, 1.0].map(|q| quantile_ms(&mut values, q)))
}

/// Percentiles as a table's cells: `p50 | p90 | p99 | max`, or dashes.
fn percentile_cells(p: Option<[f64; 4]>) -> String {
    match p {
        Some(p) => p.map(|v| format!("{v:.1}")).join(" | "),
        None => "– | – | – | –".into(),
    }
}

fn percentiles_json(p: Option<[f64; 4]>) -> Value {
    match p {
        Some([p50, p90, p99, max]) => json!({"p50": p50, "p90": p90, "p99": p99, "max": max}),
        None => Value::Null,
    }
}

/// A sample as the report writes it: at most six significant digits.
fn number(value: f64) -> String {
    if !value.is_finite() || (value.fract() == 0.0 && value.abs() < 1e15) {
        return format!("{value}");
    }
    let magnitude = value.abs().log10().floor() as i32 + 1;
    let digits = (6 - magnitude).clamp(0, 12) as usize;
    let text = format!("{value:.digits$}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `part` of `whole` as a percentage, or a dash for none.
fn share(part: u64, whole: u64) -> String {
    match whole {
        0 => "–".to_string(),
        _ => format!("{:.2} %", 100.0 * part as f64 / whole as f64),
    }
}

/// What the sessions add up to.
struct Totals {
    failed: usize,
    completed: usize,
    created: usize,
    sent: u64,
    skipped: u64,
    received: u64,
    gaps: u64,
    pings: u64,
    pongs: u64,
}

impl Report<'_> {
    fn sessions(&self) -> &[SessionRecord] {
        &self.outcome.sessions
    }

    fn totals(&self) -> Totals {
        let s = self.sessions();
        let sum = |f: fn(&SessionRecord) -> u64| s.iter().map(f).sum::<u64>();
        let failed = s.iter().filter(|r| r.failure.is_some()).count();
        Totals {
            failed,
            completed: s.len() - failed,
            created: s.iter().filter(|r| r.location.is_some()).count(),
            sent: sum(|r| r.audio_sent as u64),
            skipped: sum(|r| r.late_frames),
            received: sum(|r| r.audio_received as u64),
            gaps: sum(|r| r.audio_gaps),
            pings: sum(|r| r.pings as u64),
            pongs: sum(|r| r.rtts.len() as u64),
        }
    }

    /// Failure reasons with their counts, the commonest first.
    fn failures(&self) -> Vec<(String, usize)> {
        counted(
            self.sessions()
                .iter()
                .filter_map(|s| s.failure.as_ref().map(|f| f.label())),
        )
    }

    /// DELETE answers by status (`no answer` for none), for the sessions created.
    fn deletes(&self) -> Vec<(String, usize)> {
        counted(self.sessions().iter().filter_map(|s| {
            s.deleted.map(|status| match status {
                0 => "no answer".to_string(),
                status => status.to_string(),
            })
        }))
    }

    fn rtts(&self) -> Vec<Duration> {
        let sessions = self.sessions().iter();
        sessions.flat_map(|s| s.rtts.iter().copied()).collect()
    }

    /// Each client thread's share of a core over its whole life.
    fn thread_busy(&self) -> Vec<f64> {
        let drivers = self.outcome.drivers.iter();
        drivers
            .map(|d| d.cpu_seconds / d.wall.as_secs_f64().max(1e-9))
            .collect()
    }

    /// Each client thread's share of a core over the hold (over its life when it did
    /// not see the whole hold).
    fn thread_busy_in_hold(&self) -> Vec<f64> {
        let drivers = self.outcome.drivers.iter().zip(self.thread_busy());
        drivers
            .map(|(d, life)| d.hold_busy.unwrap_or(life))
            .collect()
    }

    fn latest_signup(&self) -> Duration {
        let lateness = self.sessions().iter().map(|s| s.lateness);
        lateness.max().unwrap_or_default()
    }

    /// Each endpoint's series that changed over the load, or why it was not read.
    fn metric_changes(&self) -> Vec<(String, Result<Vec<SeriesChange>, String>)> {
        let (before, during, after) = &self.readings;
        after
            .iter()
            .enumerate()
            .map(|(i, after)| {
                let mid = during
                    .as_ref()
                    .and_then(|d| d.get(i))
                    .and_then(|d| d.series.as_deref().ok());
                let changed = match (before.get(i).map(|b| &b.series), &after.series) {
                    (Some(Ok(b)), Ok(a)) => Ok(changes(b, mid, a)),
                    (Some(Err(e)), _) | (_, Err(e)) => Err(e.clone()),
                    (None, _) => Err("not read before the load".into()),
                };
                (after.url.clone(), changed)
            })
            .collect()
    }

    fn command() -> String {
        let args: Vec<String> = std::env::args().skip(1).collect();
        format!("ufrag-perf {}", args.join(" "))
    }

    /// The report in Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let (plan, outcome) = (self.plan, self.outcome);
        let totals = self.totals();
        let host = crate::bench::environment::host();
        let _ = writeln!(out, "# Load test: {}\n", self.target.url());
        let _ = writeln!(out, "Command: `{}`\n", Self::command());
        let _ = writeln!(
            out,
            "Tester host: {}, {} vCPUs, kernel {}. Plan: {} sessions signing up at {}/s \
             (over {:.1} s) from {}, each sending an Opus frame every 20 ms and a ping over \
             `events` every {:?} once its channel opens; when every session talks (or has \
             failed), {:?} together; then each is deleted, at the same rate.\n",
            host["cpu_model"].as_str().unwrap_or("unknown"),
            host["vcpus"],
            host["kernel"].as_str().unwrap_or("unknown"),
            plan.sessions,
            plan.rate,
            plan.ramp().as_secs_f64(),
            plan.local,
            plan.ping_every,
            plan.hold,
        );
        let hold = match outcome.hold_started {
            Some(t) => format!(
                " (the hold began {:.1} s in, when the last session started talking or \
                 failed)",
                t.as_secs_f64()
            ),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "The load took {:.1} s from the first sign-up to the last session's end{hold}; \
             the deletes took {:.1} s more. Pilot session (before the load): answered in \
             {:.1} ms, connected through {} in {:.1} ms, ping round trip {:.1} ms.\n",
            outcome.elapsed.as_secs_f64(),
            outcome.deleting.as_secs_f64(),
            ms(self.pilot.answered),
            self.pilot.relay,
            ms(self.pilot.connected),
            ms(self.pilot.rtt)
        );
        out.push_str("## Sessions\n\n| sessions | count |\n|---|---:|\n");
        for (label, n) in [
            ("asked for", plan.sessions),
            ("completed without failure", totals.completed),
            ("failed", totals.failed),
            ("created (201 with a Location)", totals.created),
        ] {
            let _ = writeln!(out, "| {label} | {n} |");
        }
        for (status, n) in self.deletes() {
            let _ = writeln!(out, "| deleted: {status} | {n} |");
        }
        out.push_str("\n## Failures by reason\n\n");
        let failures = self.failures();
        if failures.is_empty() {
            out.push_str("None.\n");
        } else {
            out.push_str("| reason | sessions |\n|---|---:|\n");
            for (label, n) in &failures {
                let _ = writeln!(out, "| {} | {n} |", label.replace('|', "\\|"));
            }
        }
        let _ = writeln!(
            out,
            "\n## Setup time (ms from just before the POST)\n\n\
             Over the sessions that reached each step (of {}); with 50 or fewer, p99 is the \
             max.\n\n\
             | step | sessions | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|---:|",
            plan.sessions
        );
        for (_, label, read) in STEPS {
            let times: Vec<Duration> = self.sessions().iter().filter_map(read).collect();
            let n = times.len();
            let _ = writeln!(
                out,
                "| {label} | {n} | {} |",
                percentile_cells(percentiles(times))
            );
        }
        self.talk_markdown(&mut out, &totals);
        self.tester_markdown(&mut out, &totals);
        self.metrics_markdown(&mut out);
        out
    }

    fn talk_markdown(&self, out: &mut String, t: &Totals) {
        out.push_str("\n## Talk\n\n| measure | value |\n|---|---:|\n");
        let rows = [
            ("audio frames sent".to_string(), t.sent.to_string()),
            (
                "frames the tester skipped (its thread late by a frame or more)".into(),
                t.skipped.to_string(),
            ),
            ("audio packets back".into(), t.received.to_string()),
            (
                "audio back ÷ sent (an echo model returns every frame)".into(),
                match t.sent {
                    0 => "–".into(),
                    _ => format!("{:.4}", t.received as f64 / t.sent as f64),
                },
            ),
            (
                "audio lost on the way back (gaps in the server's sequence numbers)".into(),
                share(t.gaps, t.received + t.gaps),
            ),
            ("pings sent".into(), t.pings.to_string()),
            ("pongs back".into(), t.pongs.to_string()),
            (
                "pings without a pong (failed sessions' included; 1 s allowed after the talk)"
                    .into(),
                share(t.pings.saturating_sub(t.pongs), t.pings),
            ),
            (
                "ping round trip p50 / p90 / p99 / max (ms)".into(),
                percentile_cells(percentiles(self.rtts())).replace(" | ", " / "),
            ),
        ];
        for (label, value) in rows {
            let _ = writeln!(out, "| {label} | {value} |");
        }
    }

    fn tester_markdown(&self, out: &mut String, t: &Totals) {
        out.push_str("\n## The tester\n\n");
        let busy = self.thread_busy_in_hold();
        let percent = |shares: &[f64]| -> String {
            let text: Vec<String> = shares
                .iter()
                .map(|b| format!("{:.0} %", b * 100.0))
                .collect();
            text.join(", ")
        };
        let _ = writeln!(
            out,
            "- Client threads: {}, busy {} of a core each over the hold ({} over the whole \
             run).",
            busy.len(),
            percent(&busy),
            percent(&self.thread_busy())
        );
        if let Some(cpu) = self.hold_cpu {
            let _ = writeln!(
                out,
                "- Over the hold: the tester's process used {:.2} cores; the host's {} CPUs \
                 were {:.0} % busy (the deployment's share too, when it runs here).",
                cpu.tester_cores,
                cpu.cpus,
                cpu.host_busy * 100.0
            );
        }
        let latest = self.latest_signup();
        let _ = writeln!(
            out,
            "- Sign-ups: {} threads; the latest started {:.1} ms after its due time.",
            self.plan.signup_threads(),
            ms(latest)
        );
        let mut limits = Vec::new();
        if busy.iter().any(|&b| b > BUSY_THREAD) {
            limits.push(format!(
                "a client thread was busy more than {:.0} % of a core (give it more \
                 `--threads`, or a bigger host)",
                BUSY_THREAD * 100.0
            ));
        }
        if t.skipped as f64 > SKIPPED_FRAMES * (t.sent + t.skipped).max(1) as f64 {
            limits.push(format!(
                "its threads skipped {} frames, more than {:.1} % of them",
                t.skipped,
                SKIPPED_FRAMES * 100.0
            ));
        }
        if latest > LATE_SIGNUP {
            limits.push(format!(
                "sign-ups fell behind the rate by up to {:.0} ms (signaling answered slower \
                 than {} threads keep up with at this rate, or the tester was short of CPU)",
                ms(latest),
                self.plan.signup_threads()
            ));
        }
        match limits.is_empty() {
            true => {
                let _ = writeln!(
                    out,
                    "- The tester was not the limit by these signs: no client thread above \
                     {:.0} % of a core, {} frames skipped ({}, at most {:.1} % allowed), \
                     every sign-up within {} ms of its due time.",
                    BUSY_THREAD * 100.0,
                    t.skipped,
                    share(t.skipped, t.sent + t.skipped),
                    SKIPPED_FRAMES * 100.0,
                    LATE_SIGNUP.as_millis()
                );
            }
            false => {
                let _ = writeln!(
                    out,
                    "- **The tester may be the limit of these figures:** {}.",
                    limits.join("; ")
                );
            }
        }
    }

    fn metrics_markdown(&self, out: &mut String) {
        out.push_str(
            "\n## The server's metrics\n\nRead before the load, in the middle of the hold \
             and after the deletes; the series that changed (histogram buckets and summary \
             quantiles left out).\n",
        );
        for (url, changed) in self.metric_changes() {
            let _ = writeln!(out, "\n### {url}\n");
            let changed = match changed {
                Ok(changed) => changed,
                Err(e) => {
                    let _ = writeln!(out, "Not read: {e}.");
                    continue;
                }
            };
            if changed.is_empty() {
                out.push_str("No series changed.\n");
                continue;
            }
            out.push_str(
                "| series | before | mid-hold | after | change |\n|---|---:|---:|---:|---:|\n",
            );
            for c in changed.iter().take(SHOWN_SERIES) {
                let change = match c.reset() {
                    true => "reset (the server restarted)".to_string(),
                    false => number(c.after - c.before),
                };
                let _ = writeln!(
                    out,
                    "| `{}` | {} | {} | {} | {change} |",
                    c.series.replace('|', "\\|"),
                    number(c.before),
                    c.during.map_or("–".into(), number),
                    number(c.after),
                );
            }
            if changed.len() > SHOWN_SERIES {
                let _ = writeln!(
                    out,
                    "\n{} more in the JSON report.",
                    changed.len() - SHOWN_SERIES
                );
            }
        }
    }

    /// The report as JSON.
    pub fn json(&self) -> Value {
        let (plan, outcome) = (self.plan, self.outcome);
        let t = self.totals();
        let setup: serde_json::Map<String, Value> = STEPS
            .iter()
            .map(|(key, _, read)| {
                let times: Vec<Duration> = self.sessions().iter().filter_map(read).collect();
                let n = times.len();
                let mut value = percentiles_json(percentiles(times));
                match value.as_object_mut() {
                    Some(fields) => {
                        fields.insert("sessions".into(), n.into());
                    }
                    None => value = json!({"sessions": n}),
                }
                (key.to_string(), value)
            })
            .collect();
        let metrics: Vec<Value> = self
            .metric_changes()
            .into_iter()
            .map(|(url, changed)| match changed {
                Ok(changed) => json!({
                    "url": url,
                    "changes": changed.iter().map(|c| json!({
                        "series": c.series,
                        "before": c.before,
                        "during": c.during,
                        "after": c.after,
                        "reset": c.reset(),
                    })).collect::<Vec<_>>(),
                }),
                Err(e) => json!({"url": url, "error": e}),
            })
            .collect();
        let count = |rows: Vec<(String, usize)>, key: &str| -> Vec<Value> {
            rows.into_iter()
                .map(|(label, n)| json!({key: label, "sessions": n}))
                .collect()
        };
        json!({
            "url": self.target.url(),
            "command": Self::command(),
            "tester_host": crate::bench::environment::host(),
            "plan": {
                "sessions": plan.sessions,
                "rate_per_second": plan.rate,
                "hold_seconds": plan.hold.as_secs_f64(),
                "client_threads": plan.threads,
                "signup_threads": plan.signup_threads(),
                "local": plan.local.to_string(),
                "connect_timeout_seconds": plan.connect_timeout.as_secs_f64(),
                "ping_every_seconds": plan.ping_every.as_secs_f64(),
            },
            "elapsed_seconds": outcome.elapsed.as_secs_f64(),
            "hold_started_seconds": outcome.hold_started.map(|t| t.as_secs_f64()),
            "deleting_seconds": outcome.deleting.as_secs_f64(),
            "pilot": {
                "answered_ms": ms(self.pilot.answered),
                "connected_ms": ms(self.pilot.connected),
                "rtt_ms": ms(self.pilot.rtt),
                "relay": self.pilot.relay,
            },
            "sessions": {
                "asked": plan.sessions,
                "completed": t.completed,
                "failed": t.failed,
                "created": t.created,
                "deleted": count(self.deletes(), "status"),
            },
            "failures": count(self.failures(), "reason"),
            "setup_ms": setup,
            "audio": {
                "sent": t.sent,
                "skipped_by_the_tester": t.skipped,
                "received": t.received,
                "sequence_gaps": t.gaps,
            },
            "pings": {
                "sent": t.pings,
                "answered": t.pongs,
                "rtt_ms": percentiles_json(percentiles(self.rtts())),
            },
            "tester": {
                "client_thread_busy": self.thread_busy(),
                "client_thread_busy_in_hold": self.thread_busy_in_hold(),
                "hold_cpu": self.hold_cpu.map(|c| json!({
                    "tester_cores": c.tester_cores,
                    "host_busy": c.host_busy,
                    "host_cpus": c.cpus,
                })),
                "latest_signup_ms": ms(self.latest_signup()),
            },
            "metrics": metrics,
        })
    }
}

/// Each distinct label with how often it occurs, the commonest first (ties by label).
fn counted(labels: impl Iterator<Item = String>) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for label in labels {
        match counts.iter_mut().find(|(l, _)| *l == label) {
            Some((_, n)) => *n += 1,
            None => counts.push((label, 1)),
        }
    }
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_written_short() {
        assert_eq!(number(1272.0), "1272");
        assert_eq!(number(0.054201931999999994), "0.0542019");
        assert_eq!(number(196941.5), "196942");
        assert_eq!(number(12.25), "12.25");
        assert_eq!(number(-2.5), "-2.5");
        assert_eq!(number(f64::INFINITY), "inf");
    }

    #[test]
    fn percentiles_rank_the_values_and_none_is_a_dash() {
        let values = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentiles(values), Some([51.0, 90.0, 99.0, 100.0]));
        assert_eq!(percentiles(Vec::new()), None);
        assert_eq!(percentile_cells(None), "– | – | – | –");
        assert_eq!(percentiles_json(None), Value::Null);
    }

    #[test]
    fn reasons_are_counted_commonest_first() {
        let labels = ["b", "a", "b", "c", "a", "b"].map(String::from);
        assert_eq!(
            counted(labels.into_iter()),
            vec![("b".into(), 3), ("a".into(), 2), ("c".into(), 1)]
        );
    }
}
