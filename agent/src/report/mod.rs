//! Reports over recorded sessions: the analysis of one recording ([`analysis`], pure), its HTML
//! ([`html`], with [`svg`] charts), Markdown and JSON forms.
pub mod analysis;
pub mod diff;
pub mod html;
pub mod markdown;
pub mod svg;

#[cfg(test)]
pub(crate) mod tests;
