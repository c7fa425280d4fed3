//! The session file's framing (docs/session-format.md): a 16-byte header (magic, version), then a
//! stream of chunks, each `u32 compressed length | u32 raw length | u32 CRC-32 of the compressed
//! bytes` (little endian) and a raw-deflate body of newline-separated JSON records. A chunk is
//! written with one `write` per interval, so a killed recorder leaves whole chunks and at most one
//! partial one at the end: the reader keeps every whole chunk and reports the partial one as a
//! warning. Anything else that does not add up is an error, never a panic.
use std::io::{Read, Seek, SeekFrom, Write};

use bytes::{Buf, BufMut, BytesMut};
use flate2::{read::DeflateDecoder, write::DeflateEncoder, Compression};

/// The first 8 bytes of every session file.
pub const MAGIC: &[u8; 8] = b"TSCOPE\x00S";
/// The format version this build writes and the newest it reads.
pub const VERSION: u32 = 3;
/// Magic, version, 4 reserved bytes.
pub const HEADER_LEN: usize = 16;
/// Compressed length, raw length, CRC-32.
pub const CHUNK_HEADER_LEN: usize = 12;
/// No chunk is larger than this (either length); a larger one is corruption, not a reason to
/// allocate gigabytes.
pub const MAX_CHUNK: u32 = 64 << 20;

/// Why a file cannot be read as a session.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("not a tierscope session file (wrong magic bytes); give a file written by `tierscope record`")]
    WrongMagic,
    #[error("too short to be a session file ({0} bytes; the 16-byte header is incomplete)")]
    NoHeader(usize),
    #[error("session format version {found} is newer than this tierscope reads ({VERSION}): update tierscope")]
    NewerVersion { found: u32 },
    #[error("session format version 0 is invalid (corrupt header)")]
    ZeroVersion,
    #[error("corrupt chunk {chunk} at byte {offset}: {why}")]
    Corrupt { chunk: usize, offset: u64, why: String },
    #[error("chunk {chunk} inflates past the file's bound ({inflated} bytes from {on_disk} on disk: over {floor} bytes and over {ratio}x); the file is damaged or not a tierscope session")]
    FileInflation { chunk: usize, inflated: u64, on_disk: u64, floor: u64, ratio: u64 },
    #[error("{0}")]
    Io(std::io::Error),
}

impl PartialEq for FormatError {
    fn eq(&self, other: &Self) -> bool {
        // I/O errors do not compare; everything else by its text.
        !matches!(self, FormatError::Io(_)) && self.to_string() == other.to_string()
    }
}

/// The file header.
pub fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// One chunk (header and compressed body) holding `raw`.
pub fn encode_chunk(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut enc = DeflateEncoder::new(Vec::with_capacity(raw.len() / 4 + 64), Compression::default());
    enc.write_all(raw)?;
    let body = enc.finish()?;
    if body.len() > MAX_CHUNK as usize || raw.len() > MAX_CHUNK as usize {
        return Err(std::io::Error::other(format!("a chunk of {} bytes is over the 64 MiB limit", raw.len())));
    }
    let mut out = BytesMut::with_capacity(CHUNK_HEADER_LEN + body.len());
    out.put_u32_le(body.len() as u32);
    out.put_u32_le(raw.len() as u32);
    out.put_u32_le(crc32fast::hash(&body));
    out.put_slice(&body);
    Ok(out.to_vec())
}

/// A file of S bytes may inflate to at most `max(FILE_INFLATION_FLOOR, FILE_INFLATION_RATIO x S)`.
/// tierscope's records deflate 2-50x (measured: a frame of 10,000 idle processes, the most
/// repetitive thing the recorder writes, is 47x); deflate itself tops out near 1,032x, on runs of
/// one byte, which only a crafted or zero-filled file holds. Past the bound the reader stops with
/// an error instead of spending minutes inflating what cannot be a session.
pub const FILE_INFLATION_RATIO: u64 = 200;
/// Whatever its ratio, a file may inflate to this much: a short session of large frames (one
/// chunk may hold 64 MiB) is never refused for being small on disk.
pub const FILE_INFLATION_FLOOR: u64 = 1 << 30;

/// The bounds a [`ChunkReader`] holds a file to (the constants above; tests give smaller ones).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Either length of one chunk.
    pub chunk: u32,
    pub file_floor: u64,
    pub file_ratio: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { chunk: MAX_CHUNK, file_floor: FILE_INFLATION_FLOOR, file_ratio: FILE_INFLATION_RATIO }
    }
}

/// One chunk as read: where it starts in the file and its number (from 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkAt {
    pub number: usize,
    pub offset: u64,
}

/// Reads a session's chunks one at a time from any reader (a `BufReader<File>`, a byte slice):
/// memory is one compressed and one inflated chunk, whatever the file's length.
pub struct ChunkReader<R> {
    input: R,
    limits: Limits,
    pub version: u32,
    /// Bytes of the file consumed so far (header and whole chunks).
    pub offset: u64,
    chunks: usize,
    inflated: u64,
    body: Vec<u8>,
    /// Set when the file ends inside a chunk (a recorder killed mid-write, a copy cut short):
    /// the byte offset where the partial chunk starts and how many bytes it had.
    pub truncated: Option<(u64, u64)>,
}

/// Reads until `buf` is full or the input ends; how many bytes came.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl<R: Read> ChunkReader<R> {
    /// Reads and checks the header.
    pub fn new(input: R) -> Result<Self, FormatError> {
        Self::with_limits(input, Limits::default())
    }

    pub fn with_limits(mut input: R, limits: Limits) -> Result<Self, FormatError> {
        let mut h = [0u8; HEADER_LEN];
        let n = read_full(&mut input, &mut h).map_err(FormatError::Io)?;
        let got = &h[..n];
        if got.len() >= MAGIC.len() && &got[..MAGIC.len()] != MAGIC {
            return Err(FormatError::WrongMagic);
        }
        if got.len() < HEADER_LEN {
            return Err(if MAGIC.starts_with(got) {
                FormatError::NoHeader(got.len())
            } else {
                FormatError::WrongMagic
            });
        }
        let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        if version == 0 {
            return Err(FormatError::ZeroVersion);
        }
        if version > VERSION {
            return Err(FormatError::NewerVersion { found: version });
        }
        Ok(ChunkReader {
            input,
            limits,
            version,
            offset: HEADER_LEN as u64,
            chunks: 0,
            inflated: 0,
            body: Vec::new(),
            truncated: None,
        })
    }

    /// Inflates the next whole chunk into `raw` (replacing what it held); `None` at the end of
    /// the file or at a partial last chunk ([`ChunkReader::truncated`] then says so).
    pub fn next_into(&mut self, raw: &mut Vec<u8>) -> Result<Option<ChunkAt>, FormatError> {
        if self.truncated.is_some() {
            return Ok(None);
        }
        let at = ChunkAt { number: self.chunks + 1, offset: self.offset };
        let corrupt = |why: String| FormatError::Corrupt { chunk: at.number, offset: at.offset, why };
        let mut h = [0u8; CHUNK_HEADER_LEN];
        let n = read_full(&mut self.input, &mut h).map_err(FormatError::Io)?;
        if n == 0 {
            return Ok(None);
        }
        if n < CHUNK_HEADER_LEN {
            self.truncated = Some((at.offset, n as u64));
            return Ok(None);
        }
        let mut hb = &h[..];
        let (clen, rlen, crc) = (hb.get_u32_le(), hb.get_u32_le(), hb.get_u32_le());
        // Checked before anything is allocated or inflated.
        if clen > self.limits.chunk || rlen > self.limits.chunk {
            return Err(corrupt(format!(
                "it declares {} bytes, past the {} a chunk may hold; the file is damaged or not a tierscope session",
                clen.max(rlen),
                self.limits.chunk
            )));
        }
        self.body.clear();
        let got = (&mut self.input).take(u64::from(clen)).read_to_end(&mut self.body).map_err(FormatError::Io)?;
        if got < clen as usize {
            self.truncated = Some((at.offset, (CHUNK_HEADER_LEN + got) as u64));
            return Ok(None);
        }
        if crc32fast::hash(&self.body) != crc {
            return Err(corrupt("checksum mismatch".into()));
        }
        let end = at.offset + (CHUNK_HEADER_LEN as u64) + u64::from(clen);
        let allowed = self.limits.file_floor.max(self.limits.file_ratio.saturating_mul(end));
        if self.inflated + u64::from(rlen) > allowed {
            return Err(FormatError::FileInflation {
                chunk: at.number,
                inflated: self.inflated + u64::from(rlen),
                on_disk: end,
                floor: self.limits.file_floor,
                ratio: self.limits.file_ratio,
            });
        }
        raw.clear();
        raw.reserve(rlen as usize);
        // One byte more than announced tells an overlong body from an exact one, and stops
        // inflating there: a body that would inflate to gigabytes costs rlen + 1 bytes.
        let read = DeflateDecoder::new(&self.body[..]).take(u64::from(rlen) + 1).read_to_end(raw);
        match read {
            Ok(n) if n == rlen as usize => {}
            Ok(n) if n > rlen as usize => {
                return Err(corrupt(format!(
                    "it inflates past the {rlen} bytes its header says; the file is damaged or not a tierscope session"
                )))
            }
            Ok(n) => return Err(corrupt(format!("inflates to {n} bytes, header says {rlen}"))),
            Err(e) => return Err(corrupt(format!("bad deflate data ({e})"))),
        }
        self.inflated += u64::from(rlen);
        self.offset = end;
        self.chunks += 1;
        Ok(Some(at))
    }
}

impl<R: Read + Seek> ChunkReader<R> {
    /// Goes back (or on) to the chunk `at`, one that [`ChunkReader::next_into`] returned for this
    /// file: it is the next chunk read. The file's inflation bound counts again from there (the
    /// first pass over the file held the whole of it to the bound; a replay reads parts again).
    pub fn seek_to(&mut self, at: ChunkAt) -> Result<(), FormatError> {
        self.input.seek(SeekFrom::Start(at.offset)).map_err(FormatError::Io)?;
        self.offset = at.offset;
        self.chunks = at.number.saturating_sub(1);
        self.inflated = 0;
        self.truncated = None;
        Ok(())
    }
}

/// The raw chunk bodies of a file, and what was cut off at its end (for tests and tools that
/// hold small files whole; readers of sessions use [`ChunkReader`]).
#[derive(Debug, Default)]
pub struct Chunks {
    pub version: u32,
    pub chunks: Vec<Vec<u8>>,
    pub truncated: Option<(u64, u64)>,
}

/// Splits a whole file into decompressed chunk bodies.
pub fn decode(file: &[u8]) -> Result<Chunks, FormatError> {
    let mut r = ChunkReader::new(file)?;
    let mut out = Chunks { version: r.version, ..Chunks::default() };
    let mut raw = Vec::new();
    while r.next_into(&mut raw)?.is_some() {
        out.chunks.push(std::mem::take(&mut raw));
    }
    out.truncated = r.truncated;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(chunks: &[&[u8]]) -> Vec<u8> {
        let mut f = header().to_vec();
        for c in chunks {
            f.extend(encode_chunk(c).unwrap());
        }
        f
    }

    #[test]
    fn chunks_round_trip() {
        let f = file(&[b"one\n", b"", b"three\nlines\n"]);
        let c = decode(&f).unwrap();
        assert_eq!(c.version, VERSION);
        assert_eq!(c.chunks, vec![b"one\n".to_vec(), vec![], b"three\nlines\n".to_vec()]);
        assert_eq!(c.truncated, None);
    }

    #[test]
    fn header_errors_are_told_apart() {
        assert_eq!(decode(b"PK\x03\x04 a zip file, not ours").unwrap_err(), FormatError::WrongMagic);
        assert_eq!(decode(b"TSC").unwrap_err(), FormatError::NoHeader(3));
        assert_eq!(decode(b"xy").unwrap_err(), FormatError::WrongMagic);
        let mut f = file(&[b"x"]);
        f[8..12].copy_from_slice(&7u32.to_le_bytes());
        assert_eq!(decode(&f).unwrap_err(), FormatError::NewerVersion { found: 7 });
        assert!(decode(&f).unwrap_err().to_string().contains("update tierscope"));
        f[8..12].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(decode(&f).unwrap_err(), FormatError::ZeroVersion);
    }

    #[test]
    fn a_cut_keeps_whole_chunks() {
        let f = file(&[b"first\n", b"second\n"]);
        let first_end = HEADER_LEN + encode_chunk(b"first\n").unwrap().len();
        for cut in first_end + 1..f.len() {
            let c = decode(&f[..cut]).unwrap();
            assert_eq!(c.chunks.len(), 1, "cut at {cut}");
            assert_eq!(c.truncated, Some((first_end as u64, (cut - first_end) as u64)), "cut at {cut}");
        }
        assert_eq!(decode(&f[..first_end]).unwrap().truncated, None);
        assert_eq!(decode(&f[..HEADER_LEN]).unwrap().chunks.len(), 0);
    }

    #[test]
    fn a_flipped_body_bit_is_a_checksum_error() {
        let mut f = file(&[b"payload payload payload\n"]);
        let last = f.len() - 1;
        f[last] ^= 0x10;
        assert!(matches!(decode(&f), Err(FormatError::Corrupt { offset, .. }) if offset == HEADER_LEN as u64));
    }

    #[test]
    fn a_huge_length_is_refused_without_allocating() {
        let mut f = header().to_vec();
        f.extend(u32::MAX.to_le_bytes());
        f.extend(4u32.to_le_bytes());
        f.extend(0u32.to_le_bytes());
        assert!(matches!(decode(&f), Err(FormatError::Corrupt { .. })));
    }

    #[test]
    fn a_wrong_raw_length_is_corrupt() {
        let mut f = file(&[b"abcdef"]);
        f[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&3u32.to_le_bytes());
        assert!(decode(&f).unwrap_err().to_string().contains("past the 3 bytes its header says"));
    }
    /// The peak resident memory of this process so far (VmHWM), in bytes.
    fn peak_rss() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let kb = s.lines().find_map(|l| l.strip_prefix("VmHWM:")).expect("VmHWM");
        kb.trim().trim_end_matches("kB").trim().parse::<u64>().expect("kB") * 1024
    }

    /// A chunk (header and body) whose body is `zeros` bytes of zeros, deflated as they are
    /// streamed (never held whole), with `declared` as its raw length.
    fn zeros_chunk(zeros: u64, declared: u32) -> Vec<u8> {
        let mut enc = DeflateEncoder::new(Vec::new(), Compression::best());
        let block = vec![0u8; 1 << 20];
        for _ in 0..zeros / block.len() as u64 {
            enc.write_all(&block).unwrap();
        }
        let body = enc.finish().unwrap();
        let mut out = Vec::new();
        out.extend((body.len() as u32).to_le_bytes());
        out.extend(declared.to_le_bytes());
        out.extend(crc32fast::hash(&body).to_le_bytes());
        out.extend(body);
        out
    }

    #[test]
    fn a_chunk_that_inflates_past_its_header_stops_at_the_header_without_inflating_the_rest() {
        // 1 GiB of zeros in about a megabyte, declared as 100 bytes.
        let mut f = header().to_vec();
        f.extend(zeros_chunk(1 << 30, 100));
        assert!(f.len() < 2 << 20, "{} bytes", f.len());
        let before = peak_rss();
        let e = decode(&f).unwrap_err();
        let grew = peak_rss().saturating_sub(before);
        assert!(matches!(e, FormatError::Corrupt { chunk: 1, .. }), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("inflates past the 100 bytes its header says") && text.contains("not a tierscope session")
        );
        assert_eq!(text.lines().count(), 1);
        assert!(grew < 64 << 20, "inflating grew the peak RSS by {grew} bytes");
    }

    #[test]
    fn a_file_that_inflates_past_its_bound_is_refused_at_the_chunk_that_passes_it() {
        // Chunks of 256 KiB of newlines (empty records, which readers skip): about 300 bytes on
        // disk each, 800x. With a floor of 1 MiB the fifth passes it.
        let limits = Limits { chunk: MAX_CHUNK, file_floor: 1 << 20, file_ratio: FILE_INFLATION_RATIO };
        let mut f = header().to_vec();
        for _ in 0..8 {
            f.extend(encode_chunk(&vec![b'\n'; 256 << 10]).unwrap());
        }
        let mut r = ChunkReader::with_limits(&f[..], limits).unwrap();
        let mut raw = Vec::new();
        for n in 1..=4 {
            assert_eq!(r.next_into(&mut raw).unwrap().map(|c| c.number), Some(n));
        }
        let e = r.next_into(&mut raw).unwrap_err();
        assert!(matches!(e, FormatError::FileInflation { chunk: 5, inflated, .. } if inflated == 5 << 18), "{e:?}");
        let text = e.to_string();
        assert!(
            text.starts_with("chunk 5 inflates past the file's bound") && text.contains("not a tierscope session"),
            "{text}"
        );
        // The same file at its real size on disk is far under the default floor: it reads.
        assert_eq!(decode(&f).unwrap().chunks.len(), 8);
        // A session's own chunks are nowhere near the ratio: 2,000 processes in one frame.
        let procs: Vec<String> = (0..2000)
            .map(|p| {
                format!(
                    "{{\"pid\":{p},\"faults\":0,\"alloc_pages_by_node\":{{}},\"migrations\":{{}},\"exited\":false}}"
                )
            })
            .collect();
        let frame = format!(
            "{{\"frame\":{{\"t_ms\":1000,\"nodes\":[],\"migrations\":{{}},\"processes\":[{}]}}}}\n",
            procs.join(",")
        );
        let chunk = encode_chunk(frame.as_bytes()).unwrap();
        let ratio = frame.len() as u64 / chunk.len() as u64;
        assert!(ratio * 2 < FILE_INFLATION_RATIO, "a real frame deflates {ratio}x");
    }

    #[test]
    fn a_chunk_declaring_more_than_a_chunk_may_hold_is_refused_before_it_is_read() {
        let mut f = header().to_vec();
        f.extend(16u32.to_le_bytes());
        f.extend((MAX_CHUNK + 1).to_le_bytes());
        f.extend(0u32.to_le_bytes());
        let e = decode(&f).unwrap_err().to_string();
        assert!(e.starts_with("corrupt chunk 1 at byte 16: it declares 67108865 bytes, past the 67108864"), "{e}");
    }
}
