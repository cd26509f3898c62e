//! What waking a thread on another core costs on this host right now: the price of each
//! cross-core hop in a datagram's path (an RPS hand-off, a sleeping forwarder woken), and
//! on a VM a reading of the hypervisor's state, which moves the forwarders' figures from
//! one run to the next. Measured as a ping-pong of two pinned threads that sleep between
//! turns (a datagram each way on a socket pair, as a forwarder asleep on its socket is woken).

use std::os::unix::net::UnixDatagram;
use std::thread;
use std::time::{Duration, Instant};

/// Round trips a reading takes: about 0.1–0.3 s on a VM, a few ms on bare metal.
pub const ROUND_TRIPS: u32 = 2_000;

/// One reading: round trips between two threads, each woken by the other, in µs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WakeCost {
    /// The CPUs of the two threads.
    pub cpus: (usize, usize),
    /// Round trips measured.
    pub round_trips: u32,
    /// Median round trip (two wake-ups), µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
}

/// How long a round trip may wait for the other thread before the reading is abandoned
/// (a CPU that is offline or refuses the pin never answers).
const TURN_TIMEOUT: Duration = Duration::from_secs(1);

/// Measures `round_trips` wake-up round trips between a thread on `cpu_a` and one on
/// `cpu_b` (the same CPU gives the cost of two context switches with no interrupt between
/// cores). `None` when a thread cannot be pinned or the other thread stops answering.
/// Both threads are its own: the caller's affinity is left as it was.
pub fn round_trip(cpu_a: usize, cpu_b: usize, round_trips: u32) -> Option<WakeCost> {
    thread::Builder::new()
        .name("wake-a".into())
        .spawn(move || ping_pong(cpu_a, cpu_b, round_trips))
        .ok()?
        .join()
        .ok()?
}

/// [`round_trip`] from the calling thread, which it pins to `cpu_a`. The turn passes as
/// a one-byte datagram on a socket pair: a blocking receive always sleeps in the kernel
/// until the other thread's send wakes it, as a forwarder sleeping on its socket is
/// woken, and never spins.
fn ping_pong(cpu_a: usize, cpu_b: usize, round_trips: u32) -> Option<WakeCost> {
    let (a, b) = UnixDatagram::pair().ok()?;
    for end in [&a, &b] {
        end.set_read_timeout(Some(TURN_TIMEOUT)).ok()?;
    }
    let b_side = thread::Builder::new()
        .name("wake-b".into())
        .spawn(move || {
            if !ufrag_common::runtime::lifecycle::pin_current_thread(cpu_b) {
                let _ = b.send(&[]); // an empty datagram: giving up
                return false;
            }
            let mut turn = [0u8; 1];
            (0..round_trips).all(|_| matches!(b.recv(&mut turn), Ok(1)) && b.send(&turn).is_ok())
        })
        .ok()?;
    let mut samples = Vec::with_capacity(round_trips as usize);
    if ufrag_common::runtime::lifecycle::pin_current_thread(cpu_a) {
        let mut turn = [0u8; 1];
        for _ in 0..round_trips {
            let started = Instant::now();
            if a.send(&turn).is_err() || !matches!(a.recv(&mut turn), Ok(1)) {
                break;
            }
            samples.push(started.elapsed());
        }
    }
    if samples.len() != round_trips as usize {
        // B may be waiting for a turn: tell it there is none.
        let _ = a.send(&[]);
    }
    let b_ok = b_side.join().unwrap_or(false);
    if !b_ok || samples.len() != round_trips as usize || samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let at = |q: f64| {
        let index = ((samples.len() - 1) as f64 * q).round() as usize;
        samples[index].as_secs_f64() * 1e6
    };
    Some(WakeCost {
        cpus: (cpu_a, cpu_b),
        round_trips,
        p50_us: at(0.5),
        p99_us: at(0.99),
    })
}

/// A reading's median and p99 as the reports print them: "55 µs (p99 98)".
pub fn label(p50_us: f64, p99_us: f64) -> String {
    format!("{p50_us:.0} µs (p99 {p99_us:.0})")
}

impl WakeCost {
    /// "55 µs (p99 98)", as the reports print it.
    pub fn label(&self) -> String {
        label(self.p50_us, self.p99_us)
    }

    /// The JSON the reports carry.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "cpus": [self.cpus.0, self.cpus.1],
            "round_trips": self.round_trips,
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_counts_every_round_trip_and_orders_its_quantiles() {
        let last_cpu = thread::available_parallelism().map_or(1, |n| n.get()) - 1;
        let cost = round_trip(0, last_cpu, 200).expect("both threads pinned and answering");
        assert_eq!(cost.round_trips, 200);
        assert_eq!(cost.cpus, (0, last_cpu));
        assert!(cost.p50_us > 0.0, "{cost:?}");
        assert!(cost.p99_us >= cost.p50_us, "{cost:?}");
    }

    #[test]
    fn a_cpu_that_does_not_exist_gives_no_reading_and_no_stuck_thread() {
        assert_eq!(round_trip(0, 4096, 10), None);
        assert_eq!(round_trip(0, 1000, 10), None);
        assert_eq!(round_trip(4096, 0, 10), None);
    }
}
