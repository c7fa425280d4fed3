//! Real readers of the formats `tierscope export` writes, for the session tests (issue 15):
//! `protoc` with pprof's own profile.proto (Debian: protobuf-compiler,
//! golang-github-google-pprof-dev), and perfetto's trace.proto as the `perfetto` PyPI package
//! ships it compiled, with the `protobuf` runtime, in a virtual environment under
//! `target/test-readers/venv`. Installed idempotently; nothing of theirs is committed.
use std::{path::PathBuf, process::Command};

use anyhow::{Context as _, Result};

use crate::{cmd, setup};

const APT_PACKAGES: &[&str] = &["protobuf-compiler", "golang-github-google-pprof-dev", "python3-venv"];
/// The decoder the Perfetto test imports: perfetto's own trace.proto, compiled.
const PERFETTO_MODULE: &str = "perfetto.protos.perfetto.trace.perfetto_trace_pb2";

/// Where the virtual environment lives (tests/session_export.rs looks there).
pub fn venv() -> PathBuf {
    cmd::workspace_root().join("target/test-readers/venv")
}

pub fn install() -> Result<()> {
    setup::apt_install(APT_PACKAGES)?;
    let python = venv().join("bin/python");
    let has_perfetto =
        || cmd::output(Command::new(&python).args(["-c", &format!("import {PERFETTO_MODULE}")])).is_some();
    if has_perfetto() {
        println!("setup: Perfetto's trace.proto decoder present ({})", venv().display());
        return Ok(());
    }
    println!("setup: installing the perfetto and protobuf Python packages into {}", venv().display());
    if !python.is_file() {
        cmd::run(Command::new("/usr/bin/python3").args(["-m", "venv"]).arg(venv()))
            .context("creating the Python virtual environment for the test readers")?;
    }
    cmd::run(Command::new(venv().join("bin/pip")).args(["install", "-q", "perfetto", "protobuf"]))
        .context("pip install perfetto protobuf failed: check that PyPI is reachable")?;
    anyhow::ensure!(has_perfetto(), "{PERFETTO_MODULE} does not import from {}", python.display());
    Ok(())
}
