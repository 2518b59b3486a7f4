//! The key map's key identity: a key shorter than 16 bytes is its own identity (its bytes
//! and its length in 128 bits); a longer one is identified by its SipHash-1-3 in the 128-bit
//! mode (Aumasson and Bernstein's SipHash; the 128-bit mode of their reference code) under a
//! random 128-bit key drawn for each pass, its top bit set so that it never equals a short
//! key's identity (whose top byte is its length, below 16).
//!
//! Two keys of one identity are one key to the map, and the cleaner would drop the live
//! record of one of them, so no producer may be able to make two keys collide. Short keys
//! never collide at all. SipHash is a pseudorandom function of its secret key: whoever does
//! not know the key (it never leaves the pass, and no hash value is ever shown) can do no
//! better than guess, and any two distinct long keys collide with probability 2^-127,
//! whatever way they were chosen. SipHash-1-3 (one compression round a word, three at the
//! end) is the reduced-round variant that Rust's `std` and CPython use against crafted
//! hash-table collisions; no attack is published that finds its collisions under an unknown
//! key. Accidental collisions are as rare as with Kafka's MD5 (128 bits, but unkeyed, so
//! craftable). The whole key is hashed in one call (no streaming state).
//!
//! An identity chooses its slot in the map through [`KeyHasher::slot_hash`], a folded
//! multiply under two more random words (the mixing of the `foldhash` and `ahash` crates):
//! short keys' bytes are no hash, and keys crafted to share a slot would only lengthen
//! probes, never merge two keys.

/// The random keys of one pass: SipHash-1-3's, and the slot hash's.
#[derive(Clone, Copy)]
pub(super) struct KeyHasher {
    k0: u64,
    k1: u64,
    s0: u64,
    s1: u64,
}

impl KeyHasher {
    /// A hasher under fresh random keys: `std`'s `RandomState` keys come from the OS's
    /// randomness, and its hashes of constants under them are as unpredictable.
    pub(super) fn random() -> Self {
        use std::hash::BuildHasher;
        let state = std::hash::RandomState::new();
        KeyHasher {
            k0: state.hash_one(0x6b30_u64),
            k1: state.hash_one(0x6b31_u64),
            s0: state.hash_one(0x7330_u64),
            s1: state.hash_one(0x7331_u64),
        }
    }

    /// The 128-bit identity of `key` (see the module docs). Inlined into the scan's record
    /// loop: a short key's identity is a few loads; a long key's hash is a call.
    #[inline(always)]
    pub(super) fn identity(&self, key: &[u8]) -> u128 {
        let len = key.len();
        if len < 16 {
            let (low, high) = match (key.first_chunk::<8>(), key.last_chunk::<8>()) {
                // 8 to 15 bytes: the second word is the last 8 bytes, overlapping the first,
                // shifted down past the overlap (none left of a key of 8 bytes).
                (Some(first), Some(last)) => {
                    let past_first = u64::from_le_bytes(*last).checked_shr(8 * (16 - len as u32));
                    (u64::from_le_bytes(*first), past_first.unwrap_or(0))
                }
                _ => (tail_word(key), 0),
            };
            // The top byte is the length: free in both cases (at most 7 bytes in `high`).
            (u128::from(high | ((len as u64) << 56)) << 64) | u128::from(low)
        } else {
            self.long_identity(key)
        }
    }

    /// The identity of a key of 16 bytes or more: its keyed hash, top bit set.
    #[inline(never)]
    fn long_identity(&self, key: &[u8]) -> u128 {
        SipState::<1, 3>::absorb(self.k0, self.k1, key, true).finish128() | (1 << 127)
    }

    /// Where `identity`'s probe starts in the map: a folded multiply (the 128-bit product's
    /// halves xored) of its halves under the random words, and once more to spread its
    /// bits (with one fold, keys that differ in a few bytes cluster under some words).
    #[inline]
    pub(super) fn slot_hash(&self, identity: u128) -> u64 {
        let fold = |a: u64, b: u64| {
            let p = u128::from(a) * u128::from(b);
            (p as u64) ^ ((p >> 64) as u64)
        };
        let h = fold(identity as u64 ^ self.s0, (identity >> 64) as u64 ^ self.s1);
        fold(h ^ self.s1, 0x9e37_79b9_7f4a_7c15)
    }
}

/// SipHash's state: four words, and the compression rounds a word (`C`) and finalization
/// rounds (`D`) of its variant.
struct SipState<const C: usize, const D: usize> {
    v0: u64,
    v1: u64,
    v2: u64,
    v3: u64,
}

impl<const C: usize, const D: usize> SipState<C, D> {
    /// The state after every word of `bytes` and the last word (the tail bytes under the
    /// length's low byte); `wide` is the 128-bit mode (its own initial tweak).
    #[inline(always)]
    fn absorb(k0: u64, k1: u64, bytes: &[u8], wide: bool) -> Self {
        let mut s = SipState {
            v0: k0 ^ 0x736f_6d65_7073_6575,
            v1: k1 ^ 0x646f_7261_6e64_6f6d ^ if wide { 0xee } else { 0 },
            v2: k0 ^ 0x6c79_6765_6e65_7261,
            v3: k1 ^ 0x7465_6462_7974_6573,
        };
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            s.word(u64::from_le_bytes(b));
        }
        s.word(tail_word(words.remainder()) | ((bytes.len() as u64) << 56));
        s
    }

    #[inline(always)]
    fn rounds(&mut self, n: usize) {
        let SipState { v0, v1, v2, v3 } = self;
        let (mut a, mut b, mut c, mut d) = (*v0, *v1, *v2, *v3);
        for _ in 0..n {
            a = a.wrapping_add(b);
            b = b.rotate_left(13) ^ a;
            a = a.rotate_left(32);
            c = c.wrapping_add(d);
            d = d.rotate_left(16) ^ c;
            a = a.wrapping_add(d);
            d = d.rotate_left(21) ^ a;
            c = c.wrapping_add(b);
            b = b.rotate_left(17) ^ c;
            c = c.rotate_left(32);
        }
        (*v0, *v1, *v2, *v3) = (a, b, c, d);
    }

    #[inline(always)]
    fn word(&mut self, m: u64) {
        self.v3 ^= m;
        self.rounds(C);
        self.v0 ^= m;
    }

    #[inline(always)]
    fn xor(&self) -> u64 {
        self.v0 ^ self.v1 ^ self.v2 ^ self.v3
    }

    /// The 128-bit output (the first half low).
    #[inline(always)]
    fn finish128(mut self) -> u128 {
        self.v2 ^= 0xee;
        self.rounds(D);
        let low = self.xor();
        self.v1 ^= 0xdd;
        self.rounds(D);
        (u128::from(self.xor()) << 64) | u128::from(low)
    }

    /// The 64-bit output (only the reference vectors check it: it shares the rest).
    #[cfg(test)]
    fn finish64(mut self) -> u64 {
        self.v2 ^= 0xff;
        self.rounds(D);
        self.xor()
    }
}

/// The bytes of `tail` (fewer than 8) as a little-endian word, read without a copy loop.
#[inline(always)]
fn tail_word(tail: &[u8]) -> u64 {
    debug_assert!(tail.len() < 8);
    let (mut w, mut at) = (0u64, 0);
    if let Some(b) = tail.first_chunk::<4>() {
        w = u64::from(u32::from_le_bytes(*b));
        at = 4;
    }
    if let Some(b) = tail[at..].first_chunk::<2>() {
        w |= u64::from(u16::from_le_bytes(*b)) << (8 * at);
        at += 2;
    }
    if let Some(&b) = tail.get(at) {
        w |= u64::from(b) << (8 * at);
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference key 00 01 .. 0f, and message `i` = 00 01 .. (i-1).
    const K0: u64 = 0x0706_0504_0302_0100;
    const K1: u64 = 0x0f0e_0d0c_0b0a_0908;

    fn message(len: usize) -> Vec<u8> {
        (0..len as u8).collect()
    }

    #[test]
    fn siphash_2_4_64_matches_the_reference_vectors() {
        // From the reference code's vectors.h (`vectors_sip64`), as little-endian words.
        let vectors = [
            (0, 0x726f_db47_dd0e_0e31),
            (1, 0x74f8_39c5_93dc_67fd),
            (7, 0xab02_00f5_8b01_d137),
            (8, 0x93f5_f579_9a93_2462),
            (15, 0xa129_ca61_49be_45e5),
            (16, 0x3f2a_cc7f_57c2_9bdb),
            (63, 0x958a_324c_eb06_4572),
        ];
        for (len, want) in vectors {
            let got = SipState::<2, 4>::absorb(K0, K1, &message(len), false).finish64();
            assert_eq!(got, want, "SipHash-2-4-64 of {len} bytes");
        }
    }

    #[test]
    fn siphash_2_4_128_matches_the_reference_vectors() {
        // From the reference code's vectors.h (`vectors_sip128`): the output's bytes.
        let vectors: [(usize, [u8; 16]); 3] = [
            (
                0,
                [
                    0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7,
                    0x55, 0x02, 0x93,
                ],
            ),
            (
                1,
                [
                    0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44, 0x34, 0x76, 0x59, 0x11, 0x9b,
                    0x22, 0xfc, 0x45,
                ],
            ),
            (
                5,
                [
                    0x13, 0x68, 0x87, 0x59, 0x80, 0x77, 0x6f, 0x88, 0x54, 0x52, 0x7a, 0x07, 0x69,
                    0x0e, 0x96, 0x27,
                ],
            ),
        ];
        for (len, want) in vectors {
            let got = SipState::<2, 4>::absorb(K0, K1, &message(len), true).finish128();
            assert_eq!(got.to_le_bytes(), want, "SipHash-2-4-128 of {len} bytes");
        }
    }

    /// Keys that differ in a few bytes (counters as text, big- and little-endian) spread
    /// over the slots as random ones would: linear probes into a third-full array stay
    /// short on average, in every one of several passes.
    #[test]
    fn structured_keys_spread_over_the_slots() {
        let sets: [(&str, Vec<Vec<u8>>); 3] = [
            (
                "text",
                (0..10_000u64)
                    .map(|k| format!("key-{k:08}").into_bytes())
                    .collect(),
            ),
            (
                "big-endian",
                (0..10_000u64)
                    .map(|k| (k << 20).to_be_bytes().to_vec())
                    .collect(),
            ),
            (
                "little-endian",
                (0..10_000u64)
                    .map(|k| (k << 40).to_le_bytes().to_vec())
                    .collect(),
            ),
        ];
        for _ in 0..20 {
            let h = KeyHasher::random();
            for (name, keys) in &sets {
                let slots = 32_768usize;
                let mut taken = vec![false; slots];
                let mut probes = 0;
                for k in keys {
                    let home = (u128::from(h.slot_hash(h.identity(k))) * slots as u128) >> 64;
                    let mut i = home as usize;
                    probes += 1;
                    while taken[i] {
                        i = (i + 1) % slots;
                        probes += 1;
                    }
                    taken[i] = true;
                }
                let mean = probes as f64 / keys.len() as f64;
                // Random homes average about 1.2 probes at this load.
                assert!(mean < 2.0, "{name} keys: {mean:.2} probes a key on average");
            }
        }
    }

    #[test]
    fn two_passes_hash_long_keys_under_different_keys() {
        let (a, b) = (KeyHasher::random(), KeyHasher::random());
        let long = b"a key of sixteen bytes or more";
        assert_ne!(a.identity(long), b.identity(long));
        assert_eq!(a.identity(long), a.identity(long));
        // Short keys are themselves, whatever the pass.
        assert_eq!(a.identity(b"key"), b.identity(b"key"));
        assert_ne!(
            a.slot_hash(a.identity(b"key")),
            b.slot_hash(b.identity(b"key"))
        );
    }

    #[test]
    fn a_short_key_is_its_bytes_and_length() {
        let h = KeyHasher::random();
        for len in 0..16 {
            let key: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
            let mut want = (len as u128) << 120;
            for (i, &b) in key.iter().enumerate() {
                want |= u128::from(b) << (8 * i);
            }
            assert_eq!(h.identity(&key), want, "a key of {len} bytes");
        }
    }

    #[test]
    fn no_two_keys_around_the_short_keys_bound_share_an_identity() {
        let h = KeyHasher::random();
        let mut seen = std::collections::HashMap::new();
        // Every length from 0 to 24, with zero bytes (a key and the same key with a zero
        // byte more must differ) and with 0xff bytes (high bits of every word set).
        for len in 0..=24 {
            for fill in [0u8, 0xff, b'k'] {
                let key = vec![fill; len];
                let other = seen.insert(h.identity(&key), key.clone());
                assert!(
                    other.as_ref().is_none_or(|o| *o == key),
                    "{key:?} and {other:?}"
                );
            }
        }
        // Long keys' identities have the top bit set; short keys' never.
        assert!(h.identity(&[0xff; 15]) >> 127 == 0);
        assert!(h.identity(&[0; 16]) >> 127 == 1);
        // The identity of a short key is its bytes and length.
        let id = h.identity(b"key-00001234");
        assert_eq!(&id.to_le_bytes()[..12], b"key-00001234");
        assert_eq!(id.to_le_bytes()[12..], [0, 0, 0, 12]);
    }
}
