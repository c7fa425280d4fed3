//! Where the agent's background work runs: unwinding and naming stacks (the site reader and
//! namer: the agent's heaviest user-space work) go to the idle scheduling class (`SCHED_IDLE`), so that on a node
//! whose training ranks keep every core busy that work waits for an idle moment instead of
//! taking a time slice from a rank's thread (a rank's CPU phases wait for their slowest thread,
//! so one preempted thread slows the whole step). The cost: on such a node those threads fall
//! behind, and what they could not take in time is counted (the sample rings' `*_ring_full`),
//! never taken from the job. `[collect] work_class = "normal"` keeps them in the normal class, as
//! `snapshot`, `record` and `top` do by default (`model/work_class.rs` says why).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use crate::model::work_class::WorkClass;

static NORMAL: AtomicBool = AtomicBool::new(false);
/// Background threads that could not be moved to the idle class (they run in the normal one).
static NOT_MOVED: AtomicU64 = AtomicU64::new(0);

/// Sets the class for background threads started from now on (set before the session starts).
pub fn set(class: WorkClass) {
    NORMAL.store(class == WorkClass::Normal, Ordering::Relaxed);
}

/// The class background threads get.
pub fn current() -> WorkClass {
    if NORMAL.load(Ordering::Relaxed) {
        WorkClass::Normal
    } else {
        WorkClass::Idle
    }
}

/// Background threads left in the normal class because the kernel refused the idle one.
pub fn not_moved() -> u64 {
    NOT_MOVED.load(Ordering::Relaxed)
}

/// Called first thing on a background thread: moves the calling thread (only it: Linux
/// schedules threads, and tid 0 is the caller) to the idle class unless asked not to.
pub fn enter_background() {
    if current() == WorkClass::Normal {
        return;
    }
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a valid sched_param; pid 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        NOT_MOVED.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            "could not move a background thread to SCHED_IDLE ({}); it runs in the normal class",
            std::io::Error::last_os_error()
        );
    }
}

/// The calling thread's scheduling policy (for tests and `check`).
pub fn policy_of_current_thread() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::sched_getscheduler(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_background_thread_runs_in_the_idle_class_and_the_caller_keeps_its_own() {
        let before = policy_of_current_thread();
        let on_thread = std::thread::spawn(|| {
            enter_background();
            policy_of_current_thread()
        })
        .join()
        .expect("thread");
        // Any user may lower a thread to SCHED_IDLE (no capability needed).
        assert_eq!(on_thread, libc::SCHED_IDLE, "the background thread's policy");
        assert_eq!(policy_of_current_thread(), before, "only the calling thread moved");
    }
}
