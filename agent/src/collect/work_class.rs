//! Where the agent's background work runs: unwinding and naming stacks (the site reader and
//! namer: the agent's heaviest user-space work) run at nice 19 in `run` (`WorkClass::Low`), so
//! that on a node whose training ranks keep every core busy that work mostly waits for an idle
//! moment instead of taking a time slice from a rank's thread (a rank's CPU phases wait for their
//! slowest thread, so one preempted thread slows the whole step), yet still keeps up (~1.5% of a
//! busy CPU). `[collect] work_class = "normal"` keeps them at the agent's own priority, as
//! `snapshot`, `record` and `top` do by default (`model/work_class.rs` says why).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use crate::model::work_class::{WorkClass, LOW_NICE};

static NORMAL: AtomicBool = AtomicBool::new(false);
/// Background threads whose priority could not be lowered (they run at the agent's own).
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
        WorkClass::Low
    }
}

/// Background threads left at the agent's priority because the kernel refused the lower one.
pub fn not_moved() -> u64 {
    NOT_MOVED.load(Ordering::Relaxed)
}

/// Called first thing on a background thread: lowers the calling thread (only it: Linux sets a
/// nice value per thread, by its tid) to nice 19 unless asked not to.
pub fn enter_background() {
    if current() == WorkClass::Normal {
        return;
    }
    // SAFETY: no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: plain integers; PRIO_PROCESS with a tid names that one thread.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, LOW_NICE) } != 0 {
        NOT_MOVED.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            "could not lower a background thread to nice {LOW_NICE} ({}); it runs at the agent's priority",
            std::io::Error::last_os_error()
        );
    }
}

/// The calling thread's nice value (for tests).
pub fn nice_of_current_thread() -> i32 {
    // SAFETY: no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: plain integers.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_background_thread_runs_at_nice_19_and_the_caller_keeps_its_own() {
        let before = nice_of_current_thread();
        let on_thread = std::thread::spawn(|| {
            enter_background();
            nice_of_current_thread()
        })
        .join()
        .expect("thread");
        // Any user may lower a thread's priority (no capability needed).
        assert_eq!(on_thread, LOW_NICE, "the background thread's nice");
        assert_eq!(nice_of_current_thread(), before, "only the calling thread moved");
    }
}
