//! `tierscope top --replay FILE`: the live UI over a recording. The model of the frame shown is
//! rebuilt from the recording ([`recording::replay`]) and drawn by the same views as the live
//! one; [`Player`] moves through the frames (space pauses, arrows step, Home/End, `+`/`-` change
//! the speed from 0.5x to 16x). Nothing is collected: no root needed.
use std::{
    path::Path,
    sync::{atomic::AtomicBool, Arc},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use crossterm::event::{Event as TermEvent, KeyEventKind};
use tokio::sync::mpsc;

use crate::{
    model::snapshot::ProcessFilter,
    recording::{records::Frame, replay, FrameAt, FrameCursor, OnDisk, ReadError, Recording},
    topology::Tier,
    tui::{
        history::SERIES_LEN, mouse, probe::TierProbe, replay::Player, rows, terminal::TerminalGuard, App, Devices,
        History, NodeView,
    },
};

/// How often the player moves on (the frames themselves are as far apart as the recording's).
const STEP: Duration = Duration::from_millis(50);

fn tier(name: &str) -> Tier {
    Tier::from_name(name)
}

/// The recording's nodes at frame `frame`, as the UI shows them.
fn nodes_at(rec: &Recording, frame: &Frame) -> Vec<NodeView> {
    rec.topology
        .iter()
        .flat_map(|t| &t.nodes)
        .map(|n| NodeView {
            id: n.id,
            tier: tier(&n.tier),
            tier_evidence: n.tier_evidence.clone(),
            cpus: n.cpus.len(),
            mem_total_bytes: n.mem_total_bytes,
            mem_free_bytes: frame.nodes.iter().find(|x| x.id == n.id).and_then(|x| x.mem_free_bytes),
        })
        .collect()
}

/// The recording replayed: its records but the frames ([`recording::scan`]), where each frame
/// is in the file and what [`replay::Index`] keeps of it. The frames shown are read again.
struct Source {
    rec: Recording,
    disk: OnDisk,
    at: Vec<FrameAt>,
    index: replay::Index,
}

impl Source {
    fn open(file: &Path, rec: Recording) -> Result<Source> {
        let Some(disk) = rec.on_disk.clone() else {
            anyhow::bail!("{}: the recording was read whole, not scanned", file.display());
        };
        let (mut at, mut built) = (Vec::with_capacity(disk.frames), replay::IndexBuilder::default());
        disk.each_frame_at(|a, f| {
            at.push(a);
            built.push(&f);
        })?;
        Ok(Source { rec, disk, at, index: built.finish() })
    }

    fn len(&self) -> usize {
        self.at.len()
    }

    /// Reads on from frame `i`.
    fn read_from(&self, i: usize) -> Result<Frames> {
        Ok(Frames { cursor: self.disk.frames_from(self.at[i])?, next: i })
    }
}

/// Frames read again from the file in order, each checked against the first pass.
struct Frames {
    cursor: FrameCursor,
    next: usize,
}

impl Frames {
    fn next(&mut self, src: &Source) -> Result<Frame> {
        let f = self.cursor.next_frame()?;
        let expected = src.index.frames.get(self.next).map(|e| e.t_ms);
        match f {
            Some(f) if Some(f.t_ms) == expected => {
                self.next += 1;
                Ok(f)
            }
            _ => Err(ReadError::Changed { path: src.disk.path.clone() }.into()),
        }
    }
}

/// What the screen shows at frame `i`: its model, its nodes, and the history of the frames that
/// led to it (the sparklines and rates), at most as long as the live UI keeps. It holds the
/// frame shown and the reads looked back at; the next frame comes from the file.
struct Shown {
    index: usize,
    model: crate::model::Model,
    nodes: Vec<NodeView>,
    history: History,
    look: replay::Lookback,
    frames: Frames,
}

impl Shown {
    fn at(src: &Source, i: usize) -> Result<Shown> {
        let first = i.saturating_sub(SERIES_LEN - 1);
        // The frame before the history's first one (its rates) and every process's latest read.
        let from = src.index.frames[first..=i].iter().map(|e| e.lookback_from).min().unwrap_or(i);
        let from = from.min(first.saturating_sub(1));
        let mut frames = src.read_from(from)?;
        let (mut history, mut look) = (History::default(), replay::Lookback::default());
        for j in from..i {
            let f = frames.next(src)?;
            if j >= first {
                let model = replay::model_of(&src.rec, &src.index, j, &f, &look);
                history.observe(&model, &nodes_at(&src.rec, &f), replay::now_ns(f.t_ms));
            }
            look.pass(f);
        }
        let mut s = Shown { index: i, model: Default::default(), nodes: vec![], history, look, frames };
        s.observe(src, i)?;
        Ok(s)
    }

    /// Shows frame `i`, the next one the file gives.
    fn observe(&mut self, src: &Source, i: usize) -> Result<()> {
        let f = self.frames.next(src)?;
        self.index = i;
        self.model = replay::model_of(&src.rec, &src.index, i, &f, &self.look);
        self.nodes = nodes_at(&src.rec, &f);
        self.history.observe(&self.model, &self.nodes, replay::now_ns(f.t_ms));
        self.look.pass(f);
        Ok(())
    }

    /// Moves to frame `i`: one frame on is observed, anything else is rebuilt.
    fn go(&mut self, src: &Source, i: usize) -> Result<()> {
        if i == self.index + 1 {
            self.observe(src, i)
        } else if i != self.index {
            *self = Shown::at(src, i)?;
            Ok(())
        } else {
            Ok(())
        }
    }
}

pub fn run(file: &Path, fps: u32) -> Result<i32> {
    if !(1..=120).contains(&fps) {
        eprintln!("tierscope: --fps {fps}: give frames per second between 1 and 120");
        return Ok(2);
    }
    // Read before the screen is taken: a damaged file is one plain line.
    let rec = super::report::open(file)?;
    if rec.frame_count() == 0 {
        anyhow::bail!(
            "{}: the recording has no frames (it stopped before its first interval): nothing to replay",
            file.display()
        );
    }
    let src = Source::open(file, rec)?;
    // After the file is read (what is damaged in it is said either way), before the screen.
    crate::tui::terminal::require_terminal()?;
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the async runtime")?;
    rt.block_on(play(file, src, fps))
}

async fn play(file: &Path, src: Source, fps: u32) -> Result<i32> {
    let name = file.file_name().map_or_else(|| file.display().to_string(), |n| n.to_string_lossy().into_owned());
    let mut app =
        App { replay: Some(Player::new(name, src.index.frames.iter().map(|e| e.t_ms).collect())), ..App::default() };
    let devices = Devices::default();
    let filter = ProcessFilter::default();
    let probe = TierProbe::NotRun;
    let page_size = src.rec.meta.page_size;
    let host = src.rec.meta.host.clone();
    let mut shown = Shown::at(&src, 0)?;

    let log = crate::tui::terminal::StderrToLog::start()
        .with_context(|| format!("opening the log file {}", crate::tui::terminal::log_path().display()))?;
    let mut guard = TerminalGuard::enter().context("taking over the terminal")?;
    tracing::info!("top --replay {}: {} frames", file.display(), src.len());
    let (keys_tx, mut keys) = mpsc::channel::<TermEvent>(64);
    let stop = Arc::new(AtomicBool::new(false));
    let input = super::top::spawn_input(keys_tx, stop.clone());
    let mut signals = super::signals::Signals::install()?;
    let mut step = tokio::time::interval(STEP);
    step.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut render = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(fps)));
    render.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_step = Instant::now();
    let mut dirty = true;

    macro_rules! scene {
        () => {
            crate::tui::Scene {
                model: &shown.model,
                history: &shown.history,
                nodes: &shown.nodes,
                devices: &devices,
                programs: &[],
                filter: &filter,
                demo: None,
                page_size,
                now_ns: shown.model.last_reading_ns,
                channel_dropped: 0,
                host: &host,
                probe: &probe,
            }
        };
    }

    let result: Result<()> = loop {
        tokio::select! {
            _ = step.tick() => {
                let elapsed = last_step.elapsed();
                last_step = Instant::now();
                if let Some(p) = app.replay.as_mut() {
                    if p.advance(elapsed.as_secs_f64() * 1e3) {
                        if let Err(e) = shown.go(&src, p.index) {
                            break Err(e);
                        }
                        dirty = true;
                    }
                }
            }
            _ = render.tick() => {
                if dirty {
                    let scene = scene!();
                    if let Err(e) = guard.draw_frame(&scene, &mut app) {
                        break Err(e).context("drawing the screen");
                    }
                    dirty = false;
                }
            }
            ev = keys.recv() => {
                let pids: Vec<u32> = { let scene = scene!(); rows::process_rows(&scene, &app).iter().map(|r| r.pid).collect() };
                let changed = match ev {
                    Some(TermEvent::Key(k)) if k.kind != KeyEventKind::Release => app.handle_key(k, &pids),
                    Some(TermEvent::Mouse(m)) => mouse::apply(&mut app, m, &pids),
                    Some(TermEvent::Resize(..)) => true,
                    Some(_) => false,
                    None => break Ok(()),
                };
                if let Some(p) = &app.replay {
                    if let Err(e) = shown.go(&src, p.index) {
                        break Err(e);
                    }
                }
                dirty |= changed;
                if app.quit {
                    break Ok(());
                }
            }
            _ = signals.stop() => break Ok(()),
        }
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(guard);
    super::top::finish_input(input);
    drop(log);
    result.map(|()| 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_read_back_from_their_names() {
        assert_eq!(tier("cxl"), Tier::Cxl);
        assert_eq!(tier("dram"), Tier::Dram);
        assert_eq!(tier("hbm"), Tier::Unknown);
    }
}
