//! What the deployment tests use besides Debian's packages: the Kubernetes manifest validator
//! (PyPI's `kubernetes-validate`, which carries the API schemas, so it validates offline) in the
//! test readers' virtual environment ([`crate::readers::venv`], made first), and kubectl's
//! built-in kustomize to render the overlays.
use std::process::Command;

use anyhow::{Context as _, Result};

use crate::cmd;

const VALIDATOR: &str = "kubernetes-validate";
const VALIDATOR_VERSION: &str = "1.37.0";

pub fn install() -> Result<()> {
    validator()?;
    kustomize();
    Ok(())
}

fn validator() -> Result<()> {
    let venv = crate::readers::venv();
    let bin = venv.join("bin").join(VALIDATOR);
    let have = cmd::output(Command::new(venv.join("bin/pip")).args(["show", VALIDATOR]))
        .is_some_and(|s| s.lines().any(|l| l == format!("Version: {VALIDATOR_VERSION}")));
    if have && bin.is_file() {
        println!("setup: {VALIDATOR} {VALIDATOR_VERSION} present ({})", venv.display());
        return Ok(());
    }
    println!("setup: installing {VALIDATOR} {VALIDATOR_VERSION} from PyPI into {}", venv.display());
    cmd::run(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("{VALIDATOR}=={VALIDATOR_VERSION}")),
    )
    .context("pip install kubernetes-validate failed: check that PyPI is reachable")
}

/// kubectl (with kustomize built in) comes with this machine image; Debian's own kubectl is too
/// old for the overlays and conflicts with it, so it is only reported here.
fn kustomize() {
    match cmd::output(Command::new("kubectl").args(["version", "--client"])) {
        Some(v) if v.contains("Kustomize") => {
            let k = v.lines().find(|l| l.contains("Kustomize")).unwrap_or_default().trim().to_string();
            println!("setup: kubectl present ({k})");
        }
        _ => println!(
            "setup: note: no kubectl with kustomize on PATH: the manifest test needs one (kubectl 1.21 or later) to render deploy/kubernetes"
        ),
    }
}
