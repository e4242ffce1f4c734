//! A minimal line-delimited JSON-RPC client for `stratumc mcp` in the
//! tests that need several calls in flight at once, or two servers on one
//! store (the official SDK's cases are in `mcp/tests/e2e.py`).
//!
//! Owns: starting the server, the handshake, sending a call and waiting for
//! the answer with its id (answers may come in any order).
//! Must never: assert on a tool's answer.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A running `stratumc mcp`.
pub struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Answers read while waiting for another id.
    early: HashMap<u64, Value>,
    next: u64,
}

impl Client {
    /// Starts `cmd` (a `stratumc mcp` command) and does the handshake.
    pub fn start(cmd: &mut Command) -> Client {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("stratumc mcp starts");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut c = Client {
            child,
            stdin,
            lines,
            early: HashMap::new(),
            next: 1,
        };
        let id = c.send(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "stratum-tests", "version": "1"}}),
        );
        c.wait(id, Duration::from_secs(20));
        c.write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        c
    }

    fn write(&mut self, msg: &Value) {
        let mut line = msg.to_string().into_bytes();
        line.push(b'\n');
        let stdin = self.stdin.as_mut().expect("the client is open");
        stdin.write_all(&line).unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request; its id.
    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next;
        self.next += 1;
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Sends `tools/call NAME ARGS`; its id.
    pub fn call_async(&mut self, name: &str, args: Value) -> u64 {
        self.send("tools/call", json!({"name": name, "arguments": args}))
    }

    /// The answer to request `id` (the whole JSON-RPC message).
    pub fn wait(&mut self, id: u64, within: Duration) -> Value {
        if let Some(v) = self.early.remove(&id) {
            return v;
        }
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer to request {id} within {within:?}"));
            let v: Value = serde_json::from_str(&line).expect("a JSON-RPC line");
            match v["id"].as_u64() {
                Some(got) if got == id => return v,
                Some(got) => {
                    self.early.insert(got, v);
                }
                None => {}
            }
        }
    }

    /// `tools/call NAME ARGS` and its structured result (with `isError`
    /// copied in as `_isError` when set).
    pub fn call(&mut self, name: &str, args: Value) -> Value {
        let id = self.call_async(name, args);
        Self::result(self.wait(id, Duration::from_secs(60)))
    }

    /// The structured result of a `tools/call` answer.
    pub fn result(answer: Value) -> Value {
        let r = &answer["result"];
        let mut v = r["structuredContent"].clone();
        if r["isError"] == true
            && let Some(m) = v.as_object_mut()
        {
            m.insert("_isError".into(), Value::Bool(true));
        }
        v
    }

    /// Closes stdin and waits for the server to end.
    pub fn close(mut self) {
        drop(self.stdin.take());
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
