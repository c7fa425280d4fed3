//! Exits no event reported: the kernel's exit records share a ring buffer that can overflow, and
//! an exit program may not run at all, so the model's live processes are also checked against
//! what `/proc` lists. Pure: the collector passes what it listed, this decides.
//!
//! A process the model holds as alive whose pid `/proc` no longer lists has exited. It is judged
//! on the second look that misses it (its exit record, if the kernel wrote one, had a reading's
//! time to arrive), or on the first one when that look was taken before the event ring was
//! drained to its end (`confirmed`, a window's last reading): either way such an exit is
//! counted in `exits_found_late` and dated when it was first found gone. A pid listed again after
//! a look missed it belongs to another process (the one the model knew was gone at that look).
use std::collections::{BTreeMap, HashSet};

/// One look at `/proc`: the pids it listed and when.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcLook {
    pub at_ns: u64,
    pub pids: HashSet<u32>,
    /// Taken before the event ring was drained to its end: every exit record of a process gone at
    /// this look has reached the model already, so a miss is final.
    pub confirmed: bool,
    /// The processes the model held alive when /proc was listed: only those are judged on this
    /// look. One the model learnt of afterwards (an exec drained from the ring after the listing)
    /// may have started after it: not listed, yet not missing. `None`: all of them.
    pub known: Option<HashSet<u32>>,
}

/// An exit found by a look: the process's pid, when it was first found gone, and whether its pid
/// already belongs to another process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LateExit {
    pub tgid: u32,
    pub gone_at_ns: u64,
    pub pid_reused: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Liveness {
    /// Pids of live model processes that a look missed, and when it first did.
    missing_since: BTreeMap<u32, u64>,
}

impl Liveness {
    /// Judges the processes the model holds as alive (`alive`: known before `look` was taken)
    /// against `look`; returns the exits to mark.
    pub fn judge(&mut self, alive: &HashSet<u32>, look: &ProcLook) -> Vec<LateExit> {
        // A pid whose process exited by an event, or left the model, is no longer suspect.
        self.missing_since.retain(|t, _| alive.contains(t));
        let mut found = Vec::new();
        for &tgid in alive {
            if look.known.as_ref().is_some_and(|k| !k.contains(&tgid)) {
                continue;
            }
            let listed = look.pids.contains(&tgid);
            match self.missing_since.get(&tgid).copied() {
                // Missed before and listed now: another process took the pid.
                Some(since) if listed => {
                    self.missing_since.remove(&tgid);
                    found.push(LateExit { tgid, gone_at_ns: since, pid_reused: true });
                }
                Some(since) => {
                    self.missing_since.remove(&tgid);
                    found.push(LateExit { tgid, gone_at_ns: since, pid_reused: false });
                }
                None if listed => {}
                None if look.confirmed => found.push(LateExit { tgid, gone_at_ns: look.at_ns, pid_reused: false }),
                None => {
                    self.missing_since.insert(tgid, look.at_ns);
                }
            }
        }
        found.sort_by_key(|e| e.tgid);
        found
    }

    /// Pids a look missed whose exit is not judged yet.
    pub fn suspects(&self) -> usize {
        self.missing_since.len()
    }
}

/// Whether a process whose `/proc/PID/stat` says `state` is gone: a zombie whose thread group
/// has no other task left (its leader exited and nobody reaped it yet). A leader that called
/// `pthread_exit` is a zombie too, but its group lives on in its other threads
/// (`tasks`: the entries of `/proc/PID/task`).
pub fn zombie_group_gone(state: char, tasks: usize) -> bool {
    state == 'Z' && tasks <= 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(at_ns: u64, pids: &[u32], confirmed: bool) -> ProcLook {
        ProcLook { at_ns, pids: pids.iter().copied().collect(), confirmed, known: None }
    }

    fn set(t: &[u32]) -> HashSet<u32> {
        t.iter().copied().collect()
    }

    #[test]
    fn a_process_missed_twice_exited_when_first_missed() {
        let mut l = Liveness::default();
        assert_eq!(l.judge(&set(&[5, 6]), &look(10, &[5, 6], false)), vec![]);
        assert_eq!(
            l.judge(&set(&[5, 6]), &look(20, &[5], false)),
            vec![],
            "one miss: its exit record may be on its way"
        );
        assert_eq!(l.suspects(), 1);
        assert_eq!(
            l.judge(&set(&[5, 6]), &look(30, &[5], false)),
            vec![LateExit { tgid: 6, gone_at_ns: 20, pid_reused: false }]
        );
        assert_eq!(l.suspects(), 0);
    }

    #[test]
    fn an_exit_event_between_two_looks_clears_the_suspicion() {
        let mut l = Liveness::default();
        assert!(l.judge(&set(&[6]), &look(20, &[], false)).is_empty());
        // Its exit record arrived: the model no longer holds it as alive.
        assert!(l.judge(&set(&[]), &look(30, &[], false)).is_empty());
        assert_eq!(l.suspects(), 0);
        // The pid is used again later by a process the model learns of: not the old one's exit.
        assert!(l.judge(&set(&[6]), &look(40, &[6], false)).is_empty());
    }

    /// A process started between the listing and the drain of the ring (its exec came out of
    /// the ring after /proc was listed) is not missing from that look: judged as a reused pid
    /// at the next one before, it was taken out of the model alive (the insights guest, CI).
    #[test]
    fn a_process_the_model_learnt_of_after_the_listing_is_not_judged_on_it() {
        let mut l = Liveness::default();
        let mut first = look(10, &[5], true);
        first.known = Some(set(&[5]));
        assert!(l.judge(&set(&[5, 9]), &first).is_empty(), "9 came in after the listing");
        assert_eq!(l.suspects(), 0);
        let mut next = look(20, &[5, 9], false);
        next.known = Some(set(&[5, 9]));
        assert!(l.judge(&set(&[5, 9]), &next).is_empty(), "listed: alive, not another process");
        // Known at the next look and missing from it: judged as before.
        let mut gone = look(30, &[5], true);
        gone.known = Some(set(&[5, 9]));
        assert_eq!(l.judge(&set(&[5, 9]), &gone), vec![LateExit { tgid: 9, gone_at_ns: 30, pid_reused: false }]);
    }

    #[test]
    fn a_look_taken_before_the_ring_was_drained_is_final() {
        let mut l = Liveness::default();
        assert_eq!(
            l.judge(&set(&[7, 8]), &look(50, &[8], true)),
            vec![LateExit { tgid: 7, gone_at_ns: 50, pid_reused: false }]
        );
    }

    #[test]
    fn a_pid_listed_again_after_a_miss_is_another_process() {
        let mut l = Liveness::default();
        assert!(l.judge(&set(&[9]), &look(10, &[], false)).is_empty());
        assert_eq!(
            l.judge(&set(&[9]), &look(20, &[9], false)),
            vec![LateExit { tgid: 9, gone_at_ns: 10, pid_reused: true }]
        );
    }

    #[test]
    fn a_pthread_exit_leader_is_not_a_gone_zombie() {
        assert!(zombie_group_gone('Z', 1));
        assert!(zombie_group_gone('Z', 0), "the task directory already empty");
        assert!(!zombie_group_gone('Z', 3), "its threads still run");
        assert!(!zombie_group_gone('S', 1));
        assert!(!zombie_group_gone('R', 1));
    }
}
