//! Where `gpuboard serve` and `gpuboard record` keep what must outlive the process, in
//! `SQLite`: the claim store (`claims`: the scheduler's journal and state, written by one
//! writer thread), the idempotency keys of claims (`idempotency`, in the claim store's
//! database) and the history (`history`: chunks of recorded snapshots, rolled up for
//! reports; with the periods recording was stopped, `gaps`, and the flags' episodes, `flag_episodes`). The engine, `gpuboard record`, `doctor` and the API all go through here;
//! nothing above opens these databases itself.

pub mod claims;
mod flag_episodes;
mod gaps;
pub mod history;
pub mod idempotency;

pub use gaps::RecordingGap;
