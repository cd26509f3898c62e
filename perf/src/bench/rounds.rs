//! Interleaved rounds, the one way the suite puts setups side by side: every setup once per
//! round, in an order that changes from round to round (shuffled from a seed, or rotating),
//! so that drift in the host's speed falls on every setup alike and a round's ratios
//! compare setups measured minutes apart at most. `perf compare` and `perf model` both
//! walk their rounds with [`Rounds`].

use std::time::Duration;

/// A small, seeded generator for the rounds' orders (xorshift64*): the order is in the
/// report, and `--seed` repeats it.
#[derive(Clone, Debug)]
pub struct Shuffler(u64);

impl Shuffler {
    /// Seeded with `seed` (0 is replaced: xorshift has no zero state).
    pub fn new(seed: u64) -> Shuffler {
        Shuffler(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// `items` in a random order (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}

/// How the setups are ordered within each round.
#[derive(Clone, Debug)]
pub enum Order {
    /// A new random order each round, drawn from the seeded generator.
    Shuffled(Shuffler),
    /// The run's `i`-th round (from 0) starts with setup `i` (modulo the setups) and goes
    /// on in index order: no setup is always first, and a short run still gives each
    /// setup each place.
    Rotating,
}

/// One setup's turn in one round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    /// The round's number: the run's first round is numbered as [`Rounds::new`] is told.
    pub round: usize,
    /// The round's index in this run, from 0.
    pub index: usize,
    /// The last round's number.
    pub last_round: usize,
    /// This turn's place in its round, from 1.
    pub position: usize,
    /// The setup's index in the list the rounds were made for.
    pub setup: usize,
    /// Turns taken before this one.
    pub done: usize,
    /// Turns in all.
    pub steps: usize,
    /// Whether this is its round's last turn.
    pub ends_round: bool,
}

/// The turns of `count` rounds of `setups` setups, in order: every setup once per round.
#[derive(Clone, Debug)]
pub struct Rounds {
    first: usize,
    count: usize,
    setups: usize,
    order: Order,
    /// The current round's order, and the next turn's index in it.
    current: Vec<usize>,
    next: usize,
    /// Rounds begun.
    begun: usize,
}

impl Rounds {
    /// `count` rounds numbered from `first`, of `setups` setups ordered by `order`.
    pub fn new(first: usize, count: usize, setups: usize, order: Order) -> Rounds {
        Rounds {
            first,
            count,
            setups,
            order,
            current: Vec::new(),
            next: 0,
            begun: 0,
        }
    }
}

impl Iterator for Rounds {
    type Item = Turn;

    fn next(&mut self) -> Option<Turn> {
        if self.setups == 0 {
            return None;
        }
        if self.next == self.current.len() {
            if self.begun == self.count {
                return None;
            }
            let round = self.begun;
            self.current = (0..self.setups).collect();
            match &mut self.order {
                Order::Shuffled(shuffler) => shuffler.shuffle(&mut self.current),
                Order::Rotating => self.current.rotate_left(round % self.setups),
            }
            self.next = 0;
            self.begun += 1;
        }
        let position = self.next;
        self.next += 1;
        Some(Turn {
            round: self.first + self.begun - 1,
            index: self.begun - 1,
            last_round: self.first + self.count - 1,
            position: position + 1,
            setup: self.current[position],
            done: (self.begun - 1) * self.setups + position,
            steps: self.count * self.setups,
            ends_round: position + 1 == self.setups,
        })
    }
}

/// ", about N min left" after `done` of `steps` equal steps took `elapsed` (nothing
/// before the first is done).
pub fn eta(elapsed: Duration, done: usize, steps: usize) -> String {
    if done == 0 {
        return String::new();
    }
    let left = elapsed.as_secs_f64() / done as f64 * steps.saturating_sub(done) as f64;
    format!(", about {:.0} min left", (left / 60.0).ceil())
}

/// A seed from the clock, for a run that names none.
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shuffle_is_a_permutation_and_the_seed_repeats_it() {
        let mut a: Vec<u32> = (0..8).collect();
        let mut b = a.clone();
        Shuffler::new(42).shuffle(&mut a);
        Shuffler::new(42).shuffle(&mut b);
        assert_eq!(a, b);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn over_many_rounds_every_setup_takes_every_place() {
        let mut seen = [[0u32; 4]; 4];
        for turn in Rounds::new(1, 400, 4, Order::Shuffled(Shuffler::new(7))) {
            seen[turn.setup][turn.position - 1] += 1;
        }
        for row in seen {
            for count in row {
                assert!((60..=140).contains(&count), "{seen:?}");
            }
        }
    }

    #[test]
    fn every_round_has_every_setup_once_and_the_turns_count_up() {
        let turns: Vec<Turn> = Rounds::new(3, 2, 3, Order::Shuffled(Shuffler::new(9))).collect();
        assert_eq!(turns.len(), 6);
        for (i, turn) in turns.iter().enumerate() {
            assert_eq!((turn.done, turn.steps, turn.last_round), (i, 6, 4));
            assert_eq!((turn.round, turn.index), (3 + i / 3, i / 3));
            assert_eq!(turn.ends_round, i % 3 == 2);
        }
        for round in turns.chunks(3) {
            let mut setups: Vec<usize> = round.iter().map(|t| t.setup).collect();
            setups.sort_unstable();
            assert_eq!(setups, [0, 1, 2]);
        }
        // The same seed shuffles indices as it shuffled the setups themselves.
        let mut direct = vec!["a", "b", "c"];
        Shuffler::new(9).shuffle(&mut direct);
        let first: Vec<&str> = turns[..3]
            .iter()
            .map(|t| ["a", "b", "c"][t.setup])
            .collect();
        assert_eq!(first, direct);
    }

    #[test]
    fn rotating_rounds_put_each_setup_first_in_turn() {
        let orders: Vec<Vec<usize>> = Rounds::new(1, 6, 3, Order::Rotating)
            .collect::<Vec<_>>()
            .chunks(3)
            .map(|round| round.iter().map(|t| t.setup).collect())
            .collect();
        assert_eq!(orders[0], [0, 1, 2]);
        assert_eq!(orders[1], [1, 2, 0]);
        assert_eq!(orders[5], [2, 0, 1]);
        assert_eq!(Rounds::new(1, 3, 0, Order::Rotating).count(), 0);
    }
}
