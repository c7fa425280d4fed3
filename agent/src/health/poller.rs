//! The periodic part of health collection: the mailbox's Get Health Info, EDAC counters, and a
//! rate-limited read of each device's poison list (the kernel traces `cxl_poison` only when the
//! list is read, so without this the agent would never see poison).
use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use super::{edac, mailbox, model::HealthModel};

/// How often devices are asked. Reading the poison list is a mailbox command that holds the
/// device's mailbox while the device walks its list: keep it rare.
pub const POLL_EVERY: Duration = Duration::from_secs(10);

/// Where to look (tests point these at captured trees).
#[derive(Clone, Debug)]
pub struct HealthPoller {
    pub sysfs: PathBuf,
    pub dev: PathBuf,
    pub every: Duration,
    last: Option<Instant>,
}

impl Default for HealthPoller {
    fn default() -> Self {
        HealthPoller { sysfs: "/sys".into(), dev: "/dev".into(), every: POLL_EVERY, last: None }
    }
}

impl HealthPoller {
    /// Polls when the last poll is older than `every` (the first call always polls).
    pub fn poll(&mut self, model: &mut HealthModel) {
        if self.last.is_some_and(|t| t.elapsed() < self.every) {
            return;
        }
        self.last = Some(Instant::now());
        let names: Vec<String> = model.devices.keys().cloned().collect();
        for name in names {
            model.set_health_info(&name, mailbox::read_health_info(&self.dev, &name));
            let trigger = self.sysfs.join("bus/cxl/devices").join(&name).join("trigger_poison_list");
            let problem = if !trigger.exists() {
                Some(format!(
                    "not supported by this device: {} is absent (the device does not advertise Get Poison List)",
                    trigger.display()
                ))
            } else {
                std::fs::write(&trigger, "1").err().map(|e| format!("writing {}: {e} (needs root)", trigger.display()))
            };
            if let Some(p) = &problem {
                tracing::debug!("poison list of {name}: {p}");
            }
            model.poison_list_read(&name, problem);
        }
        model.edac = edac::read(&self.sysfs);
    }
}
