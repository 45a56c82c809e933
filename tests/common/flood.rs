//! A connection flood for the listener tests: clients that connect, send at most a prefix of
//! a request, and hold the connection until the endpoint closes it, then connect again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Starts `clients` flooders on `addr` (`HOST:PORT`), each sending `first` (possibly
/// nothing) on every connection; they stop when `stop` is set. `opened` counts connections.
pub fn start(
    clients: usize,
    addr: &str,
    first: &'static [u8],
    stop: &Arc<AtomicBool>,
    opened: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|_| {
            tokio::spawn(flooder(
                addr.to_string(),
                first,
                Arc::clone(stop),
                Arc::clone(opened),
            ))
        })
        .collect()
}

async fn flooder(
    addr: String,
    first: &'static [u8],
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut sock) = TcpStream::connect(&addr).await else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        opened.fetch_add(1, Ordering::Relaxed);
        if !first.is_empty() {
            let _ = sock.write_all(first).await;
        }
        let mut buf = [0u8; 512];
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let read = tokio::time::timeout(Duration::from_millis(200), sock.read(&mut buf)).await;
            if let Ok(Ok(0) | Err(_)) = read {
                break;
            }
        }
    }
}
