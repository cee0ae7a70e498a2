//! Prints what a response body's BLAKE3 digest costs when the body arrives as frames
//! (docs/performance.md, "Ninth round"): `blake3::Hasher` fed frame by frame against
//! `airlock_net::digest::BodyHasher` (through `of_frames`), for 64 KiB and 1 MiB bodies split the ways
//! connections split them: `cargo run --release -p airlock-net --example digest_cost`.

use std::time::Instant;

/// Frame shapes: (name, first frame, later frames). A first frame short of 16 KiB is what
/// a TLS record that also carried the response head leaves for the body.
const SHAPES: [(&str, usize, usize); 4] = [
    ("16 KiB frames", 16_384, 16_384),
    ("TLS records after a 120-byte head", 16_264, 16_384),
    ("8,000-byte reads", 8_000, 8_000),
    ("1,500-byte segments", 1_500, 1_500),
];

fn frames(len: usize, first: usize, rest: usize) -> Vec<Vec<u8>> {
    let body: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    let mut out = Vec::new();
    let mut at = 0;
    let mut size = first;
    while at < len {
        let end = (at + size).min(len);
        out.push(body[at..end].to_vec());
        at = end;
        size = rest;
    }
    out
}

/// Microseconds per body, over enough repetitions to hash about 2 GiB.
fn time(len: usize, mut hash: impl FnMut() -> [u8; 32]) -> f64 {
    let reps = (2usize << 30) / len;
    let started = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(hash());
    }
    started.elapsed().as_secs_f64() * 1e6 / reps as f64
}

fn main() {
    println!(
        "| body | frames | blake3::Hasher per frame µs (GB/s) | BodyHasher µs (GB/s) | ratio |"
    );
    println!("|---|---|---:|---:|---:|");
    for len in [64 * 1024, 1024 * 1024] {
        for (name, first, rest) in SHAPES {
            let frames = frames(len, first, rest);
            let plain = time(len, || {
                let mut hasher = blake3::Hasher::new();
                for frame in &frames {
                    hasher.update(frame);
                }
                *hasher.finalize().as_bytes()
            });
            let aligned = time(len, || airlock_net::digest::of_frames(&frames));
            let gbps = |us: f64| len as f64 / us / 1e3;
            println!(
                "| {} KiB | {name} | {plain:.1} ({:.2}) | {aligned:.1} ({:.2}) | {:.2}× |",
                len / 1024,
                gbps(plain),
                gbps(aligned),
                aligned / plain
            );
        }
    }
}
