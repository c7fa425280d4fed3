//! Every view drawn from model values into a `TestBackend` at 80x24 and 160x48, compared with
//! the reviewed snapshots under `snapshots/` (`cargo insta review` after a deliberate change).
use ratatui::{backend::TestBackend, Terminal};

use crossterm::event::{KeyModifiers, MouseButton, MouseEvent, MouseEventKind};

use super::{
    app::{Action, Regions, SortKey, View},
    mouse, rows, screen,
    test_scene::Fixture,
    App,
};

fn render(f: &Fixture, app: &App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    t.draw(|frame| {
        screen::draw(frame, &f.scene(), app);
    })
    .expect("draw");
    t.backend().to_string()
}

/// The frame and the regions the draw reported for the mouse.
fn render_regions(f: &Fixture, app: &App, w: u16, h: u16) -> (String, Regions) {
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    let mut regions = Regions::default();
    t.draw(|frame| regions = screen::draw(frame, &f.scene(), app)).expect("draw");
    (t.backend().to_string(), regions)
}

/// The screen cell where `needle` starts on line `y` of a rendered frame (lines are quoted).
fn cell_of(screen: &str, y: usize, needle: &str) -> (u16, u16) {
    let line = screen.lines().nth(y).unwrap_or_else(|| panic!("no line {y}:\n{screen}"));
    let byte = line.find(needle).unwrap_or_else(|| panic!("{needle:?} not on line {y}: {line}"));
    let x = line[..byte].chars().count() - 1;
    (x as u16, y as u16)
}

fn click_at((column, row): (u16, u16)) -> MouseEvent {
    MouseEvent { kind: MouseEventKind::Down(MouseButton::Left), column, row, modifiers: KeyModifiers::NONE }
}

fn app(view: View) -> App {
    App { view, detail_pid: Some(4242), ..App::default() }
}

macro_rules! views {
    ($($name:ident => $view:expr),* $(,)?) => {$(
        #[test]
        fn $name() {
            let f = Fixture::training();
            insta::assert_snapshot!(concat!(stringify!($name), "_80x24"), render(&f, &app($view), 80, 24));
            insta::assert_snapshot!(concat!(stringify!($name), "_160x48"), render(&f, &app($view), 160, 48));
        }
    )*};
}

views! {
    overview => View::Overview,
    processes => View::Processes,
    process_detail => View::ProcessDetail,
    migrations => View::Migrations,
    latency => View::Latency,
    health => View::Health,
    insights => View::Insights,
}

#[test]
fn every_view_of_an_empty_model() {
    let f = Fixture::empty();
    for v in View::ALL {
        let a = App { view: v, ..App::default() };
        insta::assert_snapshot!(format!("empty_{}", v.title().to_lowercase()), render(&f, &a, 80, 24));
    }
}

#[test]
fn help_overlay_lists_every_key() {
    let f = Fixture::training();
    let a = App { help: true, ..App::default() };
    let s = render(&f, &a, 80, 24);
    for (k, _) in super::help::KEYS {
        assert!(s.contains(k), "help lacks {k}");
    }
    insta::assert_snapshot!("help_80x24", s);
}

#[test]
fn filter_pause_and_sort_show_in_the_process_view() {
    let f = Fixture::training();
    let a = App {
        view: View::Processes,
        filter: "rank 1".into(),
        editing_filter: true,
        paused: true,
        sort: super::app::SortKey::CxlShare,
        ..App::default()
    };
    insta::assert_snapshot!("processes_filtered_paused_80x24", render(&f, &a, 80, 24));
}

#[test]
fn tiny_and_odd_sizes_never_panic() {
    let f = Fixture::training();
    for v in View::ALL {
        for (w, h) in [(1, 1), (10, 3), (39, 9), (40, 10), (41, 11), (80, 12), (300, 100), (500, 10)] {
            let a =
                App { view: v, detail_pid: Some(4242), help: w % 2 == 0, scroll: 9999, selected: 99, ..App::default() };
            let (s, regions) = render_regions(&f, &a, w, h);
            assert_eq!(s.lines().count(), h as usize);
            // Clicks and the wheel anywhere on the frame (and past it) map without panicking.
            let pids = [4242, 4243];
            for y in (0..=h).step_by(usize::from(h / 12).max(1)) {
                for x in (0..=w).step_by(usize::from(w / 40).max(1)) {
                    let mut b = App { regions: regions.clone(), help: false, ..a.clone() };
                    mouse::apply(&mut b, click_at((x, y)), &pids);
                    let wheel = MouseEvent { kind: MouseEventKind::ScrollDown, ..click_at((x, y)) };
                    mouse::apply(&mut b, wheel, &pids);
                }
            }
        }
    }
    insta::assert_snapshot!("too_small_30x8", render(&f, &App::default(), 30, 8));
}

#[test]
fn detail_of_a_process_that_left_or_was_never_picked() {
    let f = Fixture::training();
    let gone = render(&f, &App { view: View::ProcessDetail, detail_pid: Some(1), ..App::default() }, 80, 24);
    assert!(gone.contains("Process 1 is no longer tracked"));
    let none = render(&f, &App { view: View::ProcessDetail, ..App::default() }, 80, 24);
    assert!(none.contains("No process picked"));
}

#[test]
fn a_departed_process_shows_marked_exited_with_its_exit_time_and_final_totals() {
    let f = Fixture::training().with_departed();
    let by_pid = App { view: View::Processes, sort: SortKey::Pid, descending: false, ..App::default() };
    let wide = render(&f, &by_pid, 160, 48);
    let row = wide.lines().find(|l| l.contains("4300")).unwrap_or_else(|| panic!("no departed row:\n{wide}"));
    assert!(row.contains("pt_loader") && row.contains("exited 12.0s ago"), "{row}");
    let narrow = render(&f, &by_pid, 80, 24);
    let row = narrow.lines().find(|l| l.contains("4300")).unwrap_or_else(|| panic!("no departed row:\n{narrow}"));
    assert!(row.contains("pt_loader") && row.contains("exited"), "{row}");
    let detail = App { view: View::ProcessDetail, detail_pid: Some(4300), ..App::default() };
    let shown = render(&f, &detail, 160, 48);
    assert!(shown.contains("4300 pt_loader  exited 12.0s ago, final totals"), "{shown}");
    assert!(shown.contains("faults 7.0k (0/s)"), "final total, no rate: {shown}");
}

#[test]
fn only_real_losses_count_as_lost() {
    let mut f = Fixture::training();
    assert_eq!(f.scene().lost(), 0, "the agent's own filtered events are no loss");
    f.model.kernel_stats.insert("ringbuf_full", 3);
    f.model.kernel_stats.insert("map_full", 2);
    assert_eq!(f.scene().lost(), 5);
    assert!(render(&f, &App::default(), 80, 24).contains("lost 5"));
}

#[test]
fn the_tier_probe_shows_progress_then_its_failure() {
    use super::probe::{
        tests::{node_result, one_node_report},
        ProbeProgress, TierProbe,
    };
    let mut f = Fixture::training();
    f.probe = TierProbe::start(100 * super::test_scene::S);
    f.probe.apply(ProbeProgress::Started { nodes: vec![0, 2] }, 100 * super::test_scene::S);
    f.probe.apply(
        ProbeProgress::Measured {
            node: 0,
            report: Ok(one_node_report(node_result(0, crate::topology::Tier::Dram, 97.5, 12.25, None))),
        },
        0,
    );
    f.probe.apply(ProbeProgress::Measuring { node: 2 }, 0);
    let s = render(&f, &app(View::Latency), 80, 24);
    assert!(s.contains("measuring node 2 (2 of 2)"), "{s}");
    assert!(s.contains("3.0s"), "elapsed since the start, at now = 103 s:\n{s}");
    assert!(s.contains("97.5ns") && s.contains("12.25"), "the node already measured shows:\n{s}");
    f.probe.apply(ProbeProgress::Failed { reason: "no node has memory online".into() }, 101 * super::test_scene::S);
    let s = render(&f, &app(View::Latency), 80, 24);
    assert!(s.contains("the probe failed 2.0s ago: no node has memory online"), "{s}");
}

#[test]
fn a_device_without_get_health_info_says_so_and_shows_its_module_event() {
    use crate::health::{
        event::{HealthEvent, HealthKind},
        mailbox::HealthInfoResult,
        meaning::Severity,
    };
    let mut f = Fixture::training();
    f.model
        .health
        .set_health_info("mem0", HealthInfoResult::NotSupported { reason: "Get Health Info not in the CEL".into() });
    let s = render(&f, &app(View::Health), 120, 30);
    assert!(s.contains("Get Health Info: not supported by this device (Get Health Info not in the CEL)"), "{s}");
    let mem0 = s.lines().find(|l| l.contains("mem0    ")).expect("device row");
    assert!(!mem0.contains("41°C") && mem0.contains(" -  "), "no figure is invented: {mem0}");

    // The device's own report (a memory module event, as QEMU injects) fills the figures.
    let decoded = serde_json::json!({
        "life_used_percent": 33, "temperature_c": 57, "dirty_shutdowns": 4,
        "corrected_volatile_errors": 12, "corrected_persistent_errors": 0,
    });
    let decoded: std::collections::BTreeMap<String, serde_json::Value> = serde_json::from_value(decoded).expect("map");
    f.model.health.apply(HealthEvent {
        kind: HealthKind::MemoryModule,
        tracepoint: "cxl:cxl_memory_module".into(),
        ts_ns: 100 * super::test_scene::S,
        pid: 0,
        severity: Severity::Informational,
        device: Some("mem0".into()),
        serial: None,
        hpa: None,
        dpa: None,
        length: None,
        region: None,
        node: None,
        summary: "Health Status Change: health normal, life used 33%, 57 °C".into(),
        decoded,
        fields: Default::default(),
    });
    let s = render(&f, &app(View::Health), 120, 30);
    let mem0 = s.lines().find(|l| l.contains("mem0    ")).expect("device row");
    assert!(mem0.contains("57°C") && mem0.contains("33%") && mem0.contains("12/0") && mem0.contains(" 4 "), "{mem0}");
    assert!(s.contains("figures from the memory module event of 3.0s ago"), "{s}");
}

#[test]
fn clicks_land_on_what_the_processes_view_drew() {
    let f = Fixture::training();
    for (w, h) in [(80, 24), (160, 48)] {
        let a = App { view: View::Processes, ..App::default() };
        let (s, regions) = render_regions(&f, &a, w, h);
        let pids: Vec<u32> = rows::process_rows(&f.scene(), &a).iter().map(|r| r.pid).collect();
        let act = |cell| mouse::action(click_at(cell), &regions, &a);
        assert_eq!(act(cell_of(&s, 1, "3 Process ")), Some(Action::Go(View::ProcessDetail)), "{w}x{h}");
        assert_eq!(act(cell_of(&s, 1, "6 Health")), Some(Action::Go(View::Health)));
        // Line 3 is the table's heading (line 2 says how it is sorted).
        for (title, key) in [
            ("PID", SortKey::Pid),
            ("COMM", SortKey::Comm),
            ("RSS", SortKey::Rss),
            ("DRAM ", SortKey::DramShare),
            ("CXL ", SortKey::CxlShare),
            ("FLT/s", SortKey::FaultsPerS),
            ("DRAMpg/s", SortKey::DramAllocsPerS),
            ("CXLpg/s", SortKey::CxlAllocsPerS),
            ("PROMO", SortKey::Promotions),
            ("DEMO", SortKey::Demotions),
        ] {
            assert_eq!(act(cell_of(&s, 3, title)), Some(Action::SortBy(key)), "{w}x{h} heading {title}");
        }
        for (i, pid) in pids.iter().enumerate() {
            let at = cell_of(&s, 4 + i, &pid.to_string());
            let want = if i == a.selected { Action::Open } else { Action::Select(i) };
            assert_eq!(act(at), Some(want), "{w}x{h} row of {pid}");
        }
        assert_eq!(act((3, 4 + pids.len() as u16)), None, "below the last row");
    }
}

#[test]
fn clicks_on_the_overview_pick_from_the_busiest_list_and_sort_it() {
    let f = Fixture::training();
    let a = App::default();
    let (s, regions) = render_regions(&f, &a, 80, 24);
    let pids: Vec<u32> = rows::process_rows(&f.scene(), &a).iter().map(|r| r.pid).collect();
    let heading = s.lines().position(|l| l.contains("FAULTS/s")).expect("busiest heading");
    let mut a = App { regions, ..a };
    mouse::apply(&mut a, click_at(cell_of(&s, heading, "RSS")), &pids);
    assert_eq!((a.sort, a.descending), (SortKey::Rss, true));
    let second = cell_of(&s, heading + 2, &pids[1].to_string());
    assert!(mouse::apply(&mut a, click_at(second), &pids));
    assert_eq!(a.selected, 1);
    assert!(mouse::apply(&mut a, click_at(second), &pids), "the second click of a double-click");
    assert_eq!((a.view, a.detail_pid), (View::ProcessDetail, Some(pids[1])));
}

#[test]
fn too_small_a_screen_has_nothing_to_click_and_mouse_off_shows() {
    let f = Fixture::training();
    let (_, regions) = render_regions(&f, &App::default(), 30, 8);
    assert_eq!(regions, Regions::default());
    let (s, _) = render_regions(&f, &App { mouse: false, ..App::default() }, 80, 24);
    assert!(s.lines().next().is_some_and(|l| l.contains("mouse off (m)")), "{s}");
}

#[test]
fn insights_view_and_overview_with_open_insights() {
    use crate::model::insights::{Finding, InsightConfig, InsightEngine, InsightId, Level, Severity, Subject};
    let mut f = Fixture::training();
    f.model.insights = InsightEngine::new(InsightConfig { open_after_s: 0.0, ..InsightConfig::default() });
    let finding = |id, severity, subject, summary: &str| Finding {
        id,
        severity,
        subject,
        level: Level::Open,
        summary: summary.into(),
        evidence: [("slow_resident_bytes".to_string(), 536870912.0), ("fast_free_bytes".to_string(), 1073741824.0)]
            .into(),
        details: vec!["python3 4242: 512.0 MiB on the slow tier".into()],
        try_this: "start the job under `numactl --preferred=0`".into(),
    };
    f.model.insights.step(
        0,
        vec![
            finding(
                InsightId::SlowTierWithFastRoom,
                Severity::Warning,
                Subject::Job { job: "llama-run-1".into() },
                "512.0 MiB of the job on the slow tier (nodes 2) while DRAM has 1024.0 MiB free",
            ),
            finding(
                InsightId::UnhealthyDeviceUnderJob,
                Severity::Critical,
                Subject::Job { job: "llama-run-1".into() },
                "CXL device mem0 is degraded",
            ),
        ],
    );
    let view = render(&f, &app(View::Insights), 100, 30);
    insta::assert_snapshot!("insights_open_100x30", view);
    let overview = render(&f, &app(View::Overview), 120, 30);
    assert!(overview.contains("Insights 2 open: 1 critical 1 warning"), "{overview}");
}

/// The sampled page path (the default on a node with a CXL tier) says on the Overview that the
/// allocation figures are estimates; the exact one adds nothing.
#[test]
fn a_sampled_page_path_says_its_allocations_are_estimates() {
    let mut f = Fixture::training();
    let exact = render(&f, &app(View::Overview), 160, 48);
    assert!(!exact.contains("page path sampled"), "{exact}");
    f.model.page_path.mode = crate::model::page_path::PagePathMode::Sampled;
    let sampled = render(&f, &app(View::Overview), 160, 48);
    let line = sampled.lines().find(|l| l.contains("programs:")).unwrap_or_default();
    assert!(line.contains("page path sampled: allocations estimated"), "{sampled}");
}

/// On a machine with DRAM only (one node, as most laptops and CI machines), the Overview says in
/// one line that there is no slower tier and how to try the CXL views; with a CXL node it does not.
#[test]
fn a_machine_without_a_slow_tier_says_so_on_the_overview() {
    let mut f = Fixture::training();
    let with_cxl = render(&f, &app(View::Overview), 160, 48);
    assert!(!with_cxl.contains("No slower memory tier"), "{with_cxl}");
    f.nodes.retain(|n| n.tier == crate::topology::Tier::Dram);
    assert!(!f.nodes.is_empty(), "the fixture has a DRAM node");
    let dram_only = render(&f, &app(View::Overview), 160, 48);
    let lines: Vec<&str> = dram_only.lines().filter(|l| l.contains("No slower memory tier here (DRAM only)")).collect();
    assert_eq!(lines.len(), 1, "{dram_only}");
    assert!(lines[0].contains("tierscope top --cxl-node 0"), "{dram_only}");
    assert!(lines[0].contains("cargo xtask run"), "offers the recorded tiered machine: {dram_only}");
}

/// The process view's live steps: the fixture's main thread restarts `main` every 4 samples
/// (3 in `step`, 1 in `load_batch`); a process with too few samples says why it has none.
#[test]
fn the_process_view_shows_its_live_steps_or_why_none() {
    let f = Fixture::training();
    let screen = render(&f, &app(View::ProcessDetail), 160, 48);
    let line = screen.lines().find(|l| l.contains("steps  ")).unwrap_or_else(|| panic!("no steps line:\n{screen}"));
    insta::assert_snapshot!("process_steps_line", line.trim_matches('"').trim_end());
    let mut few = Fixture::training();
    let p = few.model.processes.get_mut(&4242).expect("fixture");
    p.live_steps = crate::model::live_steps::LiveSteps::default();
    let cpu = p.cpu.clone();
    let mut trimmed = crate::model::cpu_profile::CpuProfile::default();
    cpu.marks.iter().take(5).for_each(|m| trimmed.add(*m));
    p.live_steps.update(4242, &trimmed, &p.site_frames, None, 0, false);
    let screen = render(&few, &app(View::ProcessDetail), 160, 48);
    assert!(screen.contains("steps  none yet: only 5 main-thread samples with Python frames"), "{screen}");
}
