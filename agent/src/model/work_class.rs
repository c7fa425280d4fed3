//! The scheduling class of the agent's background threads (`[collect] work_class`,
//! `--work-class`); `collect/work_class.rs` applies it. Pure.

/// The scheduling class of the agent's background threads. `run` (the agent that watches a node
/// for hours) defaults to idle; `snapshot`, `record` and `top` to normal: a window that ends must
/// have its samples read by then, and an idle thread on a node whose every core is busy may not
/// run at all before it ends (seen: a 10-s `record` of a busy loop on a loaded 2-core host read
/// none of its 30 delivered samples).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WorkClass {
    /// `SCHED_IDLE`: runs only where no normal thread wants the CPU (`run`'s default).
    #[default]
    Idle,
    /// The normal class, as the rest of the agent.
    Normal,
}

impl std::str::FromStr for WorkClass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "idle" => Ok(WorkClass::Idle),
            "normal" => Ok(WorkClass::Normal),
            other => Err(format!("{other:?} is not a work class: use \"idle\" (the default) or \"normal\"")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_parses_and_says_what_is_allowed() {
        assert_eq!("idle".parse::<WorkClass>(), Ok(WorkClass::Idle));
        assert_eq!("normal".parse::<WorkClass>(), Ok(WorkClass::Normal));
        let e = "low".parse::<WorkClass>().unwrap_err();
        assert!(e.contains("\"idle\"") && e.contains("\"normal\""), "{e}");
    }
}
