//! Attempt labels and move ids: unique per claim and per move, across the processes of
//! one fleet, and made of their parts alone (so a test names them).

use std::sync::atomic::{AtomicU32, Ordering};

use crate::clock::Timestamp;
use crate::placement::AttemptId;

/// This process's attempts and moves so far, so that two at one instant differ.
static SEQ: AtomicU32 = AtomicU32::new(0);

fn next() -> u32 {
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// A new attempt id: `now`, this process, the next number.
pub fn new_attempt(now: Timestamp) -> AttemptId {
    AttemptId::new(now.0, std::process::id(), next())
}

/// A move id made of `millis` (when), `pid` (who) and `seq` (which of the sender's):
/// `mv-MILLIS-PID-SEQ`, in hex, valid in an HTTP header.
pub fn move_id(millis: u64, pid: u32, seq: u32) -> String {
    format!("mv-{millis:x}-{pid:x}-{seq:x}")
}

/// A new move id: `now`, this process, the next number.
pub fn new_move_id(now: Timestamp) -> String {
    move_id(now.0, std::process::id(), next())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_made_of_their_parts_and_two_new_ones_differ() {
        assert_eq!(move_id(0x1a2b, 0x10, 3), "mv-1a2b-10-3");
        assert!(crate::wire::move_actor("operator", Some(&move_id(u64::MAX, u32::MAX, 9))).is_ok());
        let now = Timestamp(1_700_000_000_000);
        assert_ne!(new_move_id(now), new_move_id(now));
        assert_ne!(new_attempt(now), new_attempt(now));
        assert!(new_attempt(now).as_str().starts_with("18bcfe56800-"));
    }
}
