//! The Debian mirror this machine already uses, read from its own apt sources
//! (`/etc/apt/sources.list`, `/etc/apt/sources.list.d/*.list` and deb822 `*.sources`), so the
//! guest's packages come from wherever the host's come from (a cluster's own mirror included).
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

/// Debian's release names and aliases: a source with one of these suites (or its `-updates`,
/// `-backports`, `-proposed-updates`) is Debian's archive, not a third party's repository.
const DEBIAN_SUITES: &[&str] = &[
    "buster",
    "bullseye",
    "bookworm",
    "trixie",
    "forky",
    "duke",
    "sid",
    "oldoldstable",
    "oldstable",
    "stable",
    "testing",
    "unstable",
    "experimental",
];

/// One source: where and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub uri: String,
    pub suite: String,
    pub components: Vec<String>,
}

/// The sources of a one-line-style file (`deb [opts] URI SUITE COMPONENT...`).
pub fn parse_list(text: &str) -> Vec<Source> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some(rest) = line.strip_prefix("deb ").or_else(|| line.strip_prefix("deb\t")) else { continue };
        let mut rest = rest.trim_start();
        if rest.starts_with('[') {
            let Some(end) = rest.find(']') else { continue };
            rest = &rest[end + 1..];
        }
        let mut words = rest.split_whitespace();
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else { continue };
        out.push(Source {
            uri: uri.to_string(),
            suite: suite.to_string(),
            components: words.map(String::from).collect(),
        });
    }
    out
}

/// The sources of a deb822-style file: stanzas of `Types`, `URIs`, `Suites`, `Components`
/// (and `Enabled: no` to switch one off).
pub fn parse_deb822(text: &str) -> Vec<Source> {
    let mut out = Vec::new();
    let mut stanza: Vec<(String, String)> = Vec::new();
    let lines = text.lines().chain(std::iter::once(""));
    for line in lines {
        if line.trim_start().starts_with('#') {
            continue;
        }
        if line.trim().is_empty() {
            out.extend(stanza_sources(&stanza));
            stanza.clear();
        } else if line.starts_with([' ', '\t']) {
            // A continuation line belongs to the field above it.
            if let Some((_, v)) = stanza.last_mut() {
                v.push(' ');
                v.push_str(line.trim());
            }
        } else if let Some((k, v)) = line.split_once(':') {
            stanza.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    out
}

fn stanza_sources(stanza: &[(String, String)]) -> Vec<Source> {
    let get = |k: &str| stanza.iter().find(|(key, _)| key == k).map_or("", |(_, v)| v.as_str());
    let words = |k: &str| get(k).split_whitespace().map(String::from).collect::<Vec<_>>();
    if !words("types").iter().any(|t| t == "deb") || get("enabled").eq_ignore_ascii_case("no") {
        return Vec::new();
    }
    let components = words("components");
    let mut out = Vec::new();
    for uri in words("uris") {
        for suite in words("suites") {
            out.push(Source { uri: uri.clone(), suite, components: components.clone() });
        }
    }
    out
}

/// Whether a source is Debian's main archive (not security updates, not a third party).
pub fn is_debian_archive(s: &Source) -> bool {
    let release = s.suite.split(['-', '/']).next().unwrap_or("");
    let security = s.suite.ends_with("-security") || s.uri.trim_end_matches('/').ends_with("-security");
    DEBIAN_SUITES.contains(&release)
        && !security
        && s.components.iter().any(|c| c == "main")
        && (s.uri.starts_with("http://") || s.uri.starts_with("https://") || s.uri.starts_with("file:/"))
}

/// The first Debian archive among `files` (path, text), in apt's order, without a trailing `/`.
pub fn mirror_of(files: &[(PathBuf, String)]) -> Option<String> {
    files
        .iter()
        .flat_map(|(p, t)| if p.extension().is_some_and(|e| e == "sources") { parse_deb822(t) } else { parse_list(t) })
        .find(is_debian_archive)
        .map(|s| s.uri.trim_end_matches('/').to_string())
}

/// The Debian mirror of this machine's apt sources under `etc_apt` (normally `/etc/apt`).
pub fn debian_mirror(etc_apt: &Path) -> Result<String> {
    let mut files = Vec::new();
    let main = etc_apt.join("sources.list");
    if let Ok(t) = std::fs::read_to_string(&main) {
        files.push((main, t));
    }
    // apt reads the parts in name order; other suffixes (`.disabled`, `.save`) are not sources.
    let mut parts: Vec<PathBuf> = std::fs::read_dir(etc_apt.join("sources.list.d"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    parts.retain(|p| p.extension().is_some_and(|e| e == "list" || e == "sources"));
    parts.sort();
    for p in parts {
        if let Ok(t) = std::fs::read_to_string(&p) {
            files.push((p, t));
        }
    }
    match mirror_of(&files) {
        Some(m) => Ok(m),
        None => bail!(
            "no Debian archive (a `deb` source of a Debian release with `main`) in {0}/sources.list or {0}/sources.list.d/*.list|*.sources: \
             add this machine's Debian mirror there (e.g. `deb http://<mirror>/debian bookworm main`)",
            etc_apt.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEB822: &str = "Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example.org/debian-security
Suites: bookworm-security
Components: main
";

    const THIRD_PARTY: &str = "Types: deb
URIs: https://deb.vendor.example/node_20.x
Suites: nodistro
Components: main
";

    #[test]
    fn deb822_stanzas_give_every_uri_and_suite() {
        let s = parse_deb822(DEB822);
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].uri.as_str(), s[0].suite.as_str()), ("http://mirror.example.org/debian", "bookworm"));
        assert_eq!(s[2].suite, "bookworm-security");
        assert!(is_debian_archive(&s[0]) && is_debian_archive(&s[1]) && !is_debian_archive(&s[2]));
        assert!(parse_deb822("Types: deb\nURIs: http://m/debian\nSuites: trixie\nComponents: main\nEnabled: no\n")
            .is_empty());
        assert!(parse_deb822("Types: deb-src\nURIs: http://m/debian\nSuites: trixie\nComponents: main\n").is_empty());
    }

    #[test]
    fn one_line_sources_with_options_and_comments() {
        let text = "# deb http://old.example/debian buster main\n\
                    deb-src http://src.example/debian bookworm main\n\
                    deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] https://cloud.example/apt cloud-sdk-bookworm main\n\
                    deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://10.0.0.5/debian/ bookworm main contrib # ours\n";
        let s = parse_list(text);
        assert_eq!(s.len(), 2);
        assert!(!is_debian_archive(&s[0]), "a vendor suite is not Debian's: {:?}", s[0]);
        assert_eq!(s[1].components, ["main", "contrib"]);
        assert_eq!(
            mirror_of(&[(PathBuf::from("/etc/apt/sources.list"), text.into())]).as_deref(),
            Some("http://10.0.0.5/debian")
        );
    }

    #[test]
    fn the_first_debian_archive_in_apt_order_wins() {
        let files = vec![
            (PathBuf::from("/etc/apt/sources.list.d/a-vendor.sources"), THIRD_PARTY.to_string()),
            (PathBuf::from("/etc/apt/sources.list.d/debian.sources"), DEB822.to_string()),
        ];
        assert_eq!(mirror_of(&files).as_deref(), Some("http://mirror.example.org/debian"));
        assert_eq!(mirror_of(&files[..1]), None);
        assert_eq!(mirror_of(&[]), None);
    }

    #[test]
    fn a_machine_without_a_debian_source_gets_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("xtask-apt-sources-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sources.list.d")).expect("temp dir");
        std::fs::write(dir.join("sources.list.d/vendor.sources"), THIRD_PARTY).expect("write");
        std::fs::write(dir.join("sources.list.d/debian.sources.disabled"), DEB822).expect("write");
        let e = debian_mirror(&dir).expect_err("no Debian source").to_string();
        assert!(e.starts_with("no Debian archive") && e.contains("sources.list.d"), "{e}");
        std::fs::write(dir.join("sources.list"), "deb http://mirror.example.org/debian trixie main\n").expect("write");
        assert_eq!(debian_mirror(&dir).expect("a mirror"), "http://mirror.example.org/debian");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
