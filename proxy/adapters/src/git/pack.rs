//! Reading the packfile of a receive-pack request, bounded, for reviewers: every object's
//! type and content, deltas resolved where their base is in the pack.
//!
//! Format: git's `Documentation/gitformat-pack.txt`: `PACK`, version 2 or 3, a 4-byte
//! object count, then per object a type-and-size header (type in bits 4-6 of the first
//! byte, size in 4 + 7n bits, little-endian groups), for `OFS_DELTA` a negative offset to
//! the base (big-endian groups of 7 bits, each continuation adding one), for `REF_DELTA`
//! the base's 20-byte object id, and a zlib stream; the delta format (source and target
//! sizes, then copy and insert instructions) from the same document. A thin pack (which
//! receive-pack accepts, `--thin` is git push's default) may hold deltas against objects
//! only the server has: those stay unresolved and are counted in [`Pack::unresolved`].
//!
//! Nothing here panics on bad input: a malformed or truncated pack ends the walk with a
//! [`PackError`] after the objects read so far; [`Limits`] bound the objects read and the
//! bytes inflated.

use std::collections::HashMap;
use std::fmt;

use sha1::{Digest as _, Sha1};

/// Bounds on the work one pack may cost.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Objects read at most; the rest of the pack is left unread.
    pub max_objects: usize,
    /// Bytes inflated and produced by deltas, over the whole pack.
    pub max_total_bytes: usize,
    /// Bytes of one object (inflated, or produced by a delta).
    pub max_object_bytes: usize,
}

impl Default for Limits {
    /// 20,000 objects, 64 MiB in all, 16 MiB per object.
    fn default() -> Self {
        Self {
            max_objects: 20_000,
            max_total_bytes: 64 << 20,
            max_object_bytes: 16 << 20,
        }
    }
}

/// A git object type (`gitformat-pack.txt`, "Object types").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `OBJ_COMMIT` (1).
    Commit,
    /// `OBJ_TREE` (2).
    Tree,
    /// `OBJ_BLOB` (3).
    Blob,
    /// `OBJ_TAG` (4).
    Tag,
}

impl Kind {
    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Kind::Commit),
            2 => Some(Kind::Tree),
            3 => Some(Kind::Blob),
            4 => Some(Kind::Tag),
            _ => None,
        }
    }

    /// The type's name in an object header (`commit`, `tree`, `blob`, `tag`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Commit => "commit",
            Kind::Tree => "tree",
            Kind::Blob => "blob",
            Kind::Tag => "tag",
        }
    }
}

/// Why a pack could not be read to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackError {
    /// No `PACK` signature after the commands, or an unknown version.
    NotAPack,
    /// The pack ends inside object `index` (counting from 0).
    Truncated {
        /// The object being read.
        index: usize,
    },
    /// Object `index` is malformed (`what`).
    Malformed {
        /// The object being read.
        index: usize,
        /// What is wrong.
        what: &'static str,
    },
    /// The delta at pack offset `offset` does not apply to its base, or would exceed the
    /// inflate limit.
    BadDelta {
        /// Offset of the delta object in the pack.
        offset: usize,
    },
    /// A [`Limits`] bound was reached at object `index`.
    Limit {
        /// The object being read.
        index: usize,
        /// Which bound.
        what: &'static str,
    },
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PackError::NotAPack => f.write_str("the request carries no readable pack"),
            PackError::Truncated { index } => write!(f, "the pack ends inside object {index}"),
            PackError::Malformed { index, what } => write!(f, "object {index} of the pack is malformed: {what}"),
            PackError::BadDelta { offset } => write!(
                f,
                "the delta at offset {offset} does not apply to its base (or exceeds the inflate limit)"
            ),
            PackError::Limit { index, what } => {
                write!(f, "stopped reading the pack at object {index}: {what}")
            }
        }
    }
}

/// The objects of a pack that could be read, by object id (40 lowercase hex digits).
#[derive(Debug, Default)]
pub struct Pack {
    /// The object count the pack header announces.
    pub announced: u32,
    /// Resolved objects by id.
    pub objects: HashMap<String, (Kind, Vec<u8>)>,
    /// Delta objects whose base is not in the pack (a thin pack), with the base's id
    /// (hex) or `offset N`.
    pub unresolved: Vec<String>,
    /// Why the walk stopped before the end, when it did.
    pub error: Option<PackError>,
}

impl Pack {
    /// The object `id`, when the pack holds it resolved.
    pub fn get(&self, id: &str) -> Option<(Kind, &[u8])> {
        self.objects.get(id).map(|(k, d)| (*k, d.as_slice()))
    }
}

/// A raw entry as read: a whole object or a delta awaiting its base.
enum Raw {
    Whole(Kind, Vec<u8>),
    OfsDelta(usize, Vec<u8>),
    RefDelta(String, Vec<u8>),
}

/// Reads `pack` (starting at `PACK`) within `limits`. Never fails: what could not be read
/// is in [`Pack::error`] and [`Pack::unresolved`].
pub fn read(pack: &[u8], limits: Limits) -> Pack {
    let mut out = Pack::default();
    if pack.len() < 12
        || &pack[..4] != b"PACK"
        || !matches!(pack[7], 2 | 3)
        || pack[4..7] != [0, 0, 0]
    {
        out.error = Some(PackError::NotAPack);
        return out;
    }
    out.announced = u32::from_be_bytes([pack[8], pack[9], pack[10], pack[11]]);
    let mut budget = limits.max_total_bytes;
    let mut at = 12;
    // Entries by offset, for OFS_DELTA; ids by offset once resolved.
    let mut raws: Vec<(usize, Raw)> = Vec::new();
    for index in 0..out.announced as usize {
        if index >= limits.max_objects {
            out.error = Some(PackError::Limit {
                index,
                what: "too many objects",
            });
            break;
        }
        match entry(pack, at, index, limits.max_object_bytes.min(budget)) {
            Ok((raw, next, used)) => {
                budget -= used;
                raws.push((at, raw));
                at = next;
            }
            Err(error) => {
                out.error = Some(error);
                break;
            }
        }
    }
    // Resolve: whole objects first, then deltas whose base is known, until no progress.
    let mut by_offset: HashMap<usize, String> = HashMap::new();
    let mut pending: Vec<(usize, Raw)> = Vec::new();
    for (offset, raw) in raws {
        match raw {
            Raw::Whole(kind, data) => {
                let id = object_id(kind, &data);
                by_offset.insert(offset, id.clone());
                out.objects.insert(id, (kind, data));
            }
            delta => pending.push((offset, delta)),
        }
    }
    // Bases usually come first (an OFS_DELTA's always does), so one pass in pack order
    // resolves most chains; a few more catch REF_DELTAs to later objects. Bounded, so
    // that a pack ordered against us costs at most MAX_PASSES walks.
    const MAX_PASSES: usize = 16;
    for _ in 0..MAX_PASSES {
        let before = pending.len();
        let mut left = Vec::new();
        for (offset, raw) in pending {
            let (base_id, delta) = match &raw {
                Raw::OfsDelta(base, delta) => (by_offset.get(base).cloned(), delta),
                Raw::RefDelta(id, delta) => {
                    (out.objects.contains_key(id).then(|| id.clone()), delta)
                }
                Raw::Whole(..) => continue,
            };
            let max = limits.max_object_bytes.min(budget);
            let resolved = base_id
                .as_deref()
                .and_then(|id| out.get(id))
                .map(|(kind, base)| (kind, apply_delta(base, delta, max)));
            match resolved {
                None => left.push((offset, raw)),
                Some((kind, Some(data))) => {
                    budget -= data.len();
                    let id = object_id(kind, &data);
                    by_offset.insert(offset, id.clone());
                    out.objects.insert(id, (kind, data));
                }
                Some((_, None)) => {
                    out.error.get_or_insert(PackError::BadDelta { offset });
                }
            }
        }
        pending = left;
        if pending.len() == before || pending.is_empty() {
            break;
        }
    }
    out.unresolved = pending
        .into_iter()
        .map(|(_, raw)| match raw {
            Raw::RefDelta(id, _) => id,
            Raw::OfsDelta(base, _) => format!("offset {base}"),
            Raw::Whole(..) => String::new(),
        })
        .collect();
    out
}

/// One entry at `at`: the raw object, the offset after it and the bytes inflated.
fn entry(
    pack: &[u8],
    at: usize,
    index: usize,
    max: usize,
) -> Result<(Raw, usize, usize), PackError> {
    let truncated = PackError::Truncated { index };
    let mut pos = at;
    let mut byte = *pack.get(pos).ok_or(truncated.clone())?;
    pos += 1;
    let code = (byte >> 4) & 7;
    let mut size = u64::from(byte & 0x0f);
    let mut shift = 4;
    while byte & 0x80 != 0 {
        byte = *pack.get(pos).ok_or(truncated.clone())?;
        pos += 1;
        if shift > 57 {
            return Err(PackError::Malformed {
                index,
                what: "object size too long",
            });
        }
        size |= u64::from(byte & 0x7f) << shift;
        shift += 7;
    }
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    if size > max {
        return Err(PackError::Limit {
            index,
            what: "an object is larger than the inflate limit",
        });
    }
    let base = match code {
        6 => {
            let mut byte = *pack.get(pos).ok_or(truncated.clone())?;
            pos += 1;
            let mut offset = usize::from(byte & 0x7f);
            while byte & 0x80 != 0 {
                byte = *pack.get(pos).ok_or(truncated.clone())?;
                pos += 1;
                offset = offset
                    .checked_add(1)
                    .and_then(|o| o.checked_mul(128))
                    .ok_or(PackError::Malformed {
                        index,
                        what: "delta offset overflows",
                    })?
                    | usize::from(byte & 0x7f);
            }
            let base = at
                .checked_sub(offset)
                .filter(|b| *b >= 12 && offset > 0)
                .ok_or(PackError::Malformed {
                    index,
                    what: "delta base before the pack",
                })?;
            Some(Ok(base))
        }
        7 => {
            let id = pack.get(pos..pos + 20).ok_or(truncated.clone())?;
            pos += 20;
            Some(Err(hex(id)))
        }
        _ => None,
    };
    let (data, next) = inflate(pack, pos, size, index)?;
    let used = data.len();
    let raw = match (base, Kind::from_code(code)) {
        (Some(Ok(base)), _) => Raw::OfsDelta(base, data),
        (Some(Err(id)), _) => Raw::RefDelta(id, data),
        (None, Some(kind)) => Raw::Whole(kind, data),
        (None, None) => {
            return Err(PackError::Malformed {
                index,
                what: "unknown object type",
            })
        }
    };
    Ok((raw, next, used))
}

/// Inflates the zlib stream at `at`, which must yield exactly `size` bytes.
fn inflate(
    pack: &[u8],
    at: usize,
    size: usize,
    index: usize,
) -> Result<(Vec<u8>, usize), PackError> {
    let mut out = Vec::with_capacity(size.min(1 << 20));
    let mut inflater = flate2::Decompress::new(true);
    let input = pack.get(at..).ok_or(PackError::Truncated { index })?;
    loop {
        if out.len() == out.capacity() {
            out.reserve((size + 1 - out.len()).clamp(1, 1 << 20));
        }
        let (before_in, before_out) = (inflater.total_in(), inflater.total_out());
        let consumed = usize::try_from(before_in).unwrap_or(usize::MAX);
        let status = inflater
            .decompress_vec(
                input.get(consumed..).unwrap_or(&[]),
                &mut out,
                flate2::FlushDecompress::None,
            )
            .map_err(|_| PackError::Malformed {
                index,
                what: "bad zlib stream",
            })?;
        if out.len() > size {
            return Err(PackError::Malformed {
                index,
                what: "inflates to more than its size",
            });
        }
        match status {
            flate2::Status::StreamEnd => break,
            _ if inflater.total_in() == before_in && inflater.total_out() == before_out => {
                return Err(PackError::Truncated { index });
            }
            _ => {}
        }
    }
    if out.len() != size {
        return Err(PackError::Malformed {
            index,
            what: "inflates to less than its size",
        });
    }
    let read = usize::try_from(inflater.total_in()).unwrap_or(usize::MAX);
    Ok((out, at + read))
}

/// Reads a delta's size varint (little-endian groups of 7 bits).
fn delta_size(delta: &[u8], pos: &mut usize) -> Option<usize> {
    let mut size = 0usize;
    let mut shift = 0;
    loop {
        let byte = *delta.get(*pos)?;
        *pos += 1;
        if shift > 56 {
            return None;
        }
        size |= usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Some(size);
        }
    }
}

/// Applies `delta` to `base` (`gitformat-pack.txt`, "Deltified representation"); `None`
/// when the delta is malformed, does not fit its base or would exceed `max` bytes.
pub fn apply_delta(base: &[u8], delta: &[u8], max: usize) -> Option<Vec<u8>> {
    let mut pos = 0;
    if delta_size(delta, &mut pos)? != base.len() {
        return None;
    }
    let target = delta_size(delta, &mut pos)?;
    if target > max {
        return None;
    }
    let mut out = Vec::with_capacity(target);
    while pos < delta.len() {
        let op = delta[pos];
        pos += 1;
        if op & 0x80 != 0 {
            let mut offset = 0usize;
            let mut size = 0usize;
            for bit in 0..4 {
                if op & (1 << bit) != 0 {
                    offset |= usize::from(*delta.get(pos)?) << (8 * bit);
                    pos += 1;
                }
            }
            for bit in 0..3 {
                if op & (0x10 << bit) != 0 {
                    size |= usize::from(*delta.get(pos)?) << (8 * bit);
                    pos += 1;
                }
            }
            if size == 0 {
                size = 0x10000;
            }
            out.extend_from_slice(base.get(offset..offset.checked_add(size)?)?);
        } else if op != 0 {
            let n = usize::from(op);
            out.extend_from_slice(delta.get(pos..pos + n)?);
            pos += n;
        } else {
            return None;
        }
        if out.len() > target {
            return None;
        }
    }
    (out.len() == target).then_some(out)
}

/// The SHA-1 object id of an object: of `TYPE SIZE\0DATA` (`gitformat-loose.txt`).
pub fn object_id(kind: Kind, data: &[u8]) -> String {
    let mut hasher = Sha1::new();
    hasher.update(format!("{} {}\0", kind.name(), data.len()).as_bytes());
    hasher.update(data);
    hex(&hasher.finalize())
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    out
}
