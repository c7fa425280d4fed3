//! A minimal QMP client (QEMU Machine Protocol, JSON lines over a unix socket): enough to inject
//! CXL events and poison while a scenario runs.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::Path,
    time::Duration,
};

use anyhow::{bail, Context as _, Result};
use serde_json::Value;

pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects, reads the greeting and leaves capabilities negotiation mode.
    pub fn connect(sock: &Path) -> Result<Self> {
        let stream =
            UnixStream::connect(sock).with_context(|| format!("cannot connect to QMP at {}", sock.display()))?;
        // A stuck QEMU must not hang the test: every read and write has a deadline.
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.set_write_timeout(Some(Duration::from_secs(10)))?;
        let writer = stream.try_clone()?;
        let mut q = Self { reader: BufReader::new(stream), writer };
        let greeting = q.read()?;
        if greeting.get("QMP").is_none() {
            bail!("not a QMP greeting: {greeting}");
        }
        q.execute_raw(r#"{"execute":"qmp_capabilities"}"#)?;
        Ok(q)
    }

    /// Sends one command (a JSON object text) and returns its `return` value; a QMP `error`
    /// becomes an Err with QEMU's description. Asynchronous events in between are skipped.
    pub fn execute_raw(&mut self, command: &str) -> Result<Value> {
        let parsed: Value =
            serde_json::from_str(command).with_context(|| format!("QMP command is not JSON: {command}"))?;
        writeln!(self.writer, "{parsed}")?;
        loop {
            let v = self.read()?;
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                bail!("QMP {}: {}", parsed.get("execute").unwrap_or(&Value::Null), e.get("desc").unwrap_or(e));
            }
        }
    }

    fn read(&mut self) -> Result<Value> {
        let mut line = String::new();
        if self.reader.read_line(&mut line).context("reading from QMP")? == 0 {
            bail!("QMP socket closed (QEMU exited?)");
        }
        serde_json::from_str(&line).with_context(|| format!("QMP sent non-JSON: {line}"))
    }
}
