//! What each default feature of a watching command costs a training rank: which are on with the
//! settings in use, and the cost measured for each at the GPU loop's rates (docs/cost.md, where
//! the runs behind every figure are). `tierscope check` prints it. Pure.
use serde::Serialize;

use super::page_path::PagePathMode;

/// The settings a watching command runs with, as far as cost goes.
#[derive(Clone, Debug, PartialEq)]
pub struct CostInputs {
    /// A node is on the CXL tier (declared or found): the CXL sites are sampled.
    pub cxl_tier: bool,
    pub page_path: PagePathMode,
    pub cpu_samples_hz: u32,
    pub cpu_stack_copies_per_sec: u32,
    pub work_class: super::work_class::WorkClass,
}

/// One feature: on or off, with what setting, what it was measured to cost, and how to turn it
/// off.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FeatureCost {
    pub feature: &'static str,
    pub on: bool,
    pub setting: String,
    /// The measured cost (docs/cost.md), or why there is none.
    pub cost: &'static str,
    pub off: &'static str,
}

/// The features of `run`, `top`, `snapshot` and `record` with `inputs`, in the order of their cost.
pub fn features(inputs: &CostInputs) -> Vec<FeatureCost> {
    let sampled = inputs.page_path == PagePathMode::Sampled;
    let low = inputs.work_class == super::work_class::WorkClass::Low;
    vec![
        FeatureCost {
            feature: "page path",
            on: true,
            setting: if sampled {
                "sampled (1/w of the time, w by the node's page events)".into()
            } else {
                "exact (every page allocation, free and fault)".into()
            },
            cost: if sampled {
                "programs 0.09% of a rank's CPU; the window thread ~1% of a core (kernel text patching)"
            } else {
                "programs 4.8% of a rank's CPU at ~1 M page events a second (392 ns an allocation)"
            },
            off: "cannot be turned off; --page-path sampled where its estimates will do",
        },
        FeatureCost {
            feature: "CPU sampler",
            on: inputs.cpu_samples_hz > 0,
            setting: format!(
                "{} Hz a CPU, frame pointers and Python frames in the kernel, {} stack copies a second a process",
                inputs.cpu_samples_hz, inputs.cpu_stack_copies_per_sec
            ),
            cost: "the program 0.03% of a rank's CPU (5 us a tick); ~1% of a core in the agent",
            off: "[collect] cpu_samples_hz = 0 (or --cpu-samples-hz 0): no CPU profile, no live steps",
        },
        FeatureCost {
            feature: "CXL allocation sites",
            on: inputs.cxl_tier,
            setting: if inputs.cxl_tier {
                "a stack of 1 in 64 CXL-tier allocations, at most 200 a second a process".into()
            } else {
                "no CXL tier: nothing to sample".into()
            },
            cost: "not measurable beside the rest (agent 3.10% of a core without, 3.05% with)",
            off: "--site-sample-every 0",
        },
        FeatureCost {
            feature: "run's background class",
            on: low,
            setting: if low { "nice 19".into() } else { "normal".into() },
            cost: "unwinding and naming mostly wait for an idle CPU: ~1.5% of a CPU a rank's thread keeps busy",
            off: "[collect] work_class = \"normal\" (or --work-class normal)",
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::work_class::WorkClass;

    fn inputs(cxl: bool, mode: PagePathMode, hz: u32) -> CostInputs {
        CostInputs {
            cxl_tier: cxl,
            page_path: mode,
            cpu_samples_hz: hz,
            cpu_stack_copies_per_sec: 2,
            work_class: WorkClass::Low,
        }
    }

    #[test]
    fn a_cxl_node_samples_the_page_path_and_its_sites() {
        let f = features(&inputs(true, PagePathMode::Sampled, 49));
        assert!(f[0].setting.starts_with("sampled") && f[0].cost.contains("0.09%"), "{:?}", f[0]);
        assert!(f[1].on && f[1].setting.contains("49 Hz") && f[1].setting.contains("2 stack copies"), "{:?}", f[1]);
        assert!(f[2].on, "sites on a CXL tier");
        assert!(f[3].on && f[3].setting == "nice 19");
    }

    #[test]
    fn a_node_without_cxl_counts_every_event_and_says_what_that_costs() {
        let f = features(&inputs(false, PagePathMode::Exact, 0));
        assert!(f[0].setting.starts_with("exact") && f[0].cost.contains("4.8%"), "{:?}", f[0]);
        assert!(!f[1].on && !f[2].on, "sampler off, no sites: {f:?}");
    }
}
