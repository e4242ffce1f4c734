//! The stdio transport handed to rmcp: reads through [`crate::framing`] and
//! writes one JSON message per line.
//!
//! Owns: the read loop (bounded chunks into the framer), sending this
//! layer's error answers, and serializing every write (rmcp's messages and
//! our answers share one writer, one whole line at a time).
//! Must never: decide what a line means (the framer does), or lose a line
//! when rmcp drops a `receive` in progress (the framer and the queue live in
//! the transport, and a read is cancel-safe).

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::framing::{Decoded, Framer};

/// Bytes read from the client per read call.
const CHUNK: usize = 64 * 1024;

/// JSON-RPC over newline-delimited lines on a reader and a writer.
pub struct LineTransport<R, W> {
    read: R,
    chunk: Box<[u8]>,
    framer: Framer,
    ready: VecDeque<Decoded>,
    write: Arc<Mutex<W>>,
    /// Error answers being written (awaited before the transport ends).
    answers: Vec<JoinHandle<()>>,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// A transport reading `read` and writing `write`.
    pub fn new(read: R, write: W) -> LineTransport<R, W> {
        LineTransport {
            read,
            chunk: vec![0; CHUNK].into_boxed_slice(),
            framer: Framer::new(),
            ready: VecDeque::new(),
            write: Arc::new(Mutex::new(write)),
            answers: Vec::new(),
        }
    }

    /// Sends `line` on a task of its own, so that a `receive` dropped by
    /// rmcp can never leave half an answer on the wire.
    fn answer(&mut self, line: Vec<u8>) {
        self.answers.retain(|h| !h.is_finished());
        let write = self.write.clone();
        self.answers.push(tokio::spawn(async move {
            // a client that went away gets no answer; the read side sees EOF
            let _ = write_line(&write, &line).await;
        }));
    }

    /// Waits until every error answer is written.
    async fn drain(&mut self) {
        while let Some(h) = self.answers.last_mut() {
            let _ = h.await;
            self.answers.pop();
        }
    }
}

async fn write_line<W: AsyncWrite + Unpin>(write: &Mutex<W>, line: &[u8]) -> io::Result<()> {
    let mut w = write.lock().await;
    w.write_all(line).await?;
    w.flush().await
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = self.write.clone();
        let line = serde_json::to_vec(&item).map(|mut l| {
            l.push(b'\n');
            l
        });
        async move { write_line(&write, &line.map_err(io::Error::other)?).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            while let Some(d) = self.ready.pop_front() {
                match d {
                    Decoded::Message(m) => return Some(*m),
                    Decoded::Answer(a) => self.answer(a.to_line()),
                    Decoded::Quiet(_) => {}
                }
            }
            let n = match self.read.read(&mut self.chunk).await {
                Ok(0) => 0,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => 0,
            };
            if n == 0 {
                // end of input: an unfinished last line is no message
                self.drain().await;
                return None;
            }
            self.framer.feed(&self.chunk[..n], &mut self.ready);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.drain().await;
        self.write.lock().await.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_bad_lines_and_passes_good_ones_on() {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(server);
        let mut t = LineTransport::new(read, write);
        client
            .write_all(b"{bad\n\xff\n{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        let m = t.receive().await.expect("the ping is passed on");
        assert!(matches!(m, rmcp::model::JsonRpcMessage::Request(_)));
        client.shutdown().await.unwrap();
        let mut got = Vec::new();
        t.drain().await;
        t.close().await.unwrap();
        client.read_to_end(&mut got).await.unwrap();
        let text = String::from_utf8(got).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines.iter().all(|l| l.contains("\"code\":-32700")),
            "{text}"
        );
        assert!(t.receive().await.is_none(), "EOF ends the transport");
    }
}
