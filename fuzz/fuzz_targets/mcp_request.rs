//! `stratumc mcp`'s request decoder: arbitrary bytes, fed in two chunks cut
//! where the first byte says, through the JSON-lines framing
//! (`stratum_mcp::framing`) and, for every `tools/call` it passes on, the
//! argument validation of the named tool (`stratum_mcp::args`).
//!
//! What must hold: nothing panics; every complete line gets exactly one
//! outcome, in order; a line that is a request (an `id` and a `method`) is
//! either passed on or answered with a JSON-RPC error carrying a standard
//! code; every error answer is one line of JSON-RPC 2.0; nothing is owed for
//! a trailing unfinished line.

#![no_main]

use std::collections::VecDeque;

use libfuzzer_sys::fuzz_target;
use rmcp::model::{ClientRequest, JsonRpcMessage};
use serde_json::Value;
use stratum_mcp::framing::{Decoded, Framer};
use stratum_mcp::{args, tools};

fuzz_target!(|data: &[u8]| {
    let Some((&cut, bytes)) = data.split_first() else {
        return;
    };
    let cut = usize::from(cut).min(bytes.len());
    let mut framer = Framer::new();
    let mut out = VecDeque::new();
    framer.feed(&bytes[..cut], &mut out);
    framer.feed(&bytes[cut..], &mut out);
    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    assert_eq!(out.len(), lines, "one outcome per complete line");
    for d in out {
        match d {
            Decoded::Answer(a) => {
                let line = a.to_line();
                assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
                let v: Value = serde_json::from_slice(&line).expect("an answer is JSON");
                assert_eq!(v["jsonrpc"], "2.0");
                assert!(matches!(v["error"]["code"].as_i64(), Some(-32700 | -32600 | -32602)));
                assert!(v.get("id").is_some(), "the id is sent, null when unknown");
            }
            Decoded::Message(m) => {
                if let JsonRpcMessage::Request(r) = *m
                    && let ClientRequest::CallToolRequest(call) = r.request
                    && let Some(fields) = tools::fields_of(&call.params.name)
                {
                    let raw = call.params.arguments.unwrap_or_default();
                    let _ = args::parse(&call.params.name, fields, &raw);
                }
            }
            Decoded::Quiet(_) => {}
        }
    }
});
