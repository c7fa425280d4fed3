//! `top --replay`: where the replay of a recording is and how it moves. Pure: the caller feeds it
//! keys and the wall-clock time that passed, and shows the model of [`Player::index`]'s frame.
use crossterm::event::{KeyCode, KeyEvent};

/// Playback speeds, slowest first (`-` and `+` step through them).
pub const SPEEDS: [f64; 6] = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0];
const NORMAL_SPEED: usize = 1;

#[derive(Clone, Debug, PartialEq)]
pub struct Player {
    /// The recording's name, as the header shows it.
    pub name: String,
    /// Milliseconds since the start of each frame, in order.
    pub times_ms: Vec<u64>,
    /// The frame shown.
    pub index: usize,
    pub paused: bool,
    /// Index into [`SPEEDS`].
    pub speed: usize,
    /// Recording time (ms) played since the frame shown, not yet enough to reach the next one.
    pub carry_ms: f64,
}

impl Player {
    /// Starts at the first frame, playing at 1x.
    pub fn new(name: String, times_ms: Vec<u64>) -> Player {
        Player { name, times_ms, index: 0, paused: false, speed: NORMAL_SPEED, carry_ms: 0.0 }
    }

    pub fn speed(&self) -> f64 {
        SPEEDS[self.speed]
    }

    /// Milliseconds since the start at the frame shown.
    pub fn position_ms(&self) -> u64 {
        self.times_ms.get(self.index).copied().unwrap_or(0)
    }

    pub fn duration_ms(&self) -> u64 {
        self.times_ms.last().copied().unwrap_or(0)
    }

    pub fn at_end(&self) -> bool {
        self.index + 1 >= self.times_ms.len()
    }

    /// The keys of the replay: space (and `p`) pause and resume, Left and Right step one frame,
    /// Home and End go to the first and the last frame, `+` and `-` change the speed. Returns
    /// whether the key was one of them.
    pub fn handle_key(&mut self, key: &KeyEvent) -> bool {
        match key.code {
            KeyCode::Char(' ') | KeyCode::Char('p') => {
                // Resuming at the end plays again from the start.
                if self.paused && self.at_end() {
                    self.seek(0);
                }
                self.paused = !self.paused;
            }
            KeyCode::Left => self.seek(self.index.saturating_sub(1)),
            KeyCode::Right => self.seek(self.index + 1),
            KeyCode::Home => self.seek(0),
            KeyCode::End => self.seek(usize::MAX),
            KeyCode::Char('+') | KeyCode::Char('=') => self.speed = (self.speed + 1).min(SPEEDS.len() - 1),
            KeyCode::Char('-') | KeyCode::Char('_') => self.speed = self.speed.saturating_sub(1),
            _ => return false,
        }
        true
    }

    /// Shows frame `index` (clamped to the last one).
    pub fn seek(&mut self, index: usize) {
        self.index = index.min(self.times_ms.len().saturating_sub(1));
        self.carry_ms = 0.0;
    }

    /// Plays `wall_ms` of wall-clock time at the current speed; pauses at the last frame.
    /// Returns whether the frame shown changed.
    pub fn advance(&mut self, wall_ms: f64) -> bool {
        if self.paused || self.times_ms.is_empty() {
            return false;
        }
        let before = self.index;
        self.carry_ms += wall_ms * self.speed();
        while !self.at_end() {
            let step = self.times_ms[self.index + 1].saturating_sub(self.times_ms[self.index]) as f64;
            if self.carry_ms < step {
                break;
            }
            self.carry_ms -= step;
            self.index += 1;
        }
        if self.at_end() {
            self.paused = true;
            self.carry_ms = 0.0;
        }
        self.index != before
    }

    /// The header's words: `replay run.tscope 12.4 s / 60.0 s  frame 63/301  ▶ 2x` (`PAUSED 2x`).
    pub fn status(&self) -> String {
        let state = format!("{} {}x", if self.paused { "PAUSED" } else { "▶" }, self.speed());
        format!(
            "replay {} {:.1} s / {:.1} s  frame {}/{}  {state}",
            self.name,
            self.position_ms() as f64 / 1e3,
            self.duration_ms() as f64 / 1e3,
            self.index + 1,
            self.times_ms.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use crossterm::event::KeyModifiers;

    use super::*;

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    fn player() -> Player {
        Player::new("r.tscope".into(), (0..10).map(|i| i * 1000).collect())
    }

    #[test]
    fn plays_at_its_speed_and_stops_at_the_end() {
        let mut p = player();
        assert!(!p.advance(999.0));
        assert!(p.advance(1.0));
        assert_eq!(p.position_ms(), 1000);
        p.handle_key(&key(KeyCode::Char('+')));
        p.handle_key(&key(KeyCode::Char('+')));
        assert_eq!(p.speed(), 4.0);
        p.advance(1000.0);
        assert_eq!(p.position_ms(), 5000);
        for _ in 0..10 {
            p.handle_key(&key(KeyCode::Char('+')));
        }
        assert_eq!(p.speed(), 16.0, "at most 16x");
        p.advance(60_000.0);
        assert_eq!((p.index, p.paused), (9, true), "paused at the last frame");
        assert!(p.status().contains("9.0 s / 9.0 s") && p.status().contains("PAUSED"), "{}", p.status());
        p.handle_key(&key(KeyCode::Char(' ')));
        assert_eq!((p.index, p.paused), (0, false), "resuming at the end starts again");
        for _ in 0..10 {
            p.handle_key(&key(KeyCode::Char('-')));
        }
        assert_eq!(p.speed(), 0.5, "at least 0.5x");
        p.advance(1000.0);
        assert_eq!(p.index, 0, "half a second of recording");
    }

    #[test]
    fn seeks_by_one_frame_and_to_either_end_while_paused() {
        let mut p = player();
        p.handle_key(&key(KeyCode::Char(' ')));
        assert!(p.paused);
        assert!(!p.advance(5000.0), "paused: no movement");
        p.handle_key(&key(KeyCode::Right));
        p.handle_key(&key(KeyCode::Right));
        assert_eq!(p.position_ms(), 2000);
        p.handle_key(&key(KeyCode::Left));
        assert_eq!(p.position_ms(), 1000);
        p.handle_key(&key(KeyCode::End));
        assert_eq!(p.index, 9);
        p.handle_key(&key(KeyCode::Right));
        assert_eq!(p.index, 9, "not past the end");
        p.handle_key(&key(KeyCode::Home));
        p.handle_key(&key(KeyCode::Left));
        assert_eq!(p.index, 0, "not before the start");
        assert!(!p.handle_key(&key(KeyCode::Tab)), "other keys are the UI's");
        assert_eq!(p.status(), "replay r.tscope 0.0 s / 9.0 s  frame 1/10  PAUSED 1x");
    }
}
