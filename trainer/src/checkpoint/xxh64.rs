//! XXH64 (Yann Collet's xxHash, 64-bit, seed 0): the checksum at the end of every
//! checkpoint and the fingerprint of a dataset.

/// XXH64 with seed 0 (Yann Collet's xxHash, 64-bit): the checksum at the end of every
/// checkpoint, over every byte before it. Public so tools and tests can compute it.
#[must_use]
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut hash = Xxh64::new();
    hash.update(bytes);
    hash.finish()
}

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

/// Streaming XXH64, seed 0.
pub(super) struct Xxh64 {
    lanes: [u64; 4],
    /// The last, incomplete 32-byte stripe.
    buffer: [u8; 32],
    buffered: usize,
    total: u64,
}

fn round(lane: u64, input: u64) -> u64 {
    lane.wrapping_add(input.wrapping_mul(P2)).rotate_left(31).wrapping_mul(P1)
}

fn merge(hash: u64, lane: u64) -> u64 {
    (hash ^ round(0, lane)).wrapping_mul(P1).wrapping_add(P4)
}

impl Xxh64 {
    pub(super) fn new() -> Self {
        Self {
            lanes: [P1.wrapping_add(P2), P2, 0, 0u64.wrapping_sub(P1)],
            buffer: [0; 32],
            buffered: 0,
            total: 0,
        }
    }

    pub(super) fn update(&mut self, mut input: &[u8]) {
        self.total += input.len() as u64;
        if self.buffered > 0 {
            let take = (32 - self.buffered).min(input.len());
            self.buffer[self.buffered..self.buffered + take].copy_from_slice(&input[..take]);
            self.buffered += take;
            input = &input[take..];
            if self.buffered < 32 {
                return;
            }
            let stripe = self.buffer;
            self.stripes(std::slice::from_ref(&stripe));
            self.buffered = 0;
        }
        let (stripes, rest) = input.as_chunks::<32>();
        self.stripes(stripes);
        self.buffer[..rest.len()].copy_from_slice(rest);
        self.buffered = rest.len();
    }

    fn stripes(&mut self, stripes: &[[u8; 32]]) {
        let [mut a, mut b, mut c, mut d] = self.lanes;
        for stripe in stripes {
            let words: [u64; 4] = bytemuck::cast(*stripe);
            a = round(a, u64::from_le(words[0]));
            b = round(b, u64::from_le(words[1]));
            c = round(c, u64::from_le(words[2]));
            d = round(d, u64::from_le(words[3]));
        }
        self.lanes = [a, b, c, d];
    }

    pub(super) fn finish(&self) -> u64 {
        let mut hash = if self.total >= 32 {
            let [a, b, c, d] = self.lanes;
            let mut hash = a
                .rotate_left(1)
                .wrapping_add(b.rotate_left(7))
                .wrapping_add(c.rotate_left(12))
                .wrapping_add(d.rotate_left(18));
            for lane in self.lanes {
                hash = merge(hash, lane);
            }
            hash
        } else {
            P5
        };
        hash = hash.wrapping_add(self.total);
        let (words, rest) = self.buffer[..self.buffered].as_chunks::<8>();
        for word in words {
            hash ^= round(0, u64::from_le_bytes(*word));
            hash = hash.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
        }
        let (halves, bytes) = rest.as_chunks::<4>();
        for half in halves {
            hash ^= u64::from(u32::from_le_bytes(*half)).wrapping_mul(P1);
            hash = hash.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
        }
        for &byte in bytes {
            hash ^= u64::from(byte).wrapping_mul(P5);
            hash = hash.rotate_left(11).wrapping_mul(P1);
        }
        hash ^= hash >> 33;
        hash = hash.wrapping_mul(P2);
        hash ^= hash >> 29;
        hash = hash.wrapping_mul(P3);
        hash ^ (hash >> 32)
    }
}
