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

use regex::Regex;

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// Words that make a key's value secret: `HF_TOKEN`, `--api-key`, `db_password`, `Authorization`.
const SECRET_WORDS: &str = r"token|secret|passw(?:or)?d|passwd|pwd|api[_-]?key|apikey|access[_-]?key|private[_-]?key|auth|credential|cookie|key";

/// A key that names a secret, as one whole argument: `--api-key`, `-password`.
fn secret_flag() -> &'static Regex {
    static FLAG: OnceLock<Regex> = OnceLock::new();
    FLAG.get_or_init(|| {
        Regex::new(&format!(r"(?i)^--?[A-Za-z0-9_.-]*(?:{SECRET_WORDS})[A-Za-z0-9_.-]*$"))
            .expect("the built-in flag rule compiles")
    })
}

/// The default rules: (pattern, replacement). `${k}` keeps the key, the value becomes the mask.
fn default_rules() -> Vec<(String, String)> {
    let key = format!(r"[A-Za-z0-9_.-]*(?:{SECRET_WORDS})[A-Za-z0-9_.-]*");
    vec![
        // JSON or Python dict members: "HF_TOKEN": "hf_x", 'api_key': 'x' (escaped quotes too).
        (format!(r#"(?i)(?P<k>"{key}"\s*:\s*)"(?:[^"\\]|\\.)*""#), format!(r#"${{k}}"{MASK}""#)),
        // The same JSON quoted inside a string: {\"HF_TOKEN\": \"x\"}.
        (format!(r#"(?i)(?P<k>\\"{key}\\"\s*:\s*)\\"(?:[^"\\]|\\[^"])*\\""#), format!(r#"${{k}}\"{MASK}\""#)),
        (format!(r"(?i)(?P<k>'{key}'\s*:\s*)'[^']*'"), format!("${{k}}'{MASK}'")),
        // Authorization headers: Bearer/Basic/Token credentials.
        (r"(?i)(?P<k>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]+".into(), format!("${{k}}{MASK}")),
        // URL user:password@host.
        (r"(?P<k>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+@".into(), format!("${{k}}{MASK}@")),
        // KEY=value, --key=value, key: value (quoted or bare).
        (format!(r#"(?i)(?P<k>\b{key}\s*[=:]\s*)(?:"[^"]*"|'[^']*'|[^\s"',;&]+)"#), format!("${{k}}{MASK}")),
        // --key value, -password value.
        (format!(r"(?i)(?P<k>(?:^|\s)--?{key}\s+)[^\s-][^\s]*"), format!("${{k}}{MASK}")),
        // Token shapes that need no key: Hugging Face, GitHub, OpenAI-style, AWS access keys, JWTs.
        (r"\bhf_[A-Za-z0-9]{20,}".into(), MASK.into()),
        (r"\bgh[pousr]_[A-Za-z0-9]{20,}".into(), MASK.into()),
        (r"\bsk-[A-Za-z0-9_-]{20,}".into(), MASK.into()),
        (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b".into(), MASK.into()),
        (r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}".into(), MASK.into()),
    ]
}

#[derive(Debug, thiserror::Error)]
#[error("redaction pattern {pattern:?} is not a valid regular expression: {problem}")]
pub struct RedactError {
    pub pattern: String,
    pub problem: String,
}

/// An ordered set of rules; the defaults plus any the configuration adds.
#[derive(Clone, Debug)]
pub struct Redaction {
    rules: Vec<(Regex, String)>,
}

impl Default for Redaction {
    fn default() -> Redaction {
        static DEFAULT: OnceLock<Redaction> = OnceLock::new();
        DEFAULT
            .get_or_init(|| Redaction {
                rules: default_rules()
                    .into_iter()
                    .map(|(p, r)| (Regex::new(&p).expect("the built-in redaction rules compile"), r))
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
            let re = Regex::new(p).map_err(|e| RedactError { pattern: p.clone(), problem: e.to_string() })?;
            r.rules.push((re, MASK.into()));
        }
        Ok(r)
    }

    /// `text` with every secret masked; borrowed when there was none.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for (re, with) in &self.rules {
            if re.is_match(&out) {
                out = Cow::Owned(re.replace_all(&out, with.as_str()).into_owned());
            }
        }
        out
    }
}

impl Redaction {
    /// A command's arguments (`record -- CMD ARGS`) with every secret masked: each argument
    /// alone, the argument after a secret flag (`--api-key VALUE`), and when a secret still shows
    /// once the arguments are joined with spaces (a JSON blob the shell split), the joined text
    /// redacted as one argument. The result joined with spaces is what [`Redaction::redact`] of
    /// it gives back unchanged.
    pub fn redact_args(&self, args: &[String]) -> Vec<String> {
        let out: Vec<String> = args
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let after_flag = i > 0 && secret_flag().is_match(&args[i - 1]) && !a.starts_with('-');
                if after_flag {
                    MASK.to_string()
                } else {
                    self.redact(a).into_owned()
                }
            })
            .collect();
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
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_and_the_rest_is_kept() {
        for (raw, want) in [
            (
                "python train.py --hf_token=hf_abcdefghijklmnopqrstuvwx --lr 3e-4",
                "python train.py --hf_token=*** --lr 3e-4",
            ),
            ("python train.py --api-key sk-live-0123 --epochs 3", "python train.py --api-key *** --epochs 3"),
            (
                "env WANDB_API_KEY=abc123 DB_PASSWORD='p w' torchrun x.py",
                "env WANDB_API_KEY=*** DB_PASSWORD=*** torchrun x.py",
            ),
            ("curl -H Authorization: Bearer eyJabc.def.ghi http://x", "curl -H Authorization: *** *** http://x"),
            ("curl -H 'X: Bearer abc.def-ghi' http://x", "curl -H 'X: Bearer ***' http://x"),
            ("git clone https://user:s3cr3t@github.com/x/y", "git clone https://user:***@github.com/x/y"),
            (
                r#"launcher --env {"HF_TOKEN": "hf_x", "NCCL_DEBUG": "INFO", "aws_secret_access_key":"a\"b"}"#,
                r#"launcher --env {"HF_TOKEN": "***", "NCCL_DEBUG": "INFO", "aws_secret_access_key":"***"}"#,
            ),
            (r#"x --cfg {\"hf_token\": \"abc\", \"lr\": 1}"#, r#"x --cfg {\"hf_token\": \"***\", \"lr\": 1}"#),
            ("x {'api_key': 'abc', 'lr': '1'}", "x {'api_key': '***', 'lr': '1'}"),
            ("deploy ghp_0123456789abcdefghijABCDEFGHIJ now", "deploy *** now"),
            ("aws AKIAABCDEFGHIJKLMNOP", "aws ***"),
            (
                "python -m torch.distributed.run --nproc_per_node 8 train.py",
                "python -m torch.distributed.run --nproc_per_node 8 train.py",
            ),
        ] {
            assert_eq!(redact(raw), want, "{raw}");
        }
    }

    #[test]
    fn nothing_secret_borrows_and_extra_patterns_apply() {
        assert!(matches!(redact("python train.py --lr 3e-4"), Cow::Borrowed(_)));
        let r = Redaction::with_extra(&["corp-[0-9]{4}".into()]).expect("valid");
        assert_eq!(r.redact("run --id corp-1234 --token=x"), "run --id *** --token=***");
        let Err(e) = Redaction::with_extra(&["(".into()]) else { panic!("a bad pattern was accepted") };
        let e = e.to_string();
        assert!(e.starts_with("redaction pattern \"(\" is not a valid regular expression"), "{e}");
    }

    #[test]
    fn a_commands_arguments_are_masked_one_by_one_and_across_a_secret_flag() {
        let v = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        for (raw, want) in [
            (v("python train.py --hf_token=hf_SECRETabc123 --lr 3e-4"), v("python train.py --hf_token=*** --lr 3e-4")),
            (v("python train.py --hf_token hf_SECRETabc123 --lr 3e-4"), v("python train.py --hf_token *** --lr 3e-4")),
            (v("python x.py -password hunter2"), v("python x.py -password ***")),
            // A flag followed by another flag has no value to hide.
            (v("x --api-key --verbose"), v("x --api-key --verbose")),
            (v("env WANDB_API_KEY=abc123 torchrun x.py"), v("env WANDB_API_KEY=*** torchrun x.py")),
            (v("deploy ghp_0123456789abcdefghijABCDEFGHIJ"), v("deploy ***")),
            (
                vec!["launcher".into(), r#"{"HF_TOKEN": "hf_x"}"#.into()],
                vec!["launcher".into(), r#"{"HF_TOKEN": "***"}"#.into()],
            ),
            // The shell split a JSON blob: masked as one joined argument.
            (v(r#"launcher {"HF_TOKEN": "abc"}"#), vec![r#"launcher {"HF_TOKEN": "***"}"#.to_string()]),
            (v("torchrun --nproc_per_node 8 train.py"), v("torchrun --nproc_per_node 8 train.py")),
            (vec![], vec![]),
        ] {
            let got = redact_args(&raw);
            assert_eq!(got, want, "{raw:?}");
            assert_eq!(redact(&got.join(" ")), got.join(" "), "{raw:?}");
        }
    }

    #[test]
    fn odd_input_never_panics() {
        for raw in [
            "",
            "=",
            "--token",
            "--token ",
            "\"token\":",
            "'key':'",
            "a://b:@",
            "\u{0}\u{ffff}token=\u{1F600}",
            "bearer ",
        ] {
            let _ = redact(raw);
        }
    }
}
