//! The table of allowed edges between the agent's modules, read from ARCHITECTURE.md itself so
//! the document and the check cannot drift.
use std::collections::{BTreeMap, BTreeSet};

/// The heading the table follows.
pub const HEADING: &str = "## Layers";

/// module -> the modules it may use.
pub type Allowed = BTreeMap<String, BTreeSet<String>>;

/// Reads the first Markdown table after [`HEADING`]: one row per module, its name in backticks
/// in the first column and the modules it may use, in backticks, in the second (none: `-`).
pub fn parse(markdown: &str) -> Result<Allowed, String> {
    let after = markdown
        .lines()
        .skip_while(|l| l.trim() != HEADING)
        .skip(1)
        .skip_while(|l| !l.trim_start().starts_with('|'))
        .take_while(|l| l.trim_start().starts_with('|'));
    let mut allowed = Allowed::new();
    for (n, row) in after.enumerate() {
        let cells: Vec<&str> = row.trim().trim_matches('|').split('|').collect();
        // The header row and the `|---|---|` rule.
        if n < 2 {
            continue;
        }
        let [module, may_use] = cells[..] else {
            return Err(format!("ARCHITECTURE.md, {HEADING}: row `{}` does not have two cells", row.trim()));
        };
        let names = |cell: &str| -> Vec<String> { cell.split('`').skip(1).step_by(2).map(str::to_string).collect() };
        let [module] = &names(module)[..] else {
            return Err(format!("ARCHITECTURE.md, {HEADING}: row `{}` names no module in backticks", row.trim()));
        };
        if allowed.insert(module.clone(), names(may_use).into_iter().collect()).is_some() {
            return Err(format!("ARCHITECTURE.md, {HEADING}: `{module}` has two rows"));
        }
    }
    if allowed.is_empty() {
        return Err(format!("ARCHITECTURE.md has no table under `{HEADING}`"));
    }
    Ok(allowed)
}

/// A cycle among the table's own edges (`a -> b -> a`), if it has one: layers go one way.
pub fn cycle(allowed: &Allowed) -> Option<Vec<String>> {
    fn visit(n: &str, a: &Allowed, path: &mut Vec<String>, done: &mut BTreeSet<String>) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for m in a.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, a, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    allowed.keys().find_map(|k| visit(k, allowed, &mut Vec::new(), &mut done))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "# x\n\n## Layers\n\nText.\n\n| module | may use |\n|---|---|\n| `model` | `health`, `topology` |\n| `health` | `topology` |\n| `topology` | - |\n\n| other | table |\n";

    #[test]
    fn reads_the_rows_under_the_heading() {
        let a = parse(DOC).expect("the sample table");
        assert_eq!(a.len(), 3);
        assert_eq!(a["model"], ["health", "topology"].into_iter().map(String::from).collect());
        assert!(a["topology"].is_empty());
        assert_eq!(cycle(&a), None);
    }

    #[test]
    fn a_missing_table_or_a_bad_row_is_an_error() {
        assert!(parse("# no table\n").expect_err("not a table").contains("no table"));
        assert!(parse("## Layers\n| a | b |\n|---|---|\n| model | x |\n")
            .expect_err("not a table")
            .contains("names no module"));
        assert!(parse("## Layers\n| a | b |\n|---|---|\n| `m` | `x` | `y` |\n")
            .expect_err("not a table")
            .contains("two cells"));
        assert!(parse("## Layers\n| a | b |\n|---|---|\n| `m` | |\n| `m` | |\n")
            .expect_err("not a table")
            .contains("two rows"));
    }

    #[test]
    fn finds_a_cycle_in_the_table() {
        let a =
            parse("## Layers\n| a | b |\n|---|---|\n| `a` | `b` |\n| `b` | `c` |\n| `c` | `a` |\n").expect("a table");
        assert_eq!(cycle(&a), Some(["a", "b", "c", "a"].map(String::from).to_vec()));
    }
}
