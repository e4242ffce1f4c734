//! Stopping the declared commands (X12 `exec` checks, `evaluate` steps)
//! that a run's transition is running right now, without the state lock:
//! a transition holds that lock while its command runs, so
//! `stratum_flow_cancel` asks here first ([`Stops::ask`]), and a client
//! going away asks for every run ([`Stops::stop_all`]). Each run's host
//! carries a probe ([`Stops::probe`]) that the command's supervisor asks
//! while it runs; when it says stop, the command's process group is killed
//! (`stratum_vm::agent`, the one home of killing) and the transition is
//! dropped unrecorded, so the cancel that asked then takes the lock and
//! cancels the run.
//!
//! Owns: which runs have a stop asked. Must never: kill anything itself,
//! or take the state lock.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use stratum_vm::agent::StopProbe;

/// The stops asked of this server's runs.
#[derive(Debug, Default)]
pub struct Stops {
    asked: Mutex<BTreeSet<String>>,
    all: AtomicBool,
}

impl Stops {
    /// Asks the commands of `run_id` to stop (until [`Stops::done`]).
    pub fn ask(&self, run_id: &str) {
        self.lock().insert(run_id.to_owned());
    }

    /// The cancel that asked has run: later commands of `run_id` (there are
    /// none on a cancelled run) run again.
    pub fn done(&self, run_id: &str) {
        self.lock().remove(run_id);
    }

    /// The client went away: every command stops.
    pub fn stop_all(&self) {
        self.all.store(true, Ordering::SeqCst);
    }

    /// Whether the commands of `run_id` are asked to stop.
    pub fn asked(&self, run_id: &str) -> bool {
        self.all.load(Ordering::SeqCst) || self.lock().contains(run_id)
    }

    /// The probe of `run_id`'s host.
    pub fn probe(self: &Arc<Self>, run_id: &str) -> Arc<StopProbe> {
        let stops = self.clone();
        let run_id = run_id.to_owned();
        Arc::new(move || stops.asked(&run_id))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.asked.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_says_stop_for_its_run_only_until_done() {
        let stops = Arc::new(Stops::default());
        let (a, b) = (stops.probe("run-a"), stops.probe("run-b"));
        assert!(!a() && !b());
        stops.ask("run-a");
        assert!(a() && !b());
        stops.done("run-a");
        assert!(!a());
        stops.stop_all();
        assert!(a() && b());
    }
}
