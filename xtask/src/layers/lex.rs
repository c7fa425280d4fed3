//! Just enough of Rust's lexer to find paths: identifiers and the punctuation of `use` trees and
//! module blocks, with comments, strings and character literals dropped.

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Open,
    Close,
    Semi,
    Comma,
    /// `*` (a glob in a `use` tree)
    Star,
    /// `$` (so `$crate` in a macro is not taken for `crate`)
    Dollar,
    /// Anything else.
    Other,
}

/// A token and the line (from 1) it starts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub tok: Tok,
    pub line: usize,
}

pub fn tokens(src: &str) -> Vec<Token> {
    let b: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| b.get(i).copied().unwrap_or('\0');
    while i < b.len() {
        let c = b[i];
        let start_line = line;
        let push = |out: &mut Vec<Token>, tok| out.push(Token { tok, line: start_line });
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            // Block comments nest.
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(b[i] == '\n');
                    i += 1;
                }
            }
        } else if let Some(end) = raw_string_end(&b, i) {
            line += b[i..end].iter().filter(|&&c| c == '\n').count();
            i = end;
            push(&mut out, Tok::Other);
        } else if c == '"' || (c == 'b' && at(i + 1) == '"') || (c == 'c' && at(i + 1) == '"') {
            i += if c == '"' { 1 } else { 2 };
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                line += usize::from(at(i) == '\n');
                i += 1;
            }
            i += 1;
            push(&mut out, Tok::Other);
        } else if c == '\'' || (c == 'b' && at(i + 1) == '\'') {
            // A character literal ('x', '\n', '\u{1F600}', b'x') or a lifetime ('a).
            let j = if c == 'b' { i + 1 } else { i };
            if at(j + 1) == '\\' {
                let mut k = j + 2;
                while k < b.len() && b[k] != '\'' && b[k] != '\n' {
                    k += 1;
                }
                i = k + 1;
            } else if at(j + 2) == '\'' {
                i = j + 3;
            } else {
                // A lifetime or a label: skip the quote, the name follows as an identifier.
                i = j + 1;
            }
            push(&mut out, Tok::Other);
        } else if c.is_alphabetic() || c == '_' {
            let s = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            let word: String = b[s..i].iter().collect();
            let word = word.strip_prefix("r#").map(str::to_string).unwrap_or(word);
            push(&mut out, Tok::Ident(word));
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_' || (b[i] == '.' && at(i + 1).is_ascii_digit()))
            {
                i += 1;
            }
            push(&mut out, Tok::Other);
        } else {
            let tok = match c {
                ':' if at(i + 1) == ':' => {
                    i += 1;
                    Tok::PathSep
                }
                '{' => Tok::Open,
                '}' => Tok::Close,
                ';' => Tok::Semi,
                ',' => Tok::Comma,
                '*' => Tok::Star,
                '$' => Tok::Dollar,
                _ => Tok::Other,
            };
            i += 1;
            push(&mut out, tok);
        }
    }
    out
}

/// Where a raw string (`r"…"`, `r#"…"#`, `br#"…"#`) that starts at `i` ends, if one does.
fn raw_string_end(b: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if b.get(j) == Some(&'b') || b.get(j) == Some(&'c') {
        j += 1;
    }
    if b.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while b.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if b.get(j) != Some(&'"') {
        return None;
    }
    // The character before must not continue an identifier (`for"` is not a raw string).
    if i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_') {
        return None;
    }
    j += 1;
    while j < b.len() {
        if b[j] == '"' && b[j + 1..].iter().take(hashes).filter(|&&c| c == '#').count() == hashes {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(b.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(src: &str) -> Vec<String> {
        tokens(src)
            .into_iter()
            .filter_map(|t| match t.tok {
                Tok::Ident(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn comments_strings_and_chars_hide_their_words() {
        let src =
            "a // crate::x\n/* crate::y /* nested */ crate::z */ b \"crate::s\" r#\"crate::\" still\"# c '{' '\\'' b'x' d";
        assert_eq!(idents(src), ["a", "b", "c", "d"]);
    }

    #[test]
    fn lifetimes_do_not_swallow_code() {
        assert_eq!(
            idents("fn f<'a>(x: &'a str) -> Frame<'_> { crate }"),
            ["fn", "f", "a", "x", "a", "str", "Frame", "_", "crate"]
        );
    }

    #[test]
    fn lines_are_counted_through_comments_and_strings() {
        let t = tokens("a\n/* x\n y */ \"s\ns\"\nb");
        assert_eq!(t.first().map(|t| t.line), Some(1));
        assert_eq!(t.last().map(|t| (t.tok.clone(), t.line)), Some((Tok::Ident("b".into()), 5)));
    }
}
