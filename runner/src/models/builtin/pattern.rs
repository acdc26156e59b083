//! The pictures the demo image and video models draw: colours and a wave pattern derived from
//! the SHA-256 of the prompt, so the same prompt always gives the same picture and different
//! prompts differ visibly.

use sha2::{Digest, Sha256};

/// The drawing parameters of one prompt.
pub struct Pattern {
    from: [u8; 3],
    to: [u8; 3],
    waves: f64,
}

impl Pattern {
    /// The pattern of `prompt`.
    pub fn of(prompt: &str) -> Self {
        let h = Sha256::digest(prompt.as_bytes());
        Self { from: [h[0], h[1], h[2]], to: [h[3], h[4], h[5]], waves: 1.0 + f64::from(h[6] % 8) }
    }

    /// One RGB frame of `width` × `height` at `phase` (0.0 to 1.0, for animation).
    pub fn frame(&self, width: u32, height: u32, phase: f64) -> Vec<u8> {
        let mut rgb = Vec::with_capacity((width * height * 3) as usize);
        for y in 0..height {
            for x in 0..width {
                let u = f64::from(x) / f64::from(width.max(2) - 1);
                let v = f64::from(y) / f64::from(height.max(2) - 1);
                let wave = 0.5 + 0.5 * ((u + v + phase) * self.waves * std::f64::consts::TAU).sin();
                let t = (0.6 * u + 0.4 * wave).clamp(0.0, 1.0);
                for c in 0..3 {
                    let mixed = f64::from(self.from[c]) * (1.0 - t) + f64::from(self.to[c]) * t;
                    rgb.push(mixed.round() as u8);
                }
            }
        }
        rgb
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_prompt_draws_the_same_picture_and_another_differs() {
        assert_eq!(Pattern::of("cat").frame(8, 8, 0.0), Pattern::of("cat").frame(8, 8, 0.0));
        assert_ne!(Pattern::of("cat").frame(8, 8, 0.0), Pattern::of("dog").frame(8, 8, 0.0));
        assert_eq!(Pattern::of("cat").frame(4, 3, 0.0).len(), 4 * 3 * 3);
    }
}
