//! The on-disk format of write-ahead-log segments: file names, the segment header, record framing,
//! and the pure scan that splits a segment's bytes into valid records and an invalid remainder.
//!
//! Everything here works on byte slices and does no I/O, so that the format can be tested
//! byte by byte and recovery policy (what to truncate, what to refuse) stays in `mod.rs`. This
//! module must never decide whether damage is a torn tail or corruption of acknowledged data:
//! it only reports where the first invalid frame is and whether a valid frame follows it.
//!
//! Segment layout: `[header: SEGMENT_HEADER_BYTES][frame]*`, where a frame is
//! `[u32 LE payload_len][u32 LE crc32c(lsn u64 LE ++ payload)][u64 LE lsn][payload]`.

use std::ops::Range;

use super::RECORD_PAYLOAD_BYTES_MAX;

/// Identifies a stockd WAL segment; a file without it is never read as a log.
const SEGMENT_MAGIC: [u8; 8] = *b"STKDWAL\0";
/// Bumped on any incompatible change of the header or the framing.
const SEGMENT_VERSION: u32 = 1;
/// magic (8) + version (4) + first_lsn (8) + crc32c of the preceding 20 bytes (4).
pub(super) const SEGMENT_HEADER_BYTES: usize = 24;
/// payload_len (4) + crc (4) + lsn (8).
pub(super) const FRAME_HEADER_BYTES: usize = 16;

const SEGMENT_PREFIX: &str = "wal-";
const SEGMENT_SUFFIX: &str = ".log";

/// `wal-<first_lsn as 20 zero-padded digits>.log`: fixed width so that name order is LSN order.
pub(super) fn segment_file_name(first_lsn: u64) -> String {
    format!("{SEGMENT_PREFIX}{first_lsn:020}{SEGMENT_SUFFIX}")
}

/// The first LSN encoded in a segment file name, or `None` if the name is not a segment's.
pub(super) fn parse_segment_file_name(name: &str) -> Option<u64> {
    parse_lsn_name(name, SEGMENT_PREFIX, SEGMENT_SUFFIX)
}

/// Parses `<prefix><20 digits><suffix>`; shared with snapshot names. LSN 0 is never written
/// (LSNs start at 1), so a name carrying it is not ours either.
pub(super) fn parse_lsn_name(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&lsn| lsn != 0)
}

pub(super) fn encode_segment_header(first_lsn: u64) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut header = [0u8; SEGMENT_HEADER_BYTES];
    header[0..8].copy_from_slice(&SEGMENT_MAGIC);
    header[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
    header[12..20].copy_from_slice(&first_lsn.to_le_bytes());
    let crc = crc32c::crc32c(&header[0..20]);
    header[20..24].copy_from_slice(&crc.to_le_bytes());
    header
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum SegmentHeader {
    Valid,
    /// The file is shorter than a header or holds only zero bytes: it was created but its header
    /// never reached the disk, so it cannot hold any record either (records are written only
    /// after the header has been synced).
    Torn,
    /// The header fails its checksum: damaged, or torn by a crash before its sync returned.
    /// Which one, only what follows in the file can tell (see `mod.rs`).
    Damaged(String),
    /// An intact header that is not this segment's: another version, another first lsn.
    Invalid(String),
}

/// Checks a segment's header against the first LSN its file name promises.
pub(super) fn check_segment_header(bytes: &[u8], first_lsn: u64) -> SegmentHeader {
    if bytes.len() < SEGMENT_HEADER_BYTES || bytes.iter().all(|&byte| byte == 0) {
        return SegmentHeader::Torn;
    }
    let header = &bytes[..SEGMENT_HEADER_BYTES];
    // The checksum covers the magic: a wrong magic with a wrong checksum is damage like any
    // other; a wrong magic with a right checksum is a file that is not a stockd segment.
    let crc = read_u32(header, 20);
    if crc != crc32c::crc32c(&header[0..20]) {
        let what = if header[0..8] != SEGMENT_MAGIC {
            "segment header has a wrong magic and checksum"
        } else {
            "segment header checksum mismatch"
        };
        return SegmentHeader::Damaged(what.to_string());
    }
    if header[0..8] != SEGMENT_MAGIC {
        return SegmentHeader::Invalid("segment header has a wrong magic".to_string());
    }
    let version = read_u32(header, 8);
    if version != SEGMENT_VERSION {
        return SegmentHeader::Invalid(format!(
            "segment format version {version} is not supported (expected {SEGMENT_VERSION})"
        ));
    }
    let header_first_lsn = read_u64(header, 12);
    if header_first_lsn != first_lsn {
        return SegmentHeader::Invalid(format!(
            "segment header says first lsn {header_first_lsn}, file name says {first_lsn}"
        ));
    }
    SegmentHeader::Valid
}

/// Appends one framed record to `buffer`.
pub(super) fn encode_frame(buffer: &mut Vec<u8>, lsn: u64, payload: &[u8]) {
    debug_assert!(payload.len() <= RECORD_PAYLOAD_BYTES_MAX);
    let payload_len = u32::try_from(payload.len()).expect("payload length is bounded by the limit");
    buffer.reserve(FRAME_HEADER_BYTES + payload.len());
    buffer.extend_from_slice(&payload_len.to_le_bytes());
    buffer.extend_from_slice(&frame_crc(lsn, payload).to_le_bytes());
    buffer.extend_from_slice(&lsn.to_le_bytes());
    buffer.extend_from_slice(payload);
}

/// The checksum covers the LSN too, so that a stale but intact frame (for example, one left from
/// an earlier file at the same offset) cannot pass for the record that should be there.
fn frame_crc(lsn: u64, payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&lsn.to_le_bytes()), payload)
}

/// The first invalid frame of a segment.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct InvalidFrame {
    /// Byte offset of the frame's first byte in the segment file.
    pub offset: usize,
    pub reason: String,
}

#[derive(Debug)]
pub(super) struct SegmentScan {
    /// `(lsn, payload byte range)` of each valid record, in file order.
    pub records: Vec<(u64, Range<usize>)>,
    /// The LSN the next record would have to carry.
    pub next_lsn: u64,
    /// `None` when the valid records end exactly at the end of the file.
    pub invalid: Option<InvalidFrame>,
}

/// Reads frames after the header until the end of `bytes` or the first invalid frame. A frame is
/// valid if it is complete, its length is within the limit, its checksum matches and its LSN is
/// the next one expected (the segment's first LSN for the first frame).
pub(super) fn scan_segment(bytes: &[u8], first_lsn: u64) -> SegmentScan {
    let mut records = Vec::new();
    let mut next_lsn = first_lsn;
    let mut offset = SEGMENT_HEADER_BYTES;
    while offset < bytes.len() {
        match parse_frame(bytes, offset) {
            Ok((lsn, payload)) if lsn == next_lsn => {
                let end = payload.end;
                records.push((lsn, payload));
                next_lsn += 1;
                offset = end;
            }
            Ok((lsn, _)) => {
                let reason = format!("record has lsn {lsn}, expected {next_lsn}");
                let invalid = Some(InvalidFrame { offset, reason });
                return SegmentScan {
                    records,
                    next_lsn,
                    invalid,
                };
            }
            Err(reason) => {
                let invalid = Some(InvalidFrame {
                    offset,
                    reason: reason.to_string(),
                });
                return SegmentScan {
                    records,
                    next_lsn,
                    invalid,
                };
            }
        }
    }
    SegmentScan {
        records,
        next_lsn,
        invalid: None,
    }
}

/// Parses the frame at `offset`: its LSN and the byte range of its payload.
fn parse_frame(bytes: &[u8], offset: usize) -> Result<(u64, Range<usize>), &'static str> {
    let remaining_bytes = bytes.len() - offset;
    if remaining_bytes < FRAME_HEADER_BYTES {
        return Err("incomplete record header at the end of the segment");
    }
    let payload_len = read_u32(bytes, offset) as usize;
    if payload_len > RECORD_PAYLOAD_BYTES_MAX {
        return Err("record length exceeds the payload limit");
    }
    if payload_len > remaining_bytes - FRAME_HEADER_BYTES {
        return Err("record runs past the end of the segment");
    }
    let crc = read_u32(bytes, offset + 4);
    let lsn = read_u64(bytes, offset + 8);
    let payload_start = offset + FRAME_HEADER_BYTES;
    let payload = payload_start..payload_start + payload_len;
    if crc != frame_crc(lsn, &bytes[payload.clone()]) {
        return Err("record checksum mismatch");
    }
    Ok((lsn, payload))
}

/// Whether a valid frame carrying an LSN of at least `min_lsn` starts at any byte offset from
/// `start` on. Used after an invalid frame to tell a torn tail (nothing valid after it) from
/// damage in the middle of the log (valid records follow). Every offset is tried, not just the
/// one the invalid frame's length points to, because that length may itself be the damaged field.
/// The LSN range test runs before the checksum so that scanning garbage stays cheap.
pub(super) fn valid_frame_follows(bytes: &[u8], start: usize, min_lsn: u64) -> bool {
    let scanned_bytes = bytes.len().saturating_sub(start);
    // Every frame takes at least FRAME_HEADER_BYTES, which bounds how far LSNs can run ahead.
    let max_lsn = min_lsn.saturating_add((scanned_bytes / FRAME_HEADER_BYTES) as u64);
    let mut offset = start;
    while offset + FRAME_HEADER_BYTES <= bytes.len() {
        let lsn = read_u64(bytes, offset + 8);
        if (min_lsn..=max_lsn).contains(&lsn) && parse_frame(bytes, offset).is_ok() {
            return true;
        }
        offset += 1;
    }
    false
}

fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(word)
}

pub(super) fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment_with(first_lsn: u64, payloads: &[&[u8]]) -> Vec<u8> {
        let mut bytes = encode_segment_header(first_lsn).to_vec();
        for (index, payload) in payloads.iter().enumerate() {
            encode_frame(&mut bytes, first_lsn + index as u64, payload);
        }
        bytes
    }

    #[test]
    fn file_names_round_trip_and_sort_by_lsn() {
        assert_eq!(segment_file_name(7), "wal-00000000000000000007.log");
        assert_eq!(
            parse_segment_file_name(&segment_file_name(u64::MAX)),
            Some(u64::MAX)
        );
        assert_eq!(parse_segment_file_name("wal-7.log"), None);
        assert_eq!(
            parse_segment_file_name("wal-00000000000000000000.log"),
            None
        );
        assert_eq!(
            parse_segment_file_name("wal-0000000000000000000x.log"),
            None
        );
        assert_eq!(
            parse_segment_file_name("wal-00000000000000000007.log.tmp"),
            None
        );
        assert!(segment_file_name(9) < segment_file_name(10));
    }

    #[test]
    fn header_checks() {
        let header = encode_segment_header(5);
        assert_eq!(check_segment_header(&header, 5), SegmentHeader::Valid);
        assert!(matches!(
            check_segment_header(&header, 6),
            SegmentHeader::Invalid(_)
        ));
        assert_eq!(check_segment_header(&header[..10], 5), SegmentHeader::Torn);
        assert_eq!(check_segment_header(&[0u8; 100], 5), SegmentHeader::Torn);
        let mut flipped = header;
        flipped[13] ^= 1;
        assert!(matches!(
            check_segment_header(&flipped, 5),
            SegmentHeader::Damaged(_)
        ));
        let mut wrong_magic = header;
        wrong_magic[0] = b'X';
        assert!(matches!(
            check_segment_header(&wrong_magic, 5),
            SegmentHeader::Damaged(_)
        ));
        let crc = crc32c::crc32c(&wrong_magic[0..20]);
        wrong_magic[20..24].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            check_segment_header(&wrong_magic, 5),
            SegmentHeader::Invalid(_)
        ));
    }

    #[test]
    fn scan_returns_every_record_of_a_clean_segment() {
        let bytes = segment_with(3, &[b"a", b"", b"ccc"]);
        let scan = scan_segment(&bytes, 3);
        assert_eq!(scan.invalid, None);
        assert_eq!(scan.next_lsn, 6);
        let payloads: Vec<(u64, &[u8])> = scan
            .records
            .iter()
            .map(|(lsn, range)| (*lsn, &bytes[range.clone()]))
            .collect();
        assert_eq!(
            payloads,
            vec![(3, &b"a"[..]), (4, &b""[..]), (5, &b"ccc"[..])]
        );
    }

    #[test]
    fn scan_stops_at_an_unexpected_lsn() {
        let mut bytes = encode_segment_header(1).to_vec();
        encode_frame(&mut bytes, 1, b"one");
        let second_offset = bytes.len();
        encode_frame(&mut bytes, 3, b"three");
        let scan = scan_segment(&bytes, 1);
        assert_eq!(scan.records.len(), 1);
        assert_eq!(
            scan.invalid.map(|invalid| invalid.offset),
            Some(second_offset)
        );
    }

    #[test]
    fn a_valid_frame_is_found_after_damage_but_not_in_zeros() {
        let bytes = segment_with(1, &[b"first", b"second", b"third"]);
        let second_offset = SEGMENT_HEADER_BYTES + FRAME_HEADER_BYTES + 5;
        assert!(valid_frame_follows(&bytes, second_offset + 1, 2));
        let mut zeros = segment_with(1, &[b"first"]);
        zeros.extend_from_slice(&[0u8; 200]);
        assert!(!valid_frame_follows(&zeros, second_offset + 1, 2));
    }
}
