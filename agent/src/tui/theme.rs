//! Colours that read on dark and light backgrounds: only the terminal's own palette colours
//! (which users tune to their background), never white or black text, and emphasis by
//! modifiers (bold, reversed) rather than by brightness.
use ratatui::style::{Color, Modifier, Style};

use crate::topology::Tier;

pub fn title() -> Style {
    Style::default().add_modifier(Modifier::BOLD)
}

pub fn header() -> Style {
    Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
}

pub fn selected() -> Style {
    Style::default().add_modifier(Modifier::REVERSED)
}

pub fn dim() -> Style {
    Style::default().add_modifier(Modifier::DIM)
}

pub fn warn() -> Style {
    Style::default().fg(Color::Yellow).add_modifier(Modifier::BOLD)
}

pub fn bad() -> Style {
    Style::default().fg(Color::Red).add_modifier(Modifier::BOLD)
}

pub fn good() -> Style {
    Style::default().fg(Color::Green)
}

pub fn accent() -> Style {
    Style::default().fg(Color::Blue).add_modifier(Modifier::BOLD)
}

pub fn tier(t: Tier) -> Style {
    match t {
        Tier::Dram => Style::default().fg(Color::Green),
        Tier::Cxl => Style::default().fg(Color::Magenta),
        Tier::Gpu => Style::default().fg(Color::Cyan),
        Tier::Far => Style::default().fg(Color::Yellow),
        Tier::Unknown => Style::default(),
    }
}

pub fn promotion() -> Style {
    Style::default().fg(Color::Green)
}

pub fn demotion() -> Style {
    Style::default().fg(Color::Magenta)
}
