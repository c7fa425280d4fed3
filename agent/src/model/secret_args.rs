//! Which keys name a secret, and which arguments of a command line are secrets because of what
//! comes before them: the value after a secret flag (`--password VALUE`, even one that begins
//! with `-`), a known tool's password flag (`mysql -pVALUE`, `sshpass -p VALUE`, `redis-cli -a
//! VALUE`), and the password of `-u user:password` (curl, wget). Pure; [`super::redact`] applies
//! it to each command line and to each argument list.
use std::sync::OnceLock;

use regex::Regex;

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// Words that make a key's value secret: `HF_TOKEN`, `--api-key`, `db_password`, `Authorization`.
pub const SECRET_WORDS: &str = r"token|secret|passw(?:or)?d|passwd|pwd|api[_-]?key|apikey|access[_-]?key|private[_-]?key|auth|credential|cookie|key";

/// Words that hold a secret word and name no secret: training and tokenizer settings
/// (`--max_new_tokens`, `--tokenizer_name`, `--pad_token`, `--key_dim`), `author`, `keyword`.
const ORDINARY_WORDS: &str = r"(?i)tokeniz[a-z]*|(?:max|min|num|n|new|total|context|prompt|input|output|extra|special|added|generated|train|eval)[_.-]?tokens|tokens[_.-]?per|(?:eos|bos|pad|unk|sep|cls|mask)[_.-]?token(?:[_.-]?ids?)?|token[_.-]?(?:ids?|len|length|types?|count|dim|embed[a-z]*)|key[_.-]?(?:dim|size|len|length|heads?|proj|frames?|stride)|(?:num|n)[_.-]?keys|keyword[a-z]*|keyboard|keypoints?|keyframes?|monkey|hotkey|sort[_.-]?key|author(?:s|[_.-]?(?:name|email))?\b";

fn regex(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("the built-in redaction rules compile"))
}

/// Whether a key (`HF_TOKEN`, `--api-key`, `"db_password": `) names a secret: it holds a secret
/// word outside the ordinary words that contain one. The shell's `PWD` and `OLDPWD` are paths.
pub fn secret_key(key: &str) -> bool {
    static WORD: OnceLock<Regex> = OnceLock::new();
    static ORDINARY: OnceLock<Regex> = OnceLock::new();
    let name = key.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if name == "PWD" || name == "OLDPWD" {
        return false;
    }
    let rest = regex(&ORDINARY, ORDINARY_WORDS).replace_all(name, " ");
    regex(&WORD, &format!("(?i)(?:{SECRET_WORDS})")).is_match(&rest)
}

/// A key that names a secret, as one whole argument: `--api-key`, `-password`.
pub fn secret_flag(arg: &str) -> bool {
    static FLAG: OnceLock<Regex> = OnceLock::new();
    regex(&FLAG, &format!(r"(?i)^--?[A-Za-z0-9_.-]*(?:{SECRET_WORDS})[A-Za-z0-9_.-]*$")).is_match(arg)
        && secret_key(arg)
}

/// An argument shaped like a long option (`--verbose`, `--out=x`): the flag before it takes no
/// value. Anything else after a secret flag is its value, `-abc` included.
pub fn long_option(arg: &str) -> bool {
    static LONG: OnceLock<Regex> = OnceLock::new();
    regex(&LONG, r"^--[A-Za-z][A-Za-z0-9_.-]*(?:=.*)?$").is_match(arg)
}

/// A tool whose short flag takes a password.
struct Tool {
    /// The command's name, or the start of it (`mysql` is also `mysqldump`, `mysqladmin`...).
    name: &'static str,
    prefix: bool,
    flag: &'static str,
    /// Whether the password may be the next argument (`sshpass -p VALUE`); otherwise only
    /// attached (`mysql -pVALUE`: `mysql -p db` prompts, and `db` is the database).
    separate: bool,
}

const TOOLS: &[Tool] = &[
    Tool { name: "mysql", prefix: true, flag: "-p", separate: false },
    Tool { name: "mariadb", prefix: true, flag: "-p", separate: false },
    Tool { name: "sshpass", prefix: false, flag: "-p", separate: true },
    Tool { name: "mongo", prefix: true, flag: "-p", separate: true },
    Tool { name: "redis-cli", prefix: false, flag: "-a", separate: true },
    Tool { name: "ldap", prefix: true, flag: "-w", separate: true },
    Tool { name: "sqlcmd", prefix: false, flag: "-P", separate: true },
    Tool { name: "bcp", prefix: false, flag: "-P", separate: true },
    Tool { name: "zip", prefix: false, flag: "-P", separate: true },
    Tool { name: "unzip", prefix: false, flag: "-P", separate: true },
    Tool { name: "7z", prefix: true, flag: "-p", separate: false },
    Tool { name: "rar", prefix: false, flag: "-p", separate: false },
    Tool { name: "unrar", prefix: false, flag: "-p", separate: false },
];

/// The tool an argument starts (its name after any quote or directory).
fn tool_named(arg: &str) -> Option<&'static Tool> {
    let word = arg.trim_start_matches(['"', '\'', '(']);
    let name = word.rsplit('/').next().unwrap_or(word);
    TOOLS.iter().find(|t| if t.prefix { name.starts_with(t.name) } else { name == t.name })
}

/// An argument that ends a command (`;`, `&&`, `|`): the next tool starts afresh.
fn ends_command(arg: &str) -> bool {
    matches!(arg, "&&" | "||" | "|" | "&") || arg.ends_with(';')
}

/// Flags whose value is `user:password` (curl, wget, and the proxy's).
const USER_FLAGS: &[&str] = &["-u", "-U", "--user", "--proxy-user", "--http-user"];

/// `user:password` with the password masked; `None` when the value is no such pair (a
/// `uid:gid` of digits, a `host:/path`, a `user@host:path`).
fn masked_user(value: &str) -> Option<String> {
    let (user, pass) = value.split_once(':')?;
    let plain = pass.is_empty()
        || pass == MASK
        || pass.starts_with('/')
        || user.contains(['/', '@'])
        || (pass.bytes().all(|b| b.is_ascii_digit()) && user.bytes().all(|b| b.is_ascii_digit()));
    (!plain).then(|| format!("{user}:{MASK}"))
}

/// `-uuser:password` and `--user=user:password` in one argument, masked.
fn masked_attached_user(arg: &str) -> Option<String> {
    for flag in USER_FLAGS {
        let joined = if flag.starts_with("--") { format!("{flag}=") } else { flag.to_string() };
        if let Some(value) = arg.strip_prefix(joined.as_str()).filter(|v| !v.is_empty()) {
            return masked_user(value).map(|m| format!("{joined}{m}"));
        }
    }
    None
}

/// The arguments of a command line (split on whitespace, or a command's argument list) that are
/// secrets because of what comes before them: `Some(replacement)` for each one to replace.
pub fn mask_arguments(args: &[&str]) -> Vec<Option<String>> {
    let mut out = vec![None; args.len()];
    let mut tool: Option<&Tool> = None;
    let hidden = |v: &str| !long_option(v) && v != MASK;
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        let next = args.get(i + 1).copied();
        // A tool's password first: `-pKEYsecret` is a value, not a flag naming a secret.
        if let Some(t) = tool {
            if a == t.flag {
                if t.separate && next.is_some_and(hidden) {
                    out[i + 1] = Some(MASK.to_string());
                    i += 2;
                    continue;
                }
            } else if a.strip_prefix(t.flag).is_some_and(|rest| !rest.is_empty()) {
                if a[t.flag.len()..] != *MASK {
                    out[i] = Some(format!("{}{MASK}", t.flag));
                }
                i += 1;
                continue;
            }
        }
        if USER_FLAGS.contains(&a) {
            if let Some(m) = next.and_then(masked_user) {
                out[i + 1] = Some(m);
                i += 2;
                continue;
            }
        } else if let Some(m) = masked_attached_user(a) {
            out[i] = Some(m);
            i += 1;
            continue;
        }
        if secret_flag(a) && next.is_some_and(hidden) {
            out[i + 1] = Some(MASK.to_string());
            i += 2;
            continue;
        }
        if let Some(t) = tool_named(a) {
            tool = Some(t);
        } else if ends_command(a) {
            tool = None;
        }
        i += 1;
    }
    out
}

/// `text` with [`mask_arguments`] applied to its whitespace-separated words; `None` when no
/// word changes. The whitespace between the words is kept as it was.
pub fn mask_words(text: &str) -> Option<String> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                spans.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        spans.push((s, text.len()));
    }
    let words: Vec<&str> = spans.iter().map(|&(s, e)| &text[s..e]).collect();
    let masks = mask_arguments(&words);
    if masks.iter().all(Option::is_none) {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (&(s, e), m) in spans.iter().zip(&masks) {
        if let Some(m) = m {
            out.push_str(&text[at..s]);
            out.push_str(m);
            at = e;
        }
    }
    out.push_str(&text[at..]);
    Some(out)
}
