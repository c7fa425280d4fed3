//! Each rank's steps as slices on a `steps` track under its process's track.
use super::{
    tests::{slices, track_named},
    *,
};
use crate::report::steps;

#[test]
fn each_step_is_a_slice_under_its_process_with_its_figures() {
    let rec = steps::tests::recording(50);
    let ranks = steps::analyze(&rec, None).expect("steps");
    let mut bytes = Vec::new();
    write(&rec, &ranks, &mut bytes).expect("written");
    let t = proto::Trace::decode(&bytes[..]).expect("decodes");
    let track = track_named(&t, "steps");
    let process = t.packet.iter().filter_map(|p| p.track_descriptor.as_ref()).find(|d| d.process.is_some());
    assert_eq!(track.parent_uuid, process.and_then(|d| d.uuid), "under the rank's process track");
    assert_eq!(track.description.as_deref(), Some("training steps by rhythm train_step (/job/train.py), depth 1"));
    let s = slices(&t, track.uuid.expect("uuid"));
    let ms = |v: u64| v / 1_000_000;
    let spans: Vec<(u64, u64, &str)> = s.iter().map(|(b, e, n, _)| (ms(*b), ms(*e), n.as_str())).collect();
    assert_eq!(
        spans,
        vec![
            (140, 240, "step 0"),
            (240, 340, "step 1"),
            (340, 440, "step 2"),
            (440, 540, "step 3"),
            (540, 740, "step 4"),
            (740, 840, "step 5")
        ]
    );
    let backward = s[4].3.iter().find(|a| a.name.as_deref() == Some("cpu_s_backward")).expect("backward");
    assert_eq!(backward.double_value, Some(0.15));
    // Without steps, no steps track.
    let plain = trace(&rec).expect("trace");
    assert!(!plain
        .packet
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref())
        .any(|d| d.name.as_deref() == Some("steps")));
}
