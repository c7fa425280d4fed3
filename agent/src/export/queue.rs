//! The bounded queue between collection and the OTLP exporter, and the retry backoff. Pure:
//! time is passed in, so the policy is unit tested without a receiver.
use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

/// Batches waiting to be sent, oldest first. When full, the oldest batch is dropped and counted:
/// with cumulative temporality a later batch carries every count, so only time resolution is lost.
#[derive(Debug)]
pub struct ExportQueue<T> {
    items: VecDeque<T>,
    capacity: usize,
    dropped: u64,
}

impl<T> ExportQueue<T> {
    /// `capacity` is at least 1.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        ExportQueue { items: VecDeque::with_capacity(capacity), capacity, dropped: 0 }
    }

    /// Whether the next [`push`](Self::push) drops the oldest batch.
    pub fn is_full(&self) -> bool {
        self.items.len() >= self.capacity
    }

    /// Appends a batch; returns the oldest one if it had to make room.
    pub fn push(&mut self, item: T) -> Option<T> {
        let dropped = if self.is_full() { self.drop_oldest() } else { None };
        self.items.push_back(item);
        dropped
    }

    /// Drops the oldest batch (counted).
    pub fn drop_oldest(&mut self) -> Option<T> {
        let d = self.items.pop_front();
        if d.is_some() {
            self.dropped += 1;
        }
        d
    }

    /// Takes the oldest batch to send it.
    pub fn pop(&mut self) -> Option<T> {
        self.items.pop_front()
    }

    /// Puts back a batch whose send failed, at the front (it is still the oldest). If newer
    /// batches filled the queue meanwhile, the returned batch is dropped and counted instead.
    pub fn requeue(&mut self, item: T) {
        if self.is_full() {
            self.dropped += 1;
        } else {
            self.items.push_front(item);
        }
    }

    /// Counts a batch given up on for another reason (the receiver rejected it).
    pub fn count_dropped(&mut self) {
        self.dropped += 1;
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Batches dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// Exponential backoff between failed sends: `initial`, doubling, capped at `max`; reset by a
/// success.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    delay: Option<Duration>,
    not_before: Option<Instant>,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff { initial, max: max.max(initial), delay: None, not_before: None }
    }

    /// Whether a send may be attempted at `now`.
    pub fn ready(&self, now: Instant) -> bool {
        self.not_before.is_none_or(|t| now >= t)
    }

    /// When the next attempt is allowed, if a failure is being backed off.
    pub fn not_before(&self) -> Option<Instant> {
        self.not_before
    }

    /// Records a failed attempt at `now`; returns the wait before the next one.
    pub fn failed(&mut self, now: Instant) -> Duration {
        let d = match self.delay {
            None => self.initial,
            Some(d) => d.saturating_mul(2).min(self.max),
        };
        self.delay = Some(d);
        self.not_before = Some(now + d);
        d
    }

    pub fn succeeded(&mut self) {
        self.delay = None;
        self.not_before = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_the_oldest_and_counts_it() {
        let mut q = ExportQueue::new(3);
        for i in 1..=3 {
            assert_eq!(q.push(i), None);
        }
        assert!(q.is_full());
        assert_eq!(q.push(4), Some(1));
        assert_eq!(q.push(5), Some(2));
        assert_eq!(q.dropped(), 2);
        assert_eq!(q.pop(), Some(3));
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn a_failed_batch_goes_back_in_front_unless_newer_ones_filled_the_queue() {
        let mut q = ExportQueue::new(2);
        q.push(1);
        q.push(2);
        let b = q.pop().unwrap();
        q.requeue(b);
        assert_eq!(q.pop(), Some(1), "still the oldest, sent first");
        q.push(3);
        // Queue [2, 3] is full: the failed batch 1 is the one given up.
        q.requeue(1);
        assert_eq!(q.dropped(), 1);
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(), Some(2));
    }

    #[test]
    fn zero_capacity_means_one() {
        let mut q = ExportQueue::new(0);
        assert_eq!(q.push('a'), None);
        assert_eq!(q.push('b'), Some('a'));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets_on_success() {
        let t0 = Instant::now();
        let mut b = Backoff::new(Duration::from_millis(500), Duration::from_secs(3));
        assert!(b.ready(t0));
        let waits: Vec<u64> = (0..5).map(|_| b.failed(t0).as_millis() as u64).collect();
        assert_eq!(waits, vec![500, 1000, 2000, 3000, 3000]);
        assert!(!b.ready(t0 + Duration::from_millis(2999)));
        assert!(b.ready(t0 + Duration::from_secs(3)));
        b.succeeded();
        assert!(b.ready(t0));
        assert_eq!(b.failed(t0), Duration::from_millis(500));
    }
}
