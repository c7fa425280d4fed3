//! Profiling sessions on disk: the file format ([`format`]), its records ([`records`]), the
//! writer and the reader here, and what a recorder takes from each snapshot of the model
//! ([`capture`]). Documented in docs/session-format.md.
pub mod capture;
pub mod cpu;
pub mod format;
pub mod records;
pub mod replay;
pub mod steps;

use std::{
    collections::{BTreeMap, VecDeque},
    fs::File,
    io::{BufReader, Write as _},
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
    #[error("{path}: the file changed while it was being read (its frames are not those of the first pass): read it again once it is complete")]
    Changed { path: PathBuf },
}

/// A whole session, as read: every record in memory ([`read`], [`parse`]), or every record but
/// the frames, which stay in the file and are read again, one chunk at a time, when asked
/// ([`scan`], [`Recording::each_frame`]).
#[derive(Clone, Debug, Default)]
pub struct Recording {
    pub meta: Meta,
    pub topology: Option<TopologyRec>,
    /// The latest identity of every process seen.
    pub processes: BTreeMap<u32, ProcessInfo>,
    /// Empty when the frames were left in the file (`on_disk`).
    pub frames: Vec<Frame>,
    pub events: Vec<EventRec>,
    /// The latest CXL allocation sites of every process that had some.
    pub sites: BTreeMap<u32, SitesRec>,
    /// Every process's CPU samples and their stacks (absent in older files).
    pub cpu: BTreeMap<u32, cpu::CpuRecording>,
    /// The steps the live agent completed per process, as recorded (absent before version 3).
    pub live_steps: BTreeMap<u32, Vec<steps::StepRec>>,
    pub end: Option<EndRec>,
    /// What the reader had to skip (a partial last chunk) or could not find (no end record).
    pub warnings: Vec<String>,
    /// Where the frames are when [`scan`] left them in the file.
    pub on_disk: Option<OnDisk>,
}

/// The frames of a scanned session: its file, up to which byte they were read (a recorder may
/// still be appending; a later pass stops where the first one did), how many, the last time.
#[derive(Clone, Debug)]
pub struct OnDisk {
    pub path: PathBuf,
    pub end: u64,
    pub frames: usize,
    pub last_t_ms: Option<u64>,
}

impl Recording {
    /// Seconds the recording covers (to its last frame).
    pub fn duration_s(&self) -> f64 {
        self.last_t_ms().map_or(0.0, |t| t as f64 / 1e3)
    }

    /// The time of the last frame (ms since the start).
    pub fn last_t_ms(&self) -> Option<u64> {
        match &self.on_disk {
            Some(d) => d.last_t_ms,
            None => self.frames.last().map(|f| f.t_ms),
        }
    }

    /// How many frames the recording has.
    pub fn frame_count(&self) -> usize {
        self.on_disk.as_ref().map_or(self.frames.len(), |d| d.frames)
    }

    /// Calls `f` with every frame in order: from memory, or read again from the file with one
    /// chunk in memory at a time. A file that no longer holds what [`scan`] found is an error.
    pub fn each_frame(&self, mut f: impl FnMut(&Frame)) -> Result<(), ReadError> {
        match &self.on_disk {
            Some(d) => d.each_frame_at(|_, fr| f(&fr)),
            None => {
                self.frames.iter().for_each(f);
                Ok(())
            }
        }
    }
}

/// Where a frame is in its file: its chunk, and how many frames come before it in that chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameAt {
    pub chunk: format::ChunkAt,
    pub nth: u32,
}

impl OnDisk {
    fn changed(&self) -> ReadError {
        ReadError::Changed { path: self.path.clone() }
    }

    /// Calls `f` with every frame in order and where it is, read again from the file with one
    /// chunk in memory at a time. A file that no longer holds what [`scan`] found is an error.
    pub fn each_frame_at(&self, mut f: impl FnMut(FrameAt, Frame)) -> Result<(), ReadError> {
        let mut chunks = open_chunks(&self.path)?;
        let (mut n, mut in_chunk) = (0, None);
        each_record(&mut chunks, &self.path, Some(self.end), Lines::Frames, |at, r| {
            if let Record::Frame(fr) = r {
                let nth = match in_chunk {
                    Some((c, k)) if c == at => k + 1,
                    _ => 0,
                };
                in_chunk = Some((at, nth));
                n += 1;
                f(FrameAt { chunk: at, nth }, fr);
            }
            Ok(())
        })?;
        if n != self.frames || chunks.offset != self.end {
            return Err(self.changed());
        }
        Ok(())
    }

    /// Reads the frames from the one at `at` on ([`OnDisk::each_frame_at`] said where it is).
    pub fn frames_from(&self, at: FrameAt) -> Result<FrameCursor, ReadError> {
        let mut chunks = open_chunks(&self.path)?;
        chunks.seek_to(at.chunk).map_err(|cause| ReadError::Format { path: self.path.clone(), cause })?;
        let mut c = FrameCursor { chunks, disk: self.clone(), raw: Vec::new(), pending: VecDeque::new() };
        if !c.read_chunk()? || c.pending.len() <= at.nth as usize {
            return Err(self.changed());
        }
        c.pending.drain(..at.nth as usize);
        Ok(c)
    }
}

/// Frames read on from one place in a session file: one chunk and its frames in memory.
pub struct FrameCursor {
    chunks: format::ChunkReader<BufReader<File>>,
    disk: OnDisk,
    raw: Vec<u8>,
    /// The frames of the chunk read last that were not given yet.
    pending: VecDeque<Frame>,
}

impl FrameCursor {
    /// The next frame; `None` past the last one the first pass found.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ReadError> {
        loop {
            if let Some(f) = self.pending.pop_front() {
                return Ok(Some(f));
            }
            if !self.read_chunk()? {
                return Ok(None);
            }
        }
    }

    /// Reads the next chunk's frames into `pending`; false at the end of what the first pass read.
    fn read_chunk(&mut self) -> Result<bool, ReadError> {
        if self.chunks.offset >= self.disk.end {
            return Ok(false);
        }
        let path = &self.disk.path;
        let at =
            self.chunks.next_into(&mut self.raw).map_err(|cause| ReadError::Format { path: path.clone(), cause })?;
        let Some(at) = at else { return Err(self.disk.changed()) };
        let pending = &mut self.pending;
        records_of(&self.raw, at, path, Lines::Frames, |_, r| {
            if let Record::Frame(f) = r {
                pending.push_back(f);
            }
            Ok(())
        })?;
        Ok(true)
    }
}

/// Opens a session file for reading chunk by chunk.
fn open_chunks(path: &Path) -> Result<format::ChunkReader<BufReader<File>>, ReadError> {
    let file = File::open(path).map_err(|cause| ReadError::Io { path: path.to_path_buf(), cause })?;
    format::ChunkReader::new(BufReader::new(file))
        .map_err(|cause| ReadError::Format { path: path.to_path_buf(), cause })
}

/// Reads a session file with every record in memory (`top --replay` moves between its frames).
/// The file is read one chunk at a time; what stays is the records.
pub fn read(path: &Path) -> Result<Recording, ReadError> {
    let mut chunks = open_chunks(path)?;
    collect(&mut chunks, path, Keep::Frames)
}

/// Reads a session file leaving its frames in the file: memory is one chunk and the records
/// other than frames (the header, processes, events, sites), whatever the number of frames.
/// [`Recording::each_frame`] reads them again when asked.
pub fn scan(path: &Path) -> Result<Recording, ReadError> {
    let mut chunks = open_chunks(path)?;
    collect(&mut chunks, path, Keep::OnDisk)
}

/// Reads a session from bytes alone: the reader's single pure entry (no I/O), which the fuzz
/// target calls. Errors name the file `<bytes>`.
pub fn from_bytes(bytes: &[u8]) -> Result<Recording, ReadError> {
    parse(bytes, Path::new("<bytes>"))
}

/// Reads a session from its bytes (`path` names it in errors).
pub fn parse(bytes: &[u8], path: &Path) -> Result<Recording, ReadError> {
    let mut chunks =
        format::ChunkReader::new(bytes).map_err(|cause| ReadError::Format { path: path.to_path_buf(), cause })?;
    collect(&mut chunks, path, Keep::Frames)
}

/// Whether the frames are kept in memory or left in the file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    Frames,
    OnDisk,
}

/// Parses the records of every whole chunk (up to byte `end`), one chunk in memory at a time.
fn each_record<R: std::io::Read>(
    chunks: &mut format::ChunkReader<R>,
    path: &Path,
    end: Option<u64>,
    lines: Lines,
    mut on: impl FnMut(format::ChunkAt, Record) -> Result<(), ReadError>,
) -> Result<(), ReadError> {
    let mut raw = Vec::new();
    while end.is_none_or(|e| chunks.offset < e) {
        let at = chunks.next_into(&mut raw).map_err(|cause| ReadError::Format { path: path.to_path_buf(), cause })?;
        let Some(at) = at else { break };
        records_of(&raw, at, path, lines, &mut on)?;
    }
    Ok(())
}

/// Which records of a chunk are parsed: every one, or only frames (a pass over the frames
/// again skips the other records unparsed: the CPU samples, sites and steps of a long session
/// are most of its bytes, and a report reads the frames four times).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lines {
    All,
    Frames,
}

/// How a frame record's line starts (records are externally tagged, written compact). A line
/// that starts another way than `{"` (not written by the recorder) is parsed whatever it holds.
const FRAME_LINE: &[u8] = b"{\"frame\":";

/// Parses the records of one inflated chunk, `at` in the file.
fn records_of(
    raw: &[u8],
    at: format::ChunkAt,
    path: &Path,
    lines: Lines,
    mut on: impl FnMut(format::ChunkAt, Record) -> Result<(), ReadError>,
) -> Result<(), ReadError> {
    let wanted =
        |l: &[u8]| !l.is_empty() && (lines == Lines::All || l.starts_with(FRAME_LINE) || !l.starts_with(b"{\""));
    for (li, line) in raw.split(|&b| b == b'\n').enumerate().filter(|(_, l)| wanted(l)) {
        let r: Record = serde_json::from_slice(line).map_err(|e| ReadError::BadRecord {
            path: path.to_path_buf(),
            chunk: at.number,
            line: li + 1,
            why: e.to_string(),
        })?;
        on(at, r)?;
    }
    Ok(())
}

fn collect<R: std::io::Read>(
    chunks: &mut format::ChunkReader<R>,
    path: &Path,
    keep: Keep,
) -> Result<Recording, ReadError> {
    let p = || path.to_path_buf();
    let mut meta = None;
    let mut rec = Recording::default();
    let (mut frames, mut last_t_ms) = (0usize, None);
    each_record(chunks, path, None, Lines::All, |_, r| {
        match r {
            Record::Meta(m) => {
                if m.schema != records::SCHEMA {
                    return Err(ReadError::Schema { path: p(), found: m.schema });
                }
                meta = Some(m);
            }
            Record::Topology(t) => rec.topology = Some(t),
            Record::Process(i) => {
                let i = records::with_known_identity(rec.processes.get(&i.pid), i);
                rec.processes.insert(i.pid, i);
            }
            Record::Frame(f) => {
                frames += 1;
                last_t_ms = Some(f.t_ms);
                if keep == Keep::Frames {
                    rec.frames.push(f);
                }
            }
            Record::Event(e) => rec.events.push(e),
            Record::Sites(s) => {
                rec.sites.insert(s.pid, s);
            }
            Record::CpuSamples(c) => rec.cpu.entry(c.pid).or_default().add(c),
            Record::Step(s) => rec.live_steps.entry(s.pid).or_default().push(s),
            Record::End(e) => rec.end = Some(e),
        }
        Ok(())
    })?;
    rec.meta = meta.ok_or_else(|| ReadError::NoMeta { path: p() })?;
    if keep == Keep::OnDisk {
        rec.on_disk = Some(OnDisk { path: p(), end: chunks.offset, frames, last_t_ms });
    }
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
