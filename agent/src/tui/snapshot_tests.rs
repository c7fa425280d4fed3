//! Every view drawn from model values into a `TestBackend` at 80x24 and 160x48, compared with
//! the reviewed snapshots under `snapshots/` (`cargo insta review` after a deliberate change).
use ratatui::{backend::TestBackend, Terminal};

use super::{app::View, screen, test_scene::Fixture, App};

fn render(f: &Fixture, app: &App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    t.draw(|frame| screen::draw(frame, &f.scene(), app)).expect("draw");
    t.backend().to_string()
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
            let a = App { view: v, detail_pid: Some(4242), help: w % 2 == 0, scroll: 9999, selected: 99, ..App::default() };
            let s = render(&f, &a, w, h);
            assert_eq!(s.lines().count(), h as usize);
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
fn only_real_losses_count_as_lost() {
    let mut f = Fixture::training();
    assert_eq!(f.scene().lost(), 0, "the agent's own filtered events are no loss");
    f.model.kernel_stats.insert("ringbuf_full", 3);
    f.model.kernel_stats.insert("map_full", 2);
    assert_eq!(f.scene().lost(), 5);
    assert!(render(&f, &App::default(), 80, 24).contains("lost 5"));
}
