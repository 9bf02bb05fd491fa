//! Whether a decoding step runs on all the engine's threads or on the calling one alone.
//!
//! A decoding step is hundreds of short parallel regions, and each waits for its slowest
//! thread. When another process shares the cores, a worker it preempts holds up every region
//! until the scheduler gives it back, and one thread on its own core can then decode faster
//! than all of them together. Which is faster is measured, not guessed: steps run in the
//! current mode, and now and then one step runs in the other; a probe that beats the
//! current mode's recent mean by a margin switches the mode. Probes that lose come ever
//! rarer, so a quiet machine pays almost nothing for them. Either mode gives the same
//! numbers (the products and attention do not depend on how their work is split).

/// Steps between probes right after a switch (when the machine just changed).
const FIRST_INTERVAL: u32 = 16;
/// The longest gap between probes, reached by doubling after each lost probe.
const MAX_INTERVAL: u32 = 512;
/// A probe must be this much faster than the current mode's mean to switch.
const MARGIN: f64 = 0.85;
/// Weight of a new step in the current mode's mean.
const NEW_WEIGHT: f64 = 0.2;

/// One kind of step's choice (single-sequence decoding, or batched steps).
#[derive(Debug)]
pub(crate) struct ThreadChoice {
    /// Off when there is only one thread.
    enabled: bool,
    solo: bool,
    /// Rows of the steps the mean is of: a batched step of another size starts a new mean,
    /// so a probe is never judged against steps of a different cost.
    rows: usize,
    /// Recent seconds per step of the current mode.
    mean: Option<f64>,
    since_probe: u32,
    interval: u32,
    probing: bool,
    /// Steps run solo so far (reported).
    solo_steps: u64,
}

impl ThreadChoice {
    pub(crate) fn new(threads: usize) -> ThreadChoice {
        ThreadChoice {
            enabled: threads > 1,
            solo: false,
            rows: 1,
            mean: None,
            since_probe: 0,
            interval: FIRST_INTERVAL,
            probing: false,
            solo_steps: 0,
        }
    }

    /// Whether the next step, of `rows` rows (sequences), runs solo.
    pub(crate) fn next_is_solo(&mut self, rows: usize) -> bool {
        if !self.enabled {
            return false;
        }
        if rows != self.rows {
            self.rows = rows;
            self.mean = None;
        }
        self.since_probe += 1;
        self.probing = self.mean.is_some() && self.since_probe >= self.interval;
        let solo = if self.probing {
            self.since_probe = 0;
            !self.solo
        } else {
            self.solo
        };
        self.solo_steps += u64::from(solo);
        solo
    }

    /// Records the seconds of the step [`ThreadChoice::next_is_solo`] chose.
    pub(crate) fn record(&mut self, secs: f64) {
        if !self.enabled || !secs.is_finite() {
            return;
        }
        if std::mem::take(&mut self.probing) {
            let mean = self.mean.unwrap_or(f64::INFINITY);
            if secs < MARGIN * mean {
                self.solo = !self.solo;
                self.mean = Some(secs);
                self.interval = FIRST_INTERVAL;
            } else {
                self.interval = (self.interval * 2).min(MAX_INTERVAL);
            }
            return;
        }
        self.mean = Some(match self.mean {
            None => secs,
            Some(m) => (1.0 - NEW_WEIGHT) * m + NEW_WEIGHT * secs,
        });
    }

    /// Steps run solo so far.
    pub(crate) fn solo_steps(&self) -> u64 {
        self.solo_steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `steps` steps whose seconds depend on the mode; returns the solo steps.
    fn drive(c: &mut ThreadChoice, steps: usize, all: f64, solo: f64) -> usize {
        (0..steps)
            .filter(|_| {
                let s = c.next_is_solo(1);
                c.record(if s { solo } else { all });
                s
            })
            .count()
    }

    #[test]
    fn a_quiet_machine_stays_on_all_threads_and_probes_ever_less() {
        let mut c = ThreadChoice::new(2);
        // Two threads twice as fast: only probes run solo, and they come rarer.
        let solo = drive(&mut c, 4000, 0.01, 0.02);
        assert!(!c.solo);
        assert!(solo <= 12, "{solo} solo steps of 4000");
        assert_eq!(c.interval, MAX_INTERVAL);
    }

    #[test]
    fn a_busy_machine_switches_to_solo_and_back_when_it_is_quiet_again() {
        let mut c = ThreadChoice::new(2);
        drive(&mut c, 2000, 0.01, 0.018);
        // Another process arrives: all threads now take 0.03 s, one alone 0.018 s. Within one
        // probe interval (and the mean's catching up) the choice is solo.
        drive(&mut c, MAX_INTERVAL as usize + 50, 0.03, 0.018);
        assert!(c.solo);
        let solo = drive(&mut c, 1000, 0.03, 0.018);
        assert!(solo >= 990, "{solo} of 1000 steps solo on the busy machine");
        // It leaves: the next probe of all threads wins.
        drive(&mut c, MAX_INTERVAL as usize + 50, 0.01, 0.018);
        assert!(!c.solo);
    }

    #[test]
    fn one_thread_never_probes() {
        let mut c = ThreadChoice::new(1);
        assert_eq!(drive(&mut c, 100, 0.01, 0.001), 0);
        assert_eq!(c.solo_steps(), 0);
    }

    #[test]
    fn a_step_of_another_size_is_not_judged_against_the_old_mean() {
        let mut c = ThreadChoice::new(2);
        let steps = |c: &mut ThreadChoice, n: usize, rows: usize, all: f64, solo: f64| {
            (0..n)
                .filter(|_| {
                    let s = c.next_is_solo(rows);
                    c.record(if s { solo } else { all });
                    s
                })
                .count()
        };
        // Batches of four rows (0.04 s on all threads), then of one row (0.01 s). Probes fall at
        // steps 16, 48 and 112, so the third is the fourth one-row step: against the four-row
        // mean a solo step of one row (0.018 s) would look faster.
        steps(&mut c, 108, 4, 0.04, 0.072);
        let solo = steps(&mut c, 40, 1, 0.01, 0.018);
        assert_eq!(solo, 1, "only the probe ran solo");
        assert!(!c.solo);
    }

    #[test]
    fn a_similar_probe_does_not_switch() {
        let mut c = ThreadChoice::new(2);
        // Within the margin (10 % faster): noise, not a reason to switch.
        drive(&mut c, 3000, 0.01, 0.009);
        assert!(!c.solo);
    }
}
