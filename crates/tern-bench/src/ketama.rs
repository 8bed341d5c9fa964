//! libmemcached's weighted ketama, so `tern bench` and a libmemcached client agree on where each
//! key lives: 160 points per server (all weights equal), each MD5 of `host:port-N` (`host-N` on
//! port 11211) giving 4 points, and a key goes to the first point at or after the MD5 of the key.

use md5::{Digest, Md5};

const POINTS_PER_SERVER: u32 = 160;
const POINTS_PER_DIGEST: u32 = 4;

pub struct Ketama {
    /// (point, server index), sorted by point.
    ring: Vec<(u32, usize)>,
}

fn digest_word(digest: &[u8], word: usize) -> u32 {
    u32::from_le_bytes(digest[word * 4..word * 4 + 4].try_into().expect("4 bytes"))
}

impl Ketama {
    /// `names` as `Target::ring_name` gives them, in the order the client added the servers.
    pub fn new(names: &[String]) -> Ketama {
        let servers = names.len() as u32;
        // libmemcached computes the share in single precision: do the same so a rounding down
        // (say 39.99 digests) happens here exactly when it happens there.
        let pct = 1.0f32 / servers as f32;
        let share = pct * POINTS_PER_SERVER as f32 / POINTS_PER_DIGEST as f32 * servers as f32;
        let digests = (f64::from(share) + 0.000_000_000_1).floor() as u32;
        let mut ring = Vec::with_capacity((digests * POINTS_PER_DIGEST) as usize * names.len());
        for (index, name) in names.iter().enumerate() {
            for n in 0..digests {
                let digest = Md5::digest(format!("{name}-{n}").as_bytes());
                for word in 0..POINTS_PER_DIGEST as usize {
                    ring.push((digest_word(&digest, word), index));
                }
            }
        }
        ring.sort_unstable();
        Ketama { ring }
    }

    /// The index of the server that holds `key`.
    pub fn server_for(&self, key: &[u8]) -> usize {
        let hash = digest_word(&Md5::digest(key), 0);
        let at = self.ring.partition_point(|&(point, _)| point < hash);
        self.ring.get(at).unwrap_or(&self.ring[0]).1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_server_gets_160_points_and_a_fair_share() {
        let names: Vec<String> = (0..7).map(|i| format!("10.0.0.{i}:11211")).collect();
        let ring = Ketama::new(&names);
        assert_eq!(ring.ring.len(), 7 * 160);
        let mut counts = [0u32; 7];
        for k in 0..70_000 {
            counts[ring.server_for(format!("key{k}").as_bytes())] += 1;
        }
        assert!(
            counts.iter().all(|&c| c > 5_000 && c < 15_000),
            "{counts:?}"
        );
    }
}
