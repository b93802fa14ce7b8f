//! A prefix cache model: a prompt reports as cached its leading whole blocks of tokens that
//! some earlier prompt also started with, like vLLM's automatic prefix caching.

use std::collections::HashSet;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a over `bytes`, continuing from `hash` (start with [`fnv1a_start`]).
pub(crate) fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// The FNV-1a initial state.
pub(crate) const fn fnv1a_start() -> u64 {
    FNV_OFFSET
}

/// Remembers the hashes of every block-aligned prompt prefix seen so far.
pub(crate) struct PrefixCache {
    block: usize,
    capacity: usize,
    seen: HashSet<u64>,
}

impl PrefixCache {
    /// A cache of `block`-token blocks, forgetting everything once it holds `capacity` blocks.
    pub(crate) fn new(block: u32, capacity: usize) -> Self {
        PrefixCache {
            block: block.max(1) as usize,
            capacity,
            seen: HashSet::new(),
        }
    }

    /// Cached tokens of a prompt made of `words` with `prompt_tokens` tokens, then remembers
    /// its blocks. At least one prompt token is always computed, as in real engines.
    pub(crate) fn lookup_and_insert(&mut self, words: &[String], prompt_tokens: u32) -> u32 {
        let mut hash = fnv1a_start();
        let mut cached_blocks = 0;
        let mut matching = true;
        for (i, block) in words.chunks_exact(self.block).enumerate() {
            for word in block {
                hash = fnv1a(fnv1a(hash, word.as_bytes()), b" ");
            }
            if matching && self.seen.contains(&hash) {
                cached_blocks = i + 1;
            } else {
                matching = false;
            }
            if self.seen.len() >= self.capacity {
                self.seen.clear();
            }
            self.seen.insert(hash);
        }
        let cached = u32::try_from(cached_blocks * self.block).unwrap_or(u32::MAX);
        cached.min(prompt_tokens.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn shared_leading_blocks_are_cached() {
        let mut cache = PrefixCache::new(2, 1000);
        assert_eq!(cache.lookup_and_insert(&words("a b c d e"), 5), 0);
        assert_eq!(cache.lookup_and_insert(&words("a b c d x"), 5), 4);
        assert_eq!(cache.lookup_and_insert(&words("a b x d e"), 5), 2);
        assert_eq!(cache.lookup_and_insert(&words("z b c d"), 4), 0);
        // The whole prompt cached still leaves one token to compute.
        assert_eq!(cache.lookup_and_insert(&words("a b c d"), 4), 3);
    }
}
