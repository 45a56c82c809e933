//! `gpuboard simulate --backtest`: the forecast backtest over a scenario file, or over the
//! claims a serve recorded in its history (`--history DIR`).

use anyhow::Context as _;

use crate::forecast::backtest::{Backtest, backtest, backtest_recorded, render};
use crate::simulate::{SimulateArgs, read_scenario};
use crate::store::history::{HistoryError, HistoryStore};

/// Runs the backtest `args` ask for; returns the exit status.
pub fn run(args: &SimulateArgs) -> anyhow::Result<i32> {
    let b = if let Some(dir) = &args.history {
        recorded(dir, args.evaluate_until)?
    } else {
        let (mut scenario, path) = read_scenario(args)?;
        if args.evaluate_until.is_some() {
            scenario.evaluate_until_s = args.evaluate_until;
        }
        backtest(&scenario).with_context(|| format!("backtesting scenario {path}"))?
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&b)?);
    } else {
        print!("{}", render(&b));
    }
    Ok(0)
}

/// The backtest over the whole history a serve recorded in `dir`.
fn recorded(dir: &std::path::Path, until_s: Option<u64>) -> anyhow::Result<Backtest> {
    let shown = dir.display();
    let file = dir.join(crate::store::history::HISTORY_FILE);
    anyhow::ensure!(
        file.is_file(),
        "no history in {shown}: give the data directory of a `gpuboard serve` that recorded one \
         (it holds {})",
        crate::store::history::HISTORY_FILE
    );
    let store = HistoryStore::open_reader(dir)
        .with_context(|| format!("opening the history in {shown}"))?;
    let read = || -> Result<_, HistoryError> {
        let Some(from) = store.from()? else {
            return Ok(None);
        };
        // Every version after the first: SQLite's integers end at i64::MAX.
        store.window(from, crate::clock::Timestamp(i64::MAX.unsigned_abs()))
    };
    let (start, records) = read()
        .with_context(|| format!("reading the history in {shown}"))?
        .with_context(|| format!("the history in {shown} is empty: nothing was recorded"))?;
    backtest_recorded(&start, &records, until_s)
        .with_context(|| format!("backtesting the history in {shown}"))
}
