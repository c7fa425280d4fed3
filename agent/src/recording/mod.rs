//! Profiling sessions on disk: the file format ([`format`]), its records ([`records`]), the
//! writer and the reader here, and what a recorder takes from each snapshot of the model
//! ([`capture`]). Documented in docs/session-format.md.
pub mod capture;
pub mod format;
pub mod records;
pub mod replay;

use std::{
    collections::BTreeMap,
    fs::File,
    io::Write as _,
    path::{Path, PathBuf},
};

use records::{EndRec, EventRec, Frame, Meta, ProcessInfo, Record, SitesRec, TopologyRec};

/// Why a session file could not be read. Each is one line that names the problem (the cause is
/// in the line, not chained after it, so `{:#}` does not say it twice).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: {cause}")]
    Io { path: PathBuf, cause: std::io::Error },
    #[error("{path}: {cause}")]
    Format { path: PathBuf, cause: format::FormatError },
    #[error("{path}: corrupt record {line} of chunk {chunk} ({why})")]
    BadRecord { path: PathBuf, chunk: usize, line: usize, why: String },
    #[error("{path}: no session header record (the recorder stopped before its first interval?)")]
    NoMeta { path: PathBuf },
    #[error("{path}: schema {found} is not {expected}: update tierscope", expected = records::SCHEMA)]
    Schema { path: PathBuf, found: String },
}

/// A whole session, as read.
#[derive(Clone, Debug)]
pub struct Recording {
    pub meta: Meta,
    pub topology: Option<TopologyRec>,
    /// The latest identity of every process seen.
    pub processes: BTreeMap<u32, ProcessInfo>,
    pub frames: Vec<Frame>,
    pub events: Vec<EventRec>,
    /// The latest CXL allocation sites of every process that had some.
    pub sites: BTreeMap<u32, SitesRec>,
    pub end: Option<EndRec>,
    /// What the reader had to skip (a partial last chunk) or could not find (no end record).
    pub warnings: Vec<String>,
}

impl Recording {
    /// Seconds the recording covers (to its last frame).
    pub fn duration_s(&self) -> f64 {
        self.frames.last().map_or(0.0, |f| f.t_ms as f64 / 1e3)
    }
}

/// Reads a session file.
pub fn read(path: &Path) -> Result<Recording, ReadError> {
    let bytes = std::fs::read(path).map_err(|cause| ReadError::Io { path: path.to_path_buf(), cause })?;
    parse(&bytes, path)
}

/// Reads a session from bytes alone: the reader's single pure entry (no I/O), which the fuzz
/// target calls. Errors name the file `<bytes>`.
pub fn from_bytes(bytes: &[u8]) -> Result<Recording, ReadError> {
    parse(bytes, Path::new("<bytes>"))
}

/// Reads a session from its bytes (`path` names it in errors).
pub fn parse(bytes: &[u8], path: &Path) -> Result<Recording, ReadError> {
    let p = || path.to_path_buf();
    let chunks = format::decode(bytes).map_err(|cause| ReadError::Format { path: p(), cause })?;
    let mut meta = None;
    let mut rec = Recording {
        meta: Meta {
            schema: String::new(),
            tool_version: String::new(),
            host: String::new(),
            kernel: String::new(),
            started_unix_ms: 0,
            interval_ms: 0,
            page_size: 0,
            site_sample_every: 0,
            command: vec![],
            selection: String::new(),
            ..Default::default()
        },
        topology: None,
        processes: BTreeMap::new(),
        frames: vec![],
        events: vec![],
        sites: BTreeMap::new(),
        end: None,
        warnings: vec![],
    };
    for (ci, chunk) in chunks.chunks.iter().enumerate() {
        for (li, line) in chunk.split(|&b| b == b'\n').enumerate().filter(|(_, l)| !l.is_empty()) {
            let r: Record = serde_json::from_slice(line).map_err(|e| ReadError::BadRecord {
                path: p(),
                chunk: ci + 1,
                line: li + 1,
                why: e.to_string(),
            })?;
            match r {
                Record::Meta(m) => {
                    if m.schema != records::SCHEMA {
                        return Err(ReadError::Schema { path: p(), found: m.schema });
                    }
                    meta = Some(m);
                }
                Record::Topology(t) => rec.topology = Some(t),
                Record::Process(i) => {
                    rec.processes.insert(i.pid, i);
                }
                Record::Frame(f) => rec.frames.push(f),
                Record::Event(e) => rec.events.push(e),
                Record::Sites(s) => {
                    rec.sites.insert(s.pid, s);
                }
                Record::End(e) => rec.end = Some(e),
            }
        }
    }
    rec.meta = meta.ok_or_else(|| ReadError::NoMeta { path: p() })?;
    if let Some((at, len)) = chunks.truncated {
        rec.warnings.push(format!(
            "{}: truncated: the last {len} bytes (a partial chunk at byte {at}) were ignored; read up to {:.1} s",
            path.display(),
            rec.duration_s()
        ));
    }
    if rec.end.is_none() {
        rec.warnings.push(format!(
            "{}: the recording has no end (the recorder was killed or is still running): read up to {:.1} s",
            path.display(),
            rec.duration_s()
        ));
    }
    Ok(rec)
}

/// Writes a session: records are buffered and written as one chunk per [`SessionWriter::flush`].
pub struct SessionWriter {
    file: File,
    pending: Vec<u8>,
    pub path: PathBuf,
    pub bytes_written: u64,
}

impl SessionWriter {
    /// Creates `path` (mode 0600), or rewrites the invoking user's own regular file there, and
    /// writes the header; refuses a link or anyone else's file ([`crate::output_file`]). Under
    /// sudo the file is created as the user who ran sudo, who can then read it without root.
    pub fn create(path: &Path) -> Result<SessionWriter, crate::output_file::OutputError> {
        let mut file = crate::output_file::create(path, &crate::output_file::Invoker::current())?;
        let header = format::header();
        file.write_all(&header)
            .map_err(|cause| crate::output_file::OutputError::Io { path: path.to_path_buf(), cause })?;
        Ok(SessionWriter { file, pending: Vec::new(), path: path.to_path_buf(), bytes_written: header.len() as u64 })
    }

    pub fn push(&mut self, r: &Record) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.pending, r)?;
        self.pending.push(b'\n');
        Ok(())
    }

    /// Writes what was pushed since the last flush as one chunk (one `write`).
    pub fn flush(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let chunk = format::encode_chunk(&self.pending)?;
        self.file.write_all(&chunk)?;
        self.bytes_written += chunk.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// Flushes and syncs.
    pub fn finish(mut self) -> std::io::Result<u64> {
        self.flush()?;
        self.file.sync_all()?;
        Ok(self.bytes_written)
    }
}

#[cfg(test)]
mod tests;
