//! Reports over recorded sessions: the analysis of one recording ([`analysis`], pure), its HTML
//! ([`html`], with [`svg`] charts), Markdown and JSON forms, the insights that opened
//! ([`insights`]); the forms other tools open: a pprof
//! profile of the CXL allocation sites ([`pprof`]) and Perfetto counter tracks ([`perfetto`]).
pub mod analysis;
pub mod diff;
pub mod escape;
pub mod html;
pub mod insights;
pub mod markdown;
pub mod perfetto;
pub mod pprof;
#[cfg(test)]
mod recording_insight_tests;
pub mod svg;

#[cfg(test)]
pub(crate) mod tests;
