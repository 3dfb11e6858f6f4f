//! A load's progress bar on stderr, shown only once a load takes a moment
//! and only on a terminal.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// A progress bar on stderr that appears only once a load takes a moment.
pub struct Progress {
    pub bar: indicatif::ProgressBar,
    started: Instant,
}

impl Progress {
    pub fn new(total: u64) -> Self {
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(total),
            indicatif::ProgressDrawTarget::hidden(),
        );
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec})",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        bar.set_message("reading");
        Self {
            bar,
            started: Instant::now(),
        }
    }

    pub fn update(&self, bytes: u64) {
        if self.bar.is_hidden()
            && self.started.elapsed() > Duration::from_millis(300)
            && std::io::stderr().is_terminal()
        {
            self.bar
                .set_draw_target(indicatif::ProgressDrawTarget::stderr());
            self.bar.enable_steady_tick(Duration::from_millis(120));
        }
        self.bar.set_position(bytes);
    }
}
