//! Counting what the test binaries ran, from libtest's own lines: `test NAME ... ignored, WHY`
//! and `test result: ok. P passed; F failed; I ignored; M measured; X filtered out`.
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    pub filtered: u64,
    /// Why -> the tests ignored for it.
    pub ignored_why: BTreeMap<String, Vec<String>>,
    /// The tests that failed, by name.
    pub failed_names: Vec<String>,
}

impl Tally {
    /// Reads a test run's stdout.
    pub fn parse(out: &str) -> Tally {
        let mut t = Tally::default();
        for line in out.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("test result: ") {
                let count = |what: &str| -> u64 {
                    rest.split(';')
                        .map(|p| p.trim().trim_start_matches("ok.").trim_start_matches("FAILED.").trim())
                        .find_map(|p| p.strip_suffix(what).and_then(|n| n.trim().parse().ok()))
                        .unwrap_or(0)
                };
                t.passed += count(" passed");
                t.failed += count(" failed");
                t.ignored += count(" ignored");
                t.filtered += count(" filtered out");
            } else if let Some((name, status)) = line.strip_prefix("test ").and_then(|l| l.split_once(" ... ")) {
                if status == "FAILED" {
                    t.failed_names.push(name.to_string());
                }
                if let Some(why) = status.strip_prefix("ignored") {
                    let why = why.trim_start_matches(',').trim();
                    let why = if why.is_empty() { "no reason given" } else { why };
                    t.ignored_why.entry(why.to_string()).or_default().push(name.to_string());
                }
            }
        }
        t
    }

    /// One line: how many ran, passed and were ignored.
    pub fn line(&self) -> String {
        format!(
            "{} ran, {} passed, {} failed, {} ignored{}",
            self.passed + self.failed,
            self.passed,
            self.failed,
            self.ignored,
            if self.filtered > 0 { format!(", {} filtered out", self.filtered) } else { String::new() }
        )
    }

    /// The failed tests, one per line.
    pub fn failed_lines(&self) -> Vec<String> {
        self.failed_names.clone()
    }

    /// The ignored tests by reason, one line per reason.
    pub fn ignored_lines(&self) -> Vec<String> {
        self.ignored_why
            .iter()
            .map(|(why, names)| format!("{} ignored: {why} ({})", names.len(), names.join(", ")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "
running 3 tests
test a::one ... ok
test a::two ... ignored, needs root and TIERSCOPE_BIN (cargo xtask test runs it)
test a::three ... ignored

test result: ok. 1 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.01s

running 2 tests
test b ... ok
test c ... ok

test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 5 filtered out; finished in 1.20s
";

    #[test]
    fn sums_the_summary_lines_and_keeps_the_reasons() {
        let t = Tally::parse(OUT);
        assert_eq!((t.passed, t.failed, t.ignored, t.filtered), (3, 0, 2, 5));
        assert_eq!(t.line(), "3 ran, 3 passed, 0 failed, 2 ignored, 5 filtered out");
        assert_eq!(
            t.ignored_lines(),
            [
                "1 ignored: needs root and TIERSCOPE_BIN (cargo xtask test runs it) (a::two)",
                "1 ignored: no reason given (a::three)"
            ]
        );
    }

    #[test]
    fn a_failed_summary_counts_too() {
        let t = Tally::parse("test result: FAILED. 4 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out");
        assert_eq!((t.passed, t.failed), (4, 1));
        let t = Tally::parse("test churn::ten ... FAILED\ntest churn::one ... ok\n");
        assert_eq!(t.failed_lines(), vec!["churn::ten".to_string()]);
        assert_eq!(Tally::parse("no tests here"), Tally::default());
    }
}
