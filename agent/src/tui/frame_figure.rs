//! A figure for `cargo xtask bench`: one frame of each view with 1,000 processes on 4 nodes,
//! drawn into a 200x60 test backend, printed as `figure tui_frame_ms VIEW=X` (the median of 9
//! draws). It asserts what the frame shows, never how fast (speed is the bench's business).
use std::{collections::BTreeMap, time::Instant};

use ratatui::{backend::TestBackend, Terminal};

use super::{
    app::{App, View},
    screen,
    test_scene::{Fixture, S},
    NodeView,
};
use crate::{
    model::{reading::CounterReading, residency::NumaResidency},
    topology::Tier,
};

/// The training fixture grown to `procs` processes allocating on 4 nodes.
pub fn crowded(procs: u32) -> Fixture {
    let mut f = Fixture::training();
    f.nodes.push(NodeView {
        id: 3,
        tier: Tier::Cxl,
        tier_evidence: "CXL region region1".into(),
        cpus: 0,
        mem_total_bytes: Some(128 << 30),
        mem_free_bytes: Some(90 << 30),
    });
    for step in 0..2u64 {
        let at = f.now_ns + step * S;
        let mut r = CounterReading { at_ns: at, ..Default::default() };
        for i in 0..procs {
            let pid = 20_000 + i;
            r.faults.insert(pid, 1000 * (step + 1) + u64::from(i));
            for node in 0..4 {
                r.allocs.insert((pid, node), 100 * (step + 1) * u64::from(node + 1) + u64::from(i));
            }
        }
        f.model.apply_reading(&r);
    }
    for i in 0..procs {
        let pid = 20_000 + i;
        f.model.set_identity(pid, "python3", &format!("python3 worker.py --shard {i}"), 1);
        let pages: BTreeMap<u32, u64> = (0..4).map(|n| (n, 1000 + u64::from(i) * (u64::from(n) + 1))).collect();
        let r = NumaResidency { pages_by_node: pages.clone(), anon_pages_by_node: pages, ..Default::default() };
        f.model.set_residency(pid, r, f.now_ns);
    }
    f.model.assign_jobs();
    f
}

#[test]
#[ignore = "a bench figure (prints a time): cargo xtask bench runs it"]
fn figure_tui_frame_with_a_thousand_processes() {
    let f = crowded(1000);
    assert!(f.model.processes.len() >= 1000);
    for view in [View::Overview, View::Processes] {
        let app = App { view, ..App::default() };
        let mut t = Terminal::new(TestBackend::new(200, 60)).expect("test terminal");
        let mut ms = Vec::new();
        for _ in 0..9 {
            let t0 = Instant::now();
            t.draw(|frame| {
                screen::draw(frame, &f.scene(), &app);
            })
            .expect("draw");
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        if view == View::Processes {
            let frame = t.backend().to_string();
            let listed = frame
                .split(" processes, sorted by")
                .next()
                .and_then(|head| head.rsplit(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse::<usize>().ok());
            assert!(listed.is_some_and(|n| n >= 1000), "the crowd is listed: {listed:?}\n{frame}");
        }
        ms.sort_by(f64::total_cmp);
        println!("figure tui_frame_ms {view:?}={:.3}", ms[ms.len() / 2]);
        if view == View::Processes {
            let t0 = Instant::now();
            let rows = super::rows::process_rows(&f.scene(), &app);
            println!("figure of which process_rows_ms={:.3} rows={}", t0.elapsed().as_secs_f64() * 1e3, rows.len());
        }
    }
}
