//! The paths a source file names into its own crate: every `use crate::…`/`use super::…` tree,
//! and every `crate::…`/`super::…` path written inline, resolved to absolute module paths (so a
//! `super::` inside `mod tests { … }` means the file's own module).
use super::lex::{tokens, Tok, Token};

/// One name a file takes from its crate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    /// Absolute path from the crate root, e.g. `["collect", "procfs", "NumaResidency"]`.
    pub path: Vec<String>,
    /// As written, e.g. `crate::collect::procfs::NumaResidency` or `super::super::x`.
    pub written: String,
    pub line: usize,
}

/// Everything `src` takes from its crate, for a file whose module path is `module` (`[]` for
/// the crate root, `["tui", "screen"]` for `tui/screen.rs`).
pub fn taken(src: &str, module: &[String]) -> Vec<Taken> {
    let t = tokens(src);
    let mut out = Vec::new();
    // Inline modules: (name, brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        let here: Vec<String> = module.iter().cloned().chain(inline.iter().map(|(n, _)| n.clone())).collect();
        match &t[i].tok {
            Tok::Open => depth += 1,
            Tok::Close => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(w) if w == "mod" => {
                if let (Some(Tok::Ident(name)), Some(Tok::Open)) =
                    (t.get(i + 1).map(|x| &x.tok), t.get(i + 2).map(|x| &x.tok))
                {
                    inline.push((name.clone(), depth + 1));
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Tok::Ident(w) if w == "use" => {
                let end = t[i..].iter().position(|x| x.tok == Tok::Semi).map_or(t.len(), |p| i + p);
                for (segs, written) in use_tree(&t[i + 1..end]) {
                    if let Some(path) = resolve(&segs, &here) {
                        out.push(Taken { path, written, line: t[i].line });
                    }
                }
                i = end + 1;
                continue;
            }
            Tok::Ident(w)
                if (w == "crate" || w == "super")
                    && !matches!(i.checked_sub(1).map(|p| &t[p].tok), Some(Tok::Dollar | Tok::PathSep))
                    && t.get(i + 1).map(|x| &x.tok) == Some(&Tok::PathSep) =>
            {
                let (segs, next) = inline_path(&t, i);
                if let Some(path) = resolve(&segs, &here) {
                    out.push(Taken { path, written: segs.join("::"), line: t[i].line });
                }
                i = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// `crate::a::b` from `t[i]` on: the identifiers joined by `::`, and the index after them.
fn inline_path(t: &[Token], mut i: usize) -> (Vec<String>, usize) {
    let mut segs = Vec::new();
    while let Some(Tok::Ident(w)) = t.get(i).map(|x| &x.tok) {
        segs.push(w.clone());
        if t.get(i + 1).map(|x| &x.tok) == Some(&Tok::PathSep) {
            i += 2;
        } else {
            i += 1;
            break;
        }
    }
    (segs, i)
}

/// The leaves of a `use` tree (the tokens between `use` and `;`), each as its segments and as
/// written. `a::{b, c::{d as e, self}, *}` gives `a::b`, `a::c::d`, `a::c`, `a`.
fn use_tree(t: &[Token]) -> Vec<(Vec<String>, String)> {
    // Leading visibility is not part of the tree: `pub use`, `pub(crate) use` come before `use`.
    let mut out = Vec::new();
    let mut pos = 0;
    tree(t, &mut pos, &[], &mut out);
    out.into_iter().map(|s| (s.clone(), s.join("::"))).collect()
}

fn tree(t: &[Token], pos: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut segs = prefix.to_vec();
    let mut consumed = false;
    // An absolute `::a` path names another crate: not ours.
    if *pos == 0 && t.first().map(|x| &x.tok) == Some(&Tok::PathSep) {
        *pos = t.len();
        return;
    }
    while *pos < t.len() {
        if !matches!(t[*pos].tok, Tok::Comma | Tok::Close) {
            consumed = true;
        }
        match &t[*pos].tok {
            Tok::Ident(w) if w == "as" => {
                *pos += 2; // `as name`
            }
            Tok::Ident(w) => {
                if w != "self" || segs.is_empty() {
                    segs.push(w.clone());
                }
                *pos += 1;
            }
            Tok::PathSep | Tok::Star => *pos += 1,
            Tok::Open => {
                *pos += 1;
                loop {
                    tree(t, pos, &segs, out);
                    match t.get(*pos).map(|x| &x.tok) {
                        Some(Tok::Comma) => *pos += 1,
                        Some(Tok::Close) => {
                            *pos += 1;
                            return;
                        }
                        _ => return,
                    }
                }
            }
            Tok::Comma | Tok::Close => break,
            _ => *pos += 1,
        }
    }
    // `a::{self}` leaves `a` itself; `a::{b,}` has an empty leaf after its comma.
    if consumed && !segs.is_empty() {
        out.push(segs);
    }
}

/// An absolute path from the crate root for `segs` written in module `here`; `None` for paths
/// into other crates.
fn resolve(segs: &[String], here: &[String]) -> Option<Vec<String>> {
    let first = segs.first()?.as_str();
    let (mut base, mut rest): (Vec<String>, &[String]) = match first {
        "crate" => (Vec::new(), &segs[1..]),
        "super" | "self" => (here.to_vec(), segs),
        _ => return None,
    };
    while let Some(s) = rest.first() {
        match s.as_str() {
            "super" => {
                base.pop();
            }
            "self" => {}
            _ => break,
        }
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(src: &str, module: &[&str]) -> Vec<String> {
        let m: Vec<String> = module.iter().map(|s| s.to_string()).collect();
        taken(src, &m).into_iter().map(|t| t.path.join("::")).collect()
    }

    #[test]
    fn use_trees_expand_to_their_leaves() {
        let src = "use crate::{a::{b, c::{d as e, self}}, f::*};\nuse std::io;\npub(crate) use super::g;";
        assert_eq!(paths(src, &["m", "n"]), ["a::b", "a::c::d", "a::c", "f", "m::g"]);
    }

    #[test]
    fn inline_paths_and_lines() {
        let src = "fn f() {\n    let x = crate::model::Model::new();\n    $crate::no;\n    other::crate_x;\n}";
        let t = taken(src, &["tui".into()]);
        assert_eq!(t.len(), 1);
        assert_eq!(
            (t[0].path.join("::"), t[0].written.as_str(), t[0].line),
            ("model::Model::new".into(), "crate::model::Model::new", 2)
        );
    }

    #[test]
    fn super_climbs_from_the_module_it_is_written_in() {
        let src = "use super::a;\nmod tests {\n    use super::*;\n    use super::super::b;\n}\nfn g() { super::c(); }";
        assert_eq!(paths(src, &["x", "y"]), ["x::a", "x::y", "x::b", "x::c"]);
    }

    #[test]
    fn other_crates_are_not_taken() {
        assert!(paths("use ::std::fmt; use tierscope_common::x; use self::y;", &["m"]) == ["m::y"]);
    }
}
