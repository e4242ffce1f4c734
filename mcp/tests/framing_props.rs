//! The property of the `mcp_request` fuzz target (fuzz/fuzz_targets/), as a
//! proptest that runs with every `cargo test`: arbitrary bytes, cut into
//! arbitrary chunks, through the framing and the argument validation; no
//! panic, and exactly one outcome per complete line, in order, whatever the
//! chunking.

use std::collections::VecDeque;

use proptest::prelude::*;
use rmcp::model::{ClientRequest, JsonRpcMessage};
use serde_json::Value;
use stratum_mcp::framing::{Decoded, Framer};
use stratum_mcp::{args, tools};

/// What a line came to, comparable across chunkings.
#[derive(Debug, PartialEq)]
enum Seen {
    Answer(Value),
    Message,
    Quiet,
}

fn run(chunks: &[&[u8]]) -> Vec<Seen> {
    let mut framer = Framer::new();
    let mut out = VecDeque::new();
    for c in chunks {
        framer.feed(c, &mut out);
    }
    out.into_iter()
        .map(|d| match d {
            Decoded::Answer(a) => {
                let v: Value = serde_json::from_slice(&a.to_line()).expect("an answer is JSON");
                assert_eq!(v["jsonrpc"], "2.0");
                assert!(matches!(
                    v["error"]["code"].as_i64(),
                    Some(-32700 | -32600 | -32602)
                ));
                Seen::Answer(v)
            }
            Decoded::Message(m) => {
                if let JsonRpcMessage::Request(r) = *m
                    && let ClientRequest::CallToolRequest(call) = r.request
                    && let Some(fields) = tools::fields_of(&call.params.name)
                {
                    let raw = call.params.arguments.unwrap_or_default();
                    let _ = args::parse(&call.params.name, fields, &raw);
                }
                Seen::Message
            }
            Decoded::Quiet(_) => Seen::Quiet,
        })
        .collect()
}

/// Lines that look like requests, so that the cases reach past the parser.
fn line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        (0u8..4, "[a-z_]{0,16}", any::<i32>()).prop_map(|(k, name, n)| {
            let args = match k {
                0 => format!(r#"{{"runId":{n}}}"#),
                1 => format!(r#"{{"spec":"{name}","input":[{n}]}}"#),
                2 => format!("\"{name}\""),
                _ => "{}".to_string(),
            };
            format!(
                r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"stratum_{name}","arguments":{args}}}}}"#
            )
            .into_bytes()
        }),
        (1usize..300).prop_map(|d| format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"a":{}}}}}"#, "[".repeat(d)).into_bytes()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn one_outcome_per_line_whatever_the_chunking(
        lines in proptest::collection::vec(line(), 0..8),
        tail in proptest::collection::vec(any::<u8>(), 0..16),
        cuts in proptest::collection::vec(any::<usize>(), 0..4),
    ) {
        let mut bytes: Vec<u8> = Vec::new();
        for l in &lines {
            bytes.extend(l.iter().filter(|&&b| b != b'\n'));
            bytes.push(b'\n');
        }
        bytes.extend(tail.iter().filter(|&&b| b != b'\n'));
        let whole = run(&[&bytes]);
        prop_assert_eq!(whole.len(), lines.len());
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut at = 0;
        for c in cuts {
            chunks.push(&bytes[at..c]);
            at = c;
        }
        chunks.push(&bytes[at..]);
        prop_assert_eq!(run(&chunks), whole);
    }
}
