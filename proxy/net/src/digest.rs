//! BLAKE3 over a body that arrives in frames of whatever size the connection gave.
//!
//! `blake3::Hasher::update` only reaches its SIMD paths on inputs that are whole, aligned
//! runs of 1 KiB chunks: "The update method can't take full advantage of SIMD
//! optimizations if its input buffer is too small or oddly sized. Using a 16 KiB buffer,
//! or any multiple of that, enables all currently supported SIMD instruction sets"
//! (<https://docs.rs/blake3/1/blake3/struct.Hasher.html>). Frames off a TLS connection
//! are oddly sized (a record's plaintext less its framing, whatever a read returned), and
//! fed one by one they hashed at 0.8–2.0 GB/s against 2.6–3.4 GB/s aligned on the bench
//! machine (docs/performance.md "Ninth round"). [`BodyHasher`] feeds the hasher
//! 16 KiB-aligned runs instead, copying only the bytes that straddle a boundary.

/// The run the hasher is fed in: 16 KiB, the size blake3's documentation names.
const BLOCK: usize = 16 * 1024;

/// An incremental BLAKE3 (256-bit) hasher whose digest equals `blake3::hash` of the
/// concatenated input, however the input was split.
///
/// Holds up to 16 KiB of carried bytes (allocated on the first oddly sized input), so
/// each input's bytes are copied at most once and only where they straddle a 16 KiB
/// boundary of the whole stream.
#[derive(Default)]
pub struct BodyHasher {
    hasher: blake3::Hasher,
    carry: Vec<u8>,
}

impl BodyHasher {
    /// An empty hasher.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `data`, the next bytes of the stream.
    pub fn update(&mut self, mut data: &[u8]) {
        if !self.carry.is_empty() {
            let take = (BLOCK - self.carry.len()).min(data.len());
            self.carry.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.carry.len() < BLOCK {
                return;
            }
            self.hasher.update(&self.carry);
            self.carry.clear();
        }
        // Here everything hashed so far is a multiple of BLOCK.
        let whole = data.len() / BLOCK * BLOCK;
        if whole > 0 {
            self.hasher.update(&data[..whole]);
        }
        let rest = &data[whole..];
        if !rest.is_empty() {
            if self.carry.capacity() == 0 {
                self.carry.reserve_exact(BLOCK);
            }
            self.carry.extend_from_slice(rest);
        }
    }

    /// The digest of everything added: the 32 bytes `b3sum` prints in hex.
    pub fn finalize(mut self) -> [u8; 32] {
        self.hasher.update(&self.carry);
        *self.hasher.finalize().as_bytes()
    }
}

/// The BLAKE3 digest of a body held as frames, as [`BodyHasher`] takes it.
pub fn of_frames<B: AsRef<[u8]>>(frames: &[B]) -> [u8; 32] {
    if let [only] = frames {
        // One frame is hashed in place: nothing to align, no carry to allocate.
        return *blake3::hash(only.as_ref()).as_bytes();
    }
    let mut hasher = BodyHasher::new();
    for frame in frames {
        hasher.update(frame.as_ref());
    }
    hasher.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn any_split_gives_the_digest_of_the_whole() {
        for len in [
            0,
            1,
            1023,
            1024,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            65_536,
            200_003,
        ] {
            let data = body(len);
            let expected = *blake3::hash(&data).as_bytes();
            for frame in [1, 7, 1000, 1024, 8000, 16_379, BLOCK, 40_000, 1 << 20] {
                let frames: Vec<&[u8]> = data.chunks(frame).collect();
                assert_eq!(of_frames(&frames), expected, "len {len}, frames of {frame}");
            }
        }
    }

    #[test]
    fn uneven_frames_in_one_stream_give_the_digest_of_the_whole() {
        let data = body(300_000);
        let sizes = [5, 16_379, 16_389, 3, 70_000, 1, 16_384, 9_000];
        let mut hasher = BodyHasher::new();
        let mut at = 0;
        for size in sizes.iter().cycle() {
            if at == data.len() {
                break;
            }
            let end = (at + size).min(data.len());
            hasher.update(&data[at..end]);
            at = end;
        }
        assert_eq!(hasher.finalize(), *blake3::hash(&data).as_bytes());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_splits_give_the_digest_of_the_whole(
            len in 0usize..120_000,
            cuts in proptest::collection::vec(0usize..120_000, 0..40),
        ) {
            let data = body(len);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (len + 1)).collect();
            cuts.push(0);
            cuts.push(len);
            cuts.sort_unstable();
            let frames: Vec<&[u8]> = cuts.windows(2).map(|w| &data[w[0]..w[1]]).collect();
            proptest::prop_assert_eq!(of_frames(&frames), *blake3::hash(&data).as_bytes());
        }
    }

    #[test]
    fn the_carry_never_outgrows_one_block() {
        let data = body(100_000);
        let mut hasher = BodyHasher::new();
        for frame in data.chunks(9_999) {
            hasher.update(frame);
            assert!(hasher.carry.len() < BLOCK);
            assert!(hasher.carry.capacity() <= 2 * BLOCK);
        }
    }
}
