//! Text made safe inside HTML and SVG (element content and double-quoted attributes).

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
