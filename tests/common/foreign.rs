//! A peer that is not a gpuboard endpoint: a listener on a free port that answers every
//! connection with one canned HTTP reply and counts the connections, so a test can show
//! what was (or was not) sent to it.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The listener's address and how many connections it has had.
pub struct Foreign {
    pub url: String,
    pub hits: Arc<AtomicUsize>,
}

impl Foreign {
    /// Answers every connection with `(status line, content type, body)`.
    pub fn start((status, ctype, body): (&str, &str, &str)) -> Foreign {
        let reply = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&hits);
        std::thread::spawn(move || {
            for sock in listener.incoming() {
                let Ok(mut sock) = sock else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = sock.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let _ = sock.read(&mut buf);
                let _ = sock.write_all(reply.as_bytes());
            }
        });
        Foreign { url, hits }
    }

    /// Connections so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}
