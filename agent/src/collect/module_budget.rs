//! One byte budget for everything the agent holds of other processes' files (issue 41).
//!
//! A library another user controls can claim a symbol or unwind table of hundreds of MiB (a
//! sparse file costs its owner nothing). Every table the agent keeps from such a file (the
//! functions of a symbol table, a held string table, an unwind section) first reserves its
//! bytes here; a table that does not fit is refused before anything is read, and counted, so
//! what the agent holds of module files stays under [`MODULE_BUDGET`] however many files, and
//! however large, it is shown. What is only passed through (a chunk of a table read in a
//! stream) is bounded by its own read size, not reserved.
use std::sync::atomic::{AtomicU64, Ordering};

/// The bytes of module files the agent holds at once, all tables together: well under the
/// 256 MiB memory limit of the DaemonSet (deploy/), with room for the rest of the agent; a
/// large C++ library's functions (24 bytes each, its string table over 4 MiB left in the file)
/// and unwind tables fit.
pub const MODULE_BUDGET: u64 = 96 << 20;

/// A byte budget: what is held against it, at most its limit.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    held: AtomicU64,
    peak: AtomicU64,
    refused: AtomicU64,
}

/// What a budget holds now, at most ever, and how many reservations it refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetFigures {
    pub limit: u64,
    pub held: u64,
    pub peak: u64,
    pub refused: u64,
}

static GLOBAL: Budget = Budget::new(MODULE_BUDGET);

/// The agent's budget for module files.
pub fn global() -> &'static Budget {
    &GLOBAL
}

impl Budget {
    pub const fn new(limit: u64) -> Budget {
        Budget { limit, held: AtomicU64::new(0), peak: AtomicU64::new(0), refused: AtomicU64::new(0) }
    }

    /// Reserves `bytes`, or `None` (counted) when they do not fit beside what is held.
    pub fn reserve(&'static self, bytes: u64) -> Option<Reservation> {
        self.take(bytes).then(|| Reservation { budget: self, bytes })
    }

    fn take(&self, bytes: u64) -> bool {
        let got = self.held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            held.checked_add(bytes).filter(|&total| total <= self.limit)
        });
        match got {
            Ok(before) => {
                self.peak.fetch_max(before + bytes, Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Counts a table refused for another bound (one a lookup streams through, too long to
    /// read), with those that did not fit.
    pub fn count_refusal(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    pub fn figures(&self) -> BudgetFigures {
        BudgetFigures {
            limit: self.limit,
            held: self.held.load(Ordering::Relaxed),
            peak: self.peak.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }
}

/// Bytes held against a budget, given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: &'static Budget,
    bytes: u64,
}

impl Reservation {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Gives back what is reserved beyond `bytes` (a table found smaller than its bound).
    pub fn shrink_to(&mut self, bytes: u64) {
        if bytes < self.bytes {
            self.budget.held.fetch_sub(self.bytes - bytes, Ordering::AcqRel);
            self.bytes = bytes;
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_fit_under_the_limit_and_are_given_back() {
        static B: Budget = Budget::new(100);
        let mut a = B.reserve(60).expect("60 of 100");
        assert!(B.reserve(41).is_none(), "60 + 41 is over 100");
        let b = B.reserve(40).expect("60 + 40 fits");
        assert_eq!(B.figures(), BudgetFigures { limit: 100, held: 100, peak: 100, refused: 1 });
        a.shrink_to(10);
        assert_eq!(a.bytes(), 10);
        a.shrink_to(50);
        assert_eq!(a.bytes(), 10, "shrinking never grows");
        assert_eq!(B.figures().held, 50);
        drop(b);
        drop(a);
        assert_eq!(B.figures(), BudgetFigures { limit: 100, held: 0, peak: 100, refused: 1 });
        assert!(B.reserve(u64::MAX).is_none(), "no overflow");
        assert!(B.reserve(101).is_none());
        assert_eq!(B.figures().refused, 3);
    }
}
