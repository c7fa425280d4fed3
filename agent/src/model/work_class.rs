//! The scheduling class of the agent's background threads (`[collect] work_class`,
//! `--work-class`); `collect/work_class.rs` applies it. Pure.

/// The scheduling class of the agent's background threads. `run` (the agent that watches a node
/// for hours) defaults to low; `snapshot`, `record` and `top` to normal: a window that ends must
/// have its samples read by then. Not `SCHED_IDLE`: an idle-class thread on a node whose every
/// core is busy may not run at all (seen in CI on a loaded 2-core host: an idle reader read none
/// of a 10-s `record`'s 30 delivered samples, and `run`'s never looked at a library in 120 s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WorkClass {
    /// Nice 19, the lowest weight of the normal class (`run`'s default): on a CPU a rank's thread
    /// keeps busy it gets about 1.5% of the time, and a wake-up does not preempt the rank's
    /// thread; where a CPU is idle it runs at once.
    #[default]
    Low,
    /// The normal class at the agent's own nice, as the rest of the agent.
    Normal,
}

/// The nice value of the low class.
pub const LOW_NICE: i32 = 19;

impl std::str::FromStr for WorkClass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "low" => Ok(WorkClass::Low),
            "normal" => Ok(WorkClass::Normal),
            other => Err(format!("{other:?} is not a work class: use \"low\" (nice 19, run's default) or \"normal\"")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_parses_and_says_what_is_allowed() {
        assert_eq!("low".parse::<WorkClass>(), Ok(WorkClass::Low));
        assert_eq!("normal".parse::<WorkClass>(), Ok(WorkClass::Normal));
        let e = "idle".parse::<WorkClass>().unwrap_err();
        assert!(e.contains("\"low\"") && e.contains("\"normal\""), "{e}");
    }
}
