//! The session file's framing (docs/session-format.md): a 16-byte header (magic, version), then a
//! stream of chunks, each `u32 compressed length | u32 raw length | u32 CRC-32 of the compressed
//! bytes` (little endian) and a raw-deflate body of newline-separated JSON records. A chunk is
//! written with one `write` per interval, so a killed recorder leaves whole chunks and at most one
//! partial one at the end: the reader keeps every whole chunk and reports the partial one as a
//! warning. Anything else that does not add up is an error, never a panic.
use std::io::{Read, Write};

use bytes::{Buf, BufMut, BytesMut};
use flate2::{read::DeflateDecoder, write::DeflateEncoder, Compression};

/// The first 8 bytes of every session file.
pub const MAGIC: &[u8; 8] = b"TSCOPE\x00S";
/// The format version this build writes and the newest it reads.
pub const VERSION: u32 = 1;
/// Magic, version, 4 reserved bytes.
pub const HEADER_LEN: usize = 16;
/// Compressed length, raw length, CRC-32.
pub const CHUNK_HEADER_LEN: usize = 12;
/// No chunk is larger than this (either length); a larger one is corruption, not a reason to
/// allocate gigabytes.
pub const MAX_CHUNK: u32 = 64 << 20;

/// Why a file cannot be read as a session.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("not a tierscope session file (wrong magic bytes); give a file written by `tierscope record`")]
    WrongMagic,
    #[error("too short to be a session file ({0} bytes; the 16-byte header is incomplete)")]
    NoHeader(usize),
    #[error("session format version {found} is newer than this tierscope reads ({VERSION}): update tierscope")]
    NewerVersion { found: u32 },
    #[error("session format version 0 is invalid (corrupt header)")]
    ZeroVersion,
    #[error("corrupt chunk at byte {offset}: {why}")]
    Corrupt { offset: usize, why: String },
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

/// The raw chunk bodies of a file, and what was cut off at its end.
#[derive(Debug, Default)]
pub struct Chunks {
    pub version: u32,
    pub chunks: Vec<Vec<u8>>,
    /// Set when the file ends inside a chunk (a recorder killed mid-write, a copy cut short):
    /// the byte offset where the partial chunk starts and how many bytes it had.
    pub truncated: Option<(usize, usize)>,
}

/// Splits a whole file into decompressed chunk bodies.
pub fn decode(file: &[u8]) -> Result<Chunks, FormatError> {
    if file.len() >= MAGIC.len() && &file[..MAGIC.len()] != MAGIC {
        return Err(FormatError::WrongMagic);
    }
    if file.len() < HEADER_LEN {
        return Err(if MAGIC.starts_with(file) { FormatError::NoHeader(file.len()) } else { FormatError::WrongMagic });
    }
    let version = u32::from_le_bytes([file[8], file[9], file[10], file[11]]);
    if version == 0 {
        return Err(FormatError::ZeroVersion);
    }
    if version > VERSION {
        return Err(FormatError::NewerVersion { found: version });
    }
    let mut out = Chunks { version, ..Chunks::default() };
    let mut at = HEADER_LEN;
    while at < file.len() {
        let rest = &file[at..];
        if rest.len() < CHUNK_HEADER_LEN {
            out.truncated = Some((at, rest.len()));
            break;
        }
        let mut h = &rest[..CHUNK_HEADER_LEN];
        let (clen, rlen, crc) = (h.get_u32_le(), h.get_u32_le(), h.get_u32_le());
        if clen > MAX_CHUNK || rlen > MAX_CHUNK {
            return Err(FormatError::Corrupt { offset: at, why: format!("chunk length {clen}/{rlen} over the limit") });
        }
        let end = CHUNK_HEADER_LEN + clen as usize;
        if rest.len() < end {
            out.truncated = Some((at, rest.len()));
            break;
        }
        let body = &rest[CHUNK_HEADER_LEN..end];
        if crc32fast::hash(body) != crc {
            return Err(FormatError::Corrupt { offset: at, why: "checksum mismatch".into() });
        }
        let mut raw = Vec::with_capacity(rlen as usize);
        // One byte more than announced tells an overlong body from an exact one.
        let read = DeflateDecoder::new(body).take(u64::from(rlen) + 1).read_to_end(&mut raw);
        match read {
            Ok(n) if n == rlen as usize => out.chunks.push(raw),
            Ok(n) => {
                return Err(FormatError::Corrupt {
                    offset: at,
                    why: format!("inflates to {n} bytes, header says {rlen}"),
                })
            }
            Err(e) => return Err(FormatError::Corrupt { offset: at, why: format!("bad deflate data ({e})") }),
        }
        at += end;
    }
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
            assert_eq!(c.truncated, Some((first_end, cut - first_end)), "cut at {cut}");
        }
        assert_eq!(decode(&f[..first_end]).unwrap().truncated, None);
        assert_eq!(decode(&f[..HEADER_LEN]).unwrap().chunks.len(), 0);
    }

    #[test]
    fn a_flipped_body_bit_is_a_checksum_error() {
        let mut f = file(&[b"payload payload payload\n"]);
        let last = f.len() - 1;
        f[last] ^= 0x10;
        assert!(matches!(decode(&f), Err(FormatError::Corrupt { offset: HEADER_LEN, .. })));
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
        assert!(decode(&f).unwrap_err().to_string().contains("header says 3"));
    }
}
