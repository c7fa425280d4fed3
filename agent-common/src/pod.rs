//! `aya::Pod` for the shared types (user side only).
use crate::{event::*, layout::*, maps::*, stack::PyProcess};

// SAFETY: all of these are #[repr(C)], Copy, made of integers, with explicit padding.
unsafe impl aya::Pod for TgidPending {}
unsafe impl aya::Pod for CpuBudget {}
unsafe impl aya::Pod for FaultKey {}
unsafe impl aya::Pod for TaskFaults {}
unsafe impl aya::Pod for TaskLayout {}
unsafe impl aya::Pod for TgidNode {}
unsafe impl aya::Pod for TgidNodePending {}
unsafe impl aya::Pod for MigrateKey {}
unsafe impl aya::Pod for MigrateCounts {}
unsafe impl aya::Pod for Log2Hist {}
unsafe impl aya::Pod for PageLayout {}
unsafe impl aya::Pod for MigrateLayout {}
unsafe impl aya::Pod for EventHeader {}
unsafe impl aya::Pod for LifecycleEvent {}
unsafe impl aya::Pod for PolicyEvent {}
unsafe impl aya::Pod for RawTraceEvent {}
unsafe impl aya::Pod for HealthTraceEvent {}
unsafe impl aya::Pod for SiteBudget {}
unsafe impl aya::Pod for SiteSlot {}
unsafe impl aya::Pod for PageBaseSlot {}
unsafe impl aya::Pod for PyProcess {}
unsafe impl aya::Pod for crate::pinning::PinCall {}
unsafe impl aya::Pod for crate::pinning::PinKey {}
