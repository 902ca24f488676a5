//! `Xorshift`: a small seeded pseudo-random generator (xorshift64*) for reproducible property
//! and fuzz tests: the same seed gives the same sequence on every machine. Not for anything
//! that must be unpredictable.

pub struct Xorshift(u64);

impl Xorshift {
    /// A generator from `seed` (0 is replaced: xorshift would stay at 0).
    pub fn new(seed: u64) -> Xorshift {
        Xorshift(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// One of `items`, which must not be empty.
    pub fn pick<'a, T: ?Sized>(&mut self, items: &[&'a T]) -> &'a T {
        items[self.below(items.len())]
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_sequence_within_bounds() {
        let mut one = Xorshift::new(7);
        let mut two = Xorshift::new(7);
        let first: Vec<usize> = (0..100).map(|_| one.below(10)).collect();
        assert_eq!(first, (0..100).map(|_| two.below(10)).collect::<Vec<_>>());
        assert!(first.iter().all(|n| *n < 10));
        assert_ne!(Xorshift::new(0).next_u64(), 0);
    }
}
