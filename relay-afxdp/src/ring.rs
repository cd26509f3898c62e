//! AF_XDP ring arithmetic, kept apart from the mmap so it can be tested without root.
//!
//! A ring has `size` (a power of two) slots and two free-running u32 indices shared with
//! the kernel: the producer advances `producer` after filling slots, the consumer
//! advances `consumer` after reading them. Slot of index `i` is `i & (size - 1)`; both
//! indices wrap at 2^32, so every difference is taken with `wrapping_sub`. The shared
//! indices are read with acquire and written with release ordering ([`Indices`]); each side
//! also caches the other's index to touch the shared cache line only when it must.

use std::sync::atomic::{AtomicU32, Ordering};

/// The two shared indices of a ring, wherever they live (mmap or, in tests, plain memory).
pub trait Indices {
    /// The producer index.
    fn producer(&self) -> &AtomicU32;
    /// The consumer index.
    fn consumer(&self) -> &AtomicU32;
}

/// Plain-memory indices, for tests and models.
#[derive(Debug, Default)]
pub struct LocalIndices {
    /// Producer.
    pub producer: AtomicU32,
    /// Consumer.
    pub consumer: AtomicU32,
}

impl Indices for LocalIndices {
    fn producer(&self) -> &AtomicU32 {
        &self.producer
    }
    fn consumer(&self) -> &AtomicU32 {
        &self.consumer
    }
}

/// Our side of a ring we produce into (fill, TX).
#[derive(Debug)]
pub struct ProducerCursor {
    size: u32,
    local: u32,
    cached_consumer: u32,
}

impl ProducerCursor {
    /// A cursor for a ring of `size` slots whose indices currently read `start`.
    pub fn new(size: u32, start: u32) -> Self {
        assert!(size.is_power_of_two());
        ProducerCursor {
            size,
            local: start,
            cached_consumer: start,
        }
    }

    /// How many slots (up to `want`) can be filled now; refreshes the consumer index only
    /// when the cached one says there is not enough room.
    pub fn reserve(&mut self, idx: &impl Indices, want: u32) -> u32 {
        let mut free = self.size - self.local.wrapping_sub(self.cached_consumer);
        if free < want {
            self.cached_consumer = idx.consumer().load(Ordering::Acquire);
            free = self.size - self.local.wrapping_sub(self.cached_consumer);
        }
        free.min(want)
    }

    /// The slot of the `n`-th reserved entry.
    pub fn slot(&self, n: u32) -> usize {
        (self.local.wrapping_add(n) & (self.size - 1)) as usize
    }

    /// Slots published and not yet consumed (reads the consumer index).
    pub fn pending(&self, idx: &impl Indices) -> u32 {
        self.local
            .wrapping_sub(idx.consumer().load(Ordering::Acquire))
            .min(self.size)
    }

    /// Publishes `n` filled slots.
    pub fn submit(&mut self, idx: &impl Indices, n: u32) {
        self.local = self.local.wrapping_add(n);
        idx.producer().store(self.local, Ordering::Release);
    }
}

/// Our side of a ring we consume from (RX, completion).
#[derive(Debug)]
pub struct ConsumerCursor {
    size: u32,
    local: u32,
    cached_producer: u32,
}

impl ConsumerCursor {
    /// A cursor for a ring of `size` slots whose indices currently read `start`.
    pub fn new(size: u32, start: u32) -> Self {
        assert!(size.is_power_of_two());
        ConsumerCursor {
            size,
            local: start,
            cached_producer: start,
        }
    }

    /// How many entries (up to `max`) are ready.
    pub fn peek(&mut self, idx: &impl Indices, max: u32) -> u32 {
        let mut ready = self.cached_producer.wrapping_sub(self.local);
        if ready == 0 {
            self.cached_producer = idx.producer().load(Ordering::Acquire);
            ready = self.cached_producer.wrapping_sub(self.local);
        }
        ready.min(max)
    }

    /// The slot of the `n`-th ready entry.
    pub fn slot(&self, n: u32) -> usize {
        (self.local.wrapping_add(n) & (self.size - 1)) as usize
    }

    /// Gives `n` read entries back to the producer.
    pub fn release(&mut self, idx: &impl Indices, n: u32) {
        self.local = self.local.wrapping_add(n);
        idx.consumer().store(self.local, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model: a bounded FIFO through a ring of `size` slots, from a random starting
    /// index (so the u32 wrap is crossed), with random batch sizes on both sides.
    fn model(size: u32, start: u32, steps: &[(u8, u8)]) {
        let idx = LocalIndices::default();
        idx.producer.store(start, Ordering::Relaxed);
        idx.consumer.store(start, Ordering::Relaxed);
        let mut slots = vec![0u64; size as usize];
        let mut p = ProducerCursor::new(size, start);
        let mut c = ConsumerCursor::new(size, start);
        let (mut next_in, mut next_out) = (0u64, 0u64);
        for &(put, take) in steps {
            let n = p.reserve(&idx, u32::from(put));
            assert!(
                next_in - next_out + u64::from(n) <= u64::from(size),
                "never overfills"
            );
            for k in 0..n {
                slots[p.slot(k)] = next_in;
                next_in += 1;
            }
            p.submit(&idx, n);
            let m = c.peek(&idx, u32::from(take));
            for k in 0..m {
                assert_eq!(slots[c.slot(k)], next_out, "FIFO order");
                next_out += 1;
            }
            c.release(&idx, m);
            // Whatever is left is exactly what the producer published and the consumer
            // has not taken.
            let in_flight = idx
                .producer
                .load(Ordering::Relaxed)
                .wrapping_sub(idx.consumer.load(Ordering::Relaxed));
            assert_eq!(u64::from(in_flight), next_in - next_out);
        }
    }

    #[test]
    fn fifo_across_the_u32_wrap() {
        let steps: Vec<(u8, u8)> = (0..2000)
            .map(|i| ((i * 7 % 13) as u8, (i * 5 % 11) as u8))
            .collect();
        for start in [0, u32::MAX - 3, u32::MAX - 100, 1 << 31] {
            model(8, start, &steps);
            model(64, start, &steps);
        }
    }

    proptest::proptest! {
        #[test]
        fn fifo_model(start in proptest::prelude::any::<u32>(), log2 in 1u32..8, steps in proptest::collection::vec((0u8..40, 0u8..40), 1..300)) {
            model(1 << log2, start, &steps);
        }
    }

    #[test]
    fn a_full_ring_reserves_nothing_until_the_consumer_moves() {
        let idx = LocalIndices::default();
        let mut p = ProducerCursor::new(4, 0);
        assert_eq!(p.reserve(&idx, 10), 4);
        p.submit(&idx, 4);
        assert_eq!(p.reserve(&idx, 1), 0);
        idx.consumer.store(3, Ordering::Release);
        assert_eq!(p.reserve(&idx, 10), 3);
    }
}
