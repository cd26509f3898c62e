//! A long run's progress. On a terminal: a bar under the log with the step (i/N), what
//! runs now (its round) and an ETA (indicatif), every log line printed above it. Anywhere
//! else (CI, a file, a pipe): no bar and no redraws, only the log's whole lines, each
//! step's with its place and ETA.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// The bar of the phase now running, if stderr is a terminal.
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Prints a log line: above the bar if one is drawn, else on stderr.
pub fn line(text: &str) {
    let bar = BAR.lock().unwrap_or_else(|e| e.into_inner());
    match bar.as_ref() {
        Some(bar) => bar.println(text),
        None => eprintln!("{text}"),
    }
}

/// `eprintln!` for a run that may draw a progress bar: the line goes above it.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::bench::progress::line(&format!($($arg)*))
    };
}

/// A phase of `steps` equal steps; its bar (on a terminal) goes when it drops.
#[derive(Debug)]
pub struct Phase {
    drawn: bool,
}

impl Phase {
    /// Starts a phase called `what` of `steps` steps.
    pub fn start(what: &str, steps: usize) -> Phase {
        if !std::io::stderr().is_terminal() {
            return Phase { drawn: false };
        }
        let bar = ProgressBar::new(steps as u64);
        let style = ProgressStyle::with_template(
            "{prefix} [{bar:30}] {pos}/{len} {msg} (elapsed {elapsed}, about {eta} left)",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(500));
        *BAR.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar);
        Phase { drawn: true }
    }

    /// Step `done + 1` begins: `now` says what runs.
    pub fn step(&self, done: usize, now: &str) {
        if !self.drawn {
            return;
        }
        if let Some(bar) = BAR.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            bar.set_position(done as u64);
            bar.set_message(now.to_string());
        }
    }
}

impl Drop for Phase {
    fn drop(&mut self) {
        if let Some(bar) = BAR.lock().unwrap_or_else(|e| e.into_inner()).take() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_a_terminal_no_bar_is_drawn_and_lines_still_print() {
        // The test harness captures stderr: not a terminal.
        let phase = Phase::start("rounds", 4);
        assert!(!phase.drawn);
        phase.step(1, "round 1 of 2: relay-mio");
        assert!(BAR.lock().unwrap().is_none());
        line("a log line");
    }
}
