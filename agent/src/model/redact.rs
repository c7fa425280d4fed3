//! Secrets out of command lines and environment values before they are shown or stored.
//!
//! Training command lines carry tokens (`--hf_token=...`, `WANDB_API_KEY=...`, a JSON blob of
//! environment settings, a URL with a password). [`Redaction::redact`] replaces the secret part
//! with [`MASK`] and keeps the rest, so a command line stays recognisable. Pure: the collector
//! applies it once, where a command line enters the model, so the snapshot, the TUI, the export and
//! recordings only ever see the redacted text; anything else that shows or stores such text from
//! elsewhere calls it too.
use std::borrow::Cow;
use std::sync::OnceLock;

use regex::{Captures, Regex};

pub use super::secret_args::MASK;
use super::secret_args::{mask_arguments, mask_words, secret_key, SECRET_WORDS};

/// Whether a match is left as it is: its key (`k`) names no secret (`max_new_tokens=512`).
type Keep = fn(&Captures) -> bool;

fn ordinary_key(c: &Captures) -> bool {
    !c.name("k").is_some_and(|k| secret_key(k.as_str()))
}

/// The default rules: (pattern, replacement, keep). `${k}` keeps the key, the value becomes
/// the mask.
fn default_rules() -> Vec<(String, String, Option<Keep>)> {
    let key = format!(r"[A-Za-z0-9_.-]*(?:{SECRET_WORDS})[A-Za-z0-9_.-]*");
    let keyed: Option<Keep> = Some(ordinary_key);
    let mask = |p: &str| (p.to_string(), MASK.to_string(), None);
    let kept = |p: &str| (p.to_string(), format!("${{k}}{MASK}"), None);
    vec![
        // JSON or Python dict members: "HF_TOKEN": "hf_x", 'api_key': 'x' (escaped quotes too).
        (format!(r#"(?i)(?P<k>"{key}"\s*:\s*)"(?:[^"\\]|\\.)*""#), format!(r#"${{k}}"{MASK}""#), keyed),
        // The same JSON quoted inside a string: {\"HF_TOKEN\": \"x\"}.
        (format!(r#"(?i)(?P<k>\\"{key}\\"\s*:\s*)\\"(?:[^"\\]|\\[^"])*\\""#), format!(r#"${{k}}\"{MASK}\""#), keyed),
        (format!(r"(?i)(?P<k>'{key}'\s*:\s*)'[^']*'"), format!("${{k}}'{MASK}'"), keyed),
        // Authorization headers: Bearer/Basic/Token credentials.
        kept(r"(?i)(?P<k>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]+"),
        // URL user:password@host (a password with an unescaped `@` up to the last one).
        (r"(?P<k>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:)[^\s/?#]+@".into(), format!("${{k}}{MASK}@"), None),
        // Signed URLs: Azure SAS `sig=`, `X-Amz-Signature=`, `X-Goog-Signature=`, `Signature=`.
        (
            r"(?i)(?P<k>(?:^|[?&;\s])(?:sig|[A-Za-z0-9_-]*signature)=)[^&\s\x22'#;]+".into(),
            format!("${{k}}{MASK}"),
            None,
        ),
        // KEY=value, --key=value, key: value (quoted or bare); `token=` in a query too.
        (format!(r#"(?i)(?P<k>\b{key}\s*[=:]\s*)(?:"[^"]*"|'[^']*'|[^\s"',;&]+)"#), format!("${{k}}{MASK}"), keyed),
        // OpenSSL's `-pass pass:VALUE` (and -passin, -passout).
        kept(r"(?P<k>\bpass:)[^\s\x22']+"),
        // Slack webhooks: the path is the secret.
        kept(r"(?P<k>hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]+"),
        // Token shapes that need no key: Hugging Face, GitHub, OpenAI and Anthropic (`sk-`),
        // Stripe, AWS access keys, JWTs, Slack, GitLab, Google, npm, PyPI, Databricks, SendGrid,
        // DigitalOcean, Replicate.
        mask(r"\bhf_[A-Za-z0-9]{20,}"),
        mask(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
        mask(r"\bsk-[A-Za-z0-9_-]{20,}"),
        mask(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
        mask(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
        mask(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        mask(r"\bx(?:ox[abposre]|app)-[A-Za-z0-9-]{10,}"),
        mask(r"\bgl(?:pat|dt|rt|ptt|cbt|oas|soat|ft|imt|agent|ffct)-[A-Za-z0-9_-]{20,}"),
        mask(r"\bAIza[0-9A-Za-z_-]{35}"),
        mask(r"\bya29\.[0-9A-Za-z_-]{20,}"),
        mask(r"\bnpm_[A-Za-z0-9]{36}"),
        mask(r"\bpypi-[A-Za-z0-9_-]{50,}"),
        mask(r"\bdapi[0-9a-f]{32}"),
        mask(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
        mask(r"\bdop_v1_[a-f0-9]{64}"),
        mask(r"\br8_[A-Za-z0-9]{30,}"),
    ]
}

#[derive(Debug, thiserror::Error)]
#[error("redaction pattern {pattern:?} is not a valid regular expression: {problem}")]
pub struct RedactError {
    pub pattern: String,
    pub problem: String,
}

/// One rule: what it matches, what a match becomes, and when a match is left as it is.
#[derive(Clone, Debug)]
struct Rule {
    re: Regex,
    with: String,
    keep: Option<Keep>,
}

/// An ordered set of rules; the defaults plus any the configuration adds. After the rules, the
/// words of the text that are secrets because of the word before them
/// ([`super::secret_args::mask_arguments`]).
#[derive(Clone, Debug)]
pub struct Redaction {
    rules: Vec<Rule>,
}

impl Default for Redaction {
    fn default() -> Redaction {
        static DEFAULT: OnceLock<Redaction> = OnceLock::new();
        DEFAULT
            .get_or_init(|| Redaction {
                rules: default_rules()
                    .into_iter()
                    .map(|(p, with, keep)| Rule {
                        re: Regex::new(&p).expect("the built-in redaction rules compile"),
                        with,
                        keep,
                    })
                    .collect(),
            })
            .clone()
    }
}

impl Redaction {
    /// The defaults plus `extra` patterns (each whole match is masked).
    pub fn with_extra(extra: &[String]) -> Result<Redaction, RedactError> {
        let mut r = Redaction::default();
        for p in extra {
            // The regex crate's message is several lines (the pattern, a caret, the error): its
            // last line says what is wrong.
            let re = Regex::new(p).map_err(|e| {
                let text = e.to_string();
                let last = text.lines().map(str::trim).filter(|l| !l.is_empty()).next_back();
                RedactError { pattern: p.clone(), problem: last.unwrap_or("invalid").to_string() }
            })?;
            r.rules.push(Rule { re, with: MASK.into(), keep: None });
        }
        Ok(r)
    }

    /// `text` with every secret masked; borrowed when there was none.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for rule in &self.rules {
            if rule.re.is_match(&out) {
                let replaced = rule.re.replace_all(&out, |c: &Captures| match rule.keep {
                    Some(keep) if keep(c) => c[0].to_string(),
                    _ => {
                        let mut s = String::new();
                        c.expand(&rule.with, &mut s);
                        s
                    }
                });
                if replaced != out {
                    out = Cow::Owned(replaced.into_owned());
                }
            }
        }
        match mask_words(&out) {
            Some(masked) => Cow::Owned(masked),
            None => out,
        }
    }
}

impl Redaction {
    /// A command's arguments (`record -- CMD ARGS`) with every secret masked: each argument
    /// alone, the argument after a secret flag or a tool's password flag (`--api-key VALUE`,
    /// `sshpass -p VALUE`), and when a secret still shows once the arguments are joined with
    /// spaces (a JSON blob the shell split), the joined text redacted as one argument. The result
    /// joined with spaces is what [`Redaction::redact`] of it gives back unchanged.
    pub fn redact_args(&self, args: &[String]) -> Vec<String> {
        let each: Vec<String> = args.iter().map(|a| self.redact(a).into_owned()).collect();
        let words: Vec<&str> = each.iter().map(String::as_str).collect();
        let out: Vec<String> =
            mask_arguments(&words).into_iter().zip(&each).map(|(m, a)| m.unwrap_or_else(|| a.clone())).collect();
        let joined = out.join(" ");
        match self.redact(&joined) {
            Cow::Owned(all) if all != joined => vec![all],
            _ => out,
        }
    }
}

/// [`Redaction::redact_args`] with the default rules.
pub fn redact_args(args: &[String]) -> Vec<String> {
    static DEFAULT: OnceLock<Redaction> = OnceLock::new();
    DEFAULT.get_or_init(Redaction::default).redact_args(args)
}

/// [`Redaction::redact`] with the default rules.
pub fn redact(text: &str) -> Cow<'_, str> {
    static DEFAULT: OnceLock<Redaction> = OnceLock::new();
    DEFAULT.get_or_init(Redaction::default).redact(text)
}

#[cfg(test)]
#[path = "redact_tests.rs"]
mod tests;
