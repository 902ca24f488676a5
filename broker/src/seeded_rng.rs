//! A small seeded random generator (splitmix64) for fault plans and simulations: the same
//! seed gives the same sequence on every machine, so a failing run replays exactly.

/// splitmix64: small, fast and fully determined by its state.
#[derive(Debug, Clone, Default)]
pub struct SeededRng {
    state: u64,
}

impl SeededRng {
    pub fn new(seed: u64) -> SeededRng {
        SeededRng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`; 0 if `bound` is 0.
    pub fn below(&mut self, bound: u64) -> u64 {
        match bound {
            0 => 0,
            bound => self.next_u64() % bound,
        }
    }

    /// True with probability `parts_per_million` / 1,000,000.
    pub fn chance_ppm(&mut self, parts_per_million: u32) -> bool {
        self.below(1_000_000) < u64::from(parts_per_million)
    }
}
