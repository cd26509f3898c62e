//! The model's audio for one session, played out at real time. A backend may send speech
//! faster than real time (a TTS engine does); the session keeps it in a bounded queue
//! and plays a backlog at one 20 ms frame per 20 ms, each frame at its slot counted from
//! the first, so a late wake-up never adds up to drift. A frame that finds the queue
//! empty plays at once unless the last one played less than [`MIN_GAP`] ago: a backend
//! that paces itself (or the echo) gets its frames out as they come, give or take its
//! own jitter (so one sending at up to 1.11× real time is not held back), and frames
//! follow each other closer than [`MIN_GAP`] only when a late wake-up catches up one.
//! `clear` drops
//! everything queued (barge-in: the user started speaking); a mark is reported when
//! playback reaches the point where it was set.
//!
//! Sans-IO: time is passed in, and the session writes each frame [`Playout::due`] gives.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ufrag_model_protocol::messages::{AudioFrame, MAX_MARKS};

/// One Opus frame's duration, the pace of playback.
pub const FRAME: Duration = Duration::from_millis(20);
/// The least time between two frames played: a frame less early than this is a
/// self-paced backend's jitter (or its clock running a little fast), not speech sent
/// ahead, and is played without waiting for its full slot.
pub const MIN_GAP: Duration = Duration::from_millis(18);
/// The playout buffer a session keeps by default: 10 s of speech (500 frames; at most
/// about 650 KB with the largest Opus frames, about 50 KB with a voice's usual ones).
pub const DEFAULT_BUFFER: Duration = Duration::from_secs(10);

/// A frame or mark the queue had no room for: the newest is refused, what is queued
/// plays on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// The buffer held its capacity in frames: the new frame was dropped.
    Frames,
    /// [`MAX_MARKS`] marks were waiting: the new mark was dropped.
    Marks,
}

/// What [`Playout::clear`] dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleared {
    /// Frames that were queued.
    pub frames: usize,
    /// Marks that will never be reached, oldest first.
    pub marks: Vec<String>,
}

/// One session's playout queue.
#[derive(Debug)]
pub struct Playout {
    frames: VecDeque<AudioFrame>,
    capacity: usize,
    /// When the head frame plays; `None` while nothing waits.
    next_slot: Option<Instant>,
    /// When the last frame was played.
    last_played: Option<Instant>,
    /// Marks, each with the count of frames played when it is reached.
    marks: VecDeque<(u64, String)>,
    /// Marks reached and not yet taken by [`Playout::reached_mark`].
    reached: VecDeque<String>,
    /// Frames played, and frames accepted (the queue's end), since the session began.
    played: u64,
    accepted: u64,
}

impl Playout {
    /// A queue holding up to `buffer` of audio (at least one frame).
    pub fn new(buffer: Duration) -> Self {
        let capacity = (buffer.as_millis() / FRAME.as_millis()).max(1) as usize;
        Playout {
            frames: VecDeque::new(),
            capacity,
            next_slot: None,
            last_played: None,
            marks: VecDeque::new(),
            reached: VecDeque::new(),
            played: 0,
            accepted: 0,
        }
    }

    /// Queues `frame`, arriving at `now`. A frame that finds the queue empty plays at
    /// once, or [`MIN_GAP`] after the last one played if that is later.
    pub fn push(&mut self, now: Instant, frame: AudioFrame) -> Result<(), Overflow> {
        if self.frames.len() >= self.capacity {
            return Err(Overflow::Frames);
        }
        if self.frames.is_empty() {
            self.next_slot = Some(self.last_played.map_or(now, |last| now.max(last + MIN_GAP)));
        }
        self.frames.push_back(frame);
        self.accepted += 1;
        Ok(())
    }

    /// The next frame to play at `now`, if one is due; call until `None`. A worker that
    /// woke up to a frame late catches up that frame; one later than that plays one
    /// frame and starts its cadence again from `now`, rather than playing what it missed
    /// in a burst.
    pub fn due(&mut self, now: Instant) -> Option<AudioFrame> {
        let slot = self.next_slot.filter(|slot| *slot <= now)?;
        let frame = self.frames.pop_front()?;
        self.last_played = Some(now);
        self.played += 1;
        while self.marks.front().is_some_and(|(at, _)| *at <= self.played) {
            let (_, name) = self.marks.pop_front().expect("a front mark");
            self.reached.push_back(name);
        }
        self.next_slot = (!self.frames.is_empty()).then(|| {
            let next = slot + FRAME;
            if next + FRAME < now {
                now + FRAME
            } else {
                next
            }
        });
        Some(frame)
    }

    /// When the next frame plays, if any waits.
    pub fn next_due(&self) -> Option<Instant> {
        self.next_slot
    }

    /// Sets a mark after the last frame queued: reached when that frame has played, at
    /// once if nothing waits (then [`Playout::reached_mark`] has it).
    pub fn mark(&mut self, name: String) -> Result<(), Overflow> {
        if self.frames.is_empty() {
            self.reached.push_back(name);
            return Ok(());
        }
        if self.marks.len() >= MAX_MARKS {
            return Err(Overflow::Marks);
        }
        self.marks.push_back((self.accepted, name));
        Ok(())
    }

    /// A mark playback has reached, oldest first.
    pub fn reached_mark(&mut self) -> Option<String> {
        self.reached.pop_front()
    }

    /// Drops everything queued, frames and marks not yet reached. The next frame still
    /// plays no sooner than [`MIN_GAP`] after the last one played.
    pub fn clear(&mut self) -> Cleared {
        let cleared = Cleared {
            frames: self.frames.len(),
            marks: self.marks.drain(..).map(|(_, name)| name).collect(),
        };
        self.frames.clear();
        self.next_slot = None;
        self.accepted = self.played;
        cleared
    }

    /// Frames waiting.
    pub fn queued(&self) -> usize {
        self.frames.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model protocol's page states the buffer and the gap the transceiver keeps
    /// (the page's other limits are checked by the protocol crate's codec tests).
    #[test]
    fn the_model_protocol_page_states_the_playout_buffer_and_gap() {
        const SPECIFICATION: &str = include_str!("../../docs/model-protocol.md");
        let buffer = DEFAULT_BUFFER.as_secs();
        assert!(SPECIFICATION.contains(&format!("`--playout-buffer`, {buffer} s")));
        assert!(SPECIFICATION.contains(&format!(
            "{} ms after the last one played",
            MIN_GAP.as_millis()
        )));
    }

    fn frame(n: u16) -> AudioFrame {
        AudioFrame {
            seq: n,
            timestamp: u32::from(n) * 960,
            payload: vec![0xf8],
        }
    }

    /// Plays everything due from `start` on, stepping to each due time: the frames'
    /// sequence numbers and when each played, in ms after `start`.
    fn play_all(p: &mut Playout, start: Instant) -> Vec<(u16, u128)> {
        let mut played = Vec::new();
        while let Some(at) = p.next_due() {
            let now = at.max(start);
            while let Some(f) = p.due(now) {
                played.push((f.seq, (now - start).as_millis()));
            }
        }
        played
    }

    #[test]
    fn five_seconds_sent_in_half_a_second_play_at_real_time() {
        let t0 = Instant::now();
        let mut p = Playout::new(DEFAULT_BUFFER);
        let mut played = Vec::new();
        // 250 frames (5 s) arrive over 500 ms, one every 2 ms; playback steps with them.
        for n in 0..250u16 {
            let now = t0 + Duration::from_millis(2 * u64::from(n));
            p.push(now, frame(n)).unwrap();
            while let Some(f) = p.due(now) {
                played.push((f.seq, (now - t0).as_millis()));
            }
        }
        played.extend(
            play_all(&mut p, t0 + Duration::from_millis(500))
                .into_iter()
                .map(|(seq, ms)| (seq, ms + 500)),
        );
        assert_eq!(played.len(), 250, "no loss");
        // The first at once, the second the least gap later, and from there one a slot.
        for (i, (seq, ms)) in played.iter().enumerate() {
            assert_eq!(*seq as usize, i, "in order");
            let slot = if i == 0 { 0 } else { 18 + 20 * (i as u128 - 1) };
            assert_eq!(*ms, slot, "frame {i} at its slot: no drift");
        }
    }

    /// Pushes frames arriving at `arrivals` (ms after `t0`) and plays them as a worker
    /// would, waking at each arrival and each due time: when each played, in ms.
    fn played_at(arrivals: &[u64]) -> Vec<u64> {
        let t0 = Instant::now();
        let ms = |t: Instant| (t - t0).as_millis() as u64;
        let mut p = Playout::new(DEFAULT_BUFFER);
        let mut played = Vec::new();
        let mut pending = arrivals.iter().copied().enumerate().peekable();
        loop {
            let next_arrival = pending
                .peek()
                .map(|(_, at)| t0 + Duration::from_millis(*at));
            let now = match (next_arrival, p.next_due()) {
                (Some(a), Some(d)) => a.min(d),
                (Some(a), None) => a,
                (None, Some(d)) => d,
                (None, None) => return played,
            };
            while let Some((n, _)) =
                pending.next_if(|(_, at)| t0 + Duration::from_millis(*at) <= now)
            {
                p.push(now, frame(n as u16)).unwrap();
            }
            while let Some(f) = p.due(now) {
                assert_eq!(f.seq as usize, played.len(), "in order");
                played.push(ms(now));
            }
        }
    }

    #[test]
    fn a_backend_pacing_itself_plays_as_it_comes_give_or_take_its_jitter() {
        // Frames every 20 ms with ±3 ms of jitter: none waits more than the jitter, and
        // the wait does not add up.
        let jitter = [0i64, 3, -3, 2, -3, 3, -2, 0, 3, -3];
        let arrivals: Vec<u64> = (0..200)
            .map(|n: i64| (20 * n + 5 + jitter[n as usize % jitter.len()]) as u64)
            .collect();
        let played = played_at(&arrivals);
        assert_eq!(played.len(), arrivals.len());
        for (n, (at, arrived)) in played.iter().zip(&arrivals).enumerate() {
            assert!(at - arrived <= 6, "frame {n} waited {} ms", at - arrived);
        }
    }

    #[test]
    fn speech_sent_a_little_faster_than_real_time_is_paced_too() {
        // 1.5x real time: a frame every 13 ms for 150 frames (3 s of speech in 2 s).
        let arrivals: Vec<u64> = (0..150).map(|n| 13 * n).collect();
        let played = played_at(&arrivals);
        assert_eq!(played.len(), 150, "no loss");
        for pair in played.windows(2) {
            assert!(
                pair[1] - pair[0] >= 18,
                "frames {pair:?} closer than the least gap"
            );
        }
        // Once a backlog forms it plays at exactly one frame per 20 ms.
        let gaps: Vec<u64> = played.windows(2).map(|p| p[1] - p[0]).collect();
        assert!(gaps[gaps.len() / 2..].iter().all(|g| *g == 20), "{gaps:?}");
    }

    #[test]
    fn late_wakeups_keep_a_backlog_s_slots_and_a_long_sleep_does_not_burst() {
        let t0 = Instant::now();
        let mut p = Playout::new(DEFAULT_BUFFER);
        for n in 0..10 {
            p.push(t0, frame(n)).unwrap();
        }
        // A worker that wakes 7 ms late each time plays each frame at its slot + 7 ms.
        let mut slot = t0;
        for n in 0..10 {
            assert!(p.due(slot - Duration::from_millis(1)).is_none());
            let late = slot + Duration::from_millis(7);
            assert_eq!(p.due(late).map(|f| f.seq), Some(n), "frame {n}");
            assert!(p.due(late).is_none(), "one frame per slot");
            slot += FRAME;
        }
        // A worker that slept 100 ms resumes with one frame, then one a slot, not a burst.
        for n in 0..3 {
            p.push(slot, frame(n)).unwrap();
        }
        let woke = slot + FRAME * 5;
        assert!(p.due(woke).is_some());
        assert!(p.due(woke).is_none());
        assert_eq!(p.next_due(), Some(woke + FRAME));
    }

    #[test]
    fn the_buffer_is_bounded_and_refuses_the_newest() {
        let t0 = Instant::now();
        let mut p = Playout::new(Duration::from_millis(100));
        for n in 0..5 {
            p.push(t0, frame(n)).unwrap();
        }
        assert_eq!(p.push(t0, frame(5)), Err(Overflow::Frames));
        let played: Vec<u16> = play_all(&mut p, t0).iter().map(|(s, _)| *s).collect();
        assert_eq!(played, [0, 1, 2, 3, 4], "what was queued plays on");
    }

    #[test]
    fn clear_drops_what_waits_and_the_marks_not_reached() {
        let t0 = Instant::now();
        let mut p = Playout::new(DEFAULT_BUFFER);
        for n in 0..3 {
            p.push(t0, frame(n)).unwrap();
        }
        p.mark("after-3".into()).unwrap();
        for n in 3..6 {
            p.push(t0, frame(n)).unwrap();
        }
        p.mark("after-6".into()).unwrap();
        // Two frames play; then the user speaks.
        assert!(p.due(t0).is_some());
        assert!(p.due(t0 + FRAME).is_some());
        let cleared = p.clear();
        assert_eq!(
            cleared,
            Cleared {
                frames: 4,
                marks: vec!["after-3".into(), "after-6".into()]
            }
        );
        assert_eq!(p.next_due(), None, "nothing more plays");
        assert!(p.due(t0 + FRAME * 10).is_none());
        assert_eq!(p.reached_mark(), None);
        // New speech after the clear keeps the cadence, and its marks count from here.
        p.push(t0 + FRAME + Duration::from_millis(1), frame(9))
            .unwrap();
        assert_eq!(p.next_due(), Some(t0 + FRAME + MIN_GAP));
        p.mark("answer".into()).unwrap();
        assert!(p.due(t0 + FRAME * 2).is_some());
        assert_eq!(p.reached_mark().as_deref(), Some("answer"));
    }

    #[test]
    fn marks_are_reached_in_order_when_their_frame_has_played() {
        let t0 = Instant::now();
        let mut p = Playout::new(DEFAULT_BUFFER);
        p.mark("nothing-queued".into()).unwrap();
        assert_eq!(p.reached_mark().as_deref(), Some("nothing-queued"));
        p.push(t0, frame(0)).unwrap();
        p.mark("a".into()).unwrap();
        p.push(t0, frame(1)).unwrap();
        p.mark("b".into()).unwrap();
        p.mark("c".into()).unwrap();
        assert_eq!(p.reached_mark(), None);
        p.due(t0).unwrap();
        assert_eq!(p.reached_mark().as_deref(), Some("a"));
        assert_eq!(p.reached_mark(), None);
        p.due(t0 + FRAME).unwrap();
        assert_eq!(p.reached_mark().as_deref(), Some("b"));
        assert_eq!(p.reached_mark().as_deref(), Some("c"));
        p.push(t0 + FRAME, frame(2)).unwrap();
        for n in 0..MAX_MARKS {
            p.mark(format!("m{n}")).unwrap();
        }
        assert_eq!(p.mark("one-too-many".into()), Err(Overflow::Marks));
    }
}
