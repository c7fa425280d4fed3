//! Reports over recorded sessions: the analysis of one recording ([`analysis`], pure), its HTML
//! ([`html`], with [`svg`] charts), Markdown and JSON forms.
pub mod analysis;
pub mod html;
pub mod markdown;
pub mod svg;

#[cfg(test)]
mod tests;
