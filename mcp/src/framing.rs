//! JSON-RPC framing of the stdio transport: bytes → lines → messages, and
//! the answer owed to every line that is not a message rmcp can serve.
//!
//! rmcp's own line transport drops an over-long line, malformed JSON, text
//! that is not UTF-8 and JSON nested past serde_json's recursion limit
//! without a word, so the client waits forever; and a standard request whose
//! `params` do not fit its schema falls through to rmcp's custom-request
//! branch and is answered "method not found". This layer sits in front of
//! it (see [`crate::transport`]) and decides for each line:
//!
//! - a message rmcp serves ([`Decoded::Message`]);
//! - an error answer of ours ([`Decoded::Answer`]): `-32700` (parse error:
//!   not UTF-8, not JSON), `-32600` (invalid request: over [`MAX_LINE`]
//!   bytes, nested over [`MAX_DEPTH`] levels, not a JSON-RPC 2.0 object) or
//!   `-32602` (invalid params of a standard method), with the request's id
//!   when it can be read, else `null` (JSON-RPC 2.0 §5.1);
//! - nothing owed ([`Decoded::Quiet`]): a blank line, a notification rmcp
//!   cannot read, or a response (never answered, so two peers cannot answer
//!   each other's errors forever).
//!
//! Owns: the line bound (an over-long line is discarded up to its newline,
//! never buffered whole), the depth bound, and those error answers.
//! Must never: do I/O, panic on any input, or buffer more than
//! [`MAX_LINE`] bytes of one line.

use std::collections::VecDeque;

use rmcp::RoleServer;
use rmcp::model::{CallToolRequestParams, ClientRequest, JsonRpcMessage};
use rmcp::service::RxJsonRpcMessage;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest line read (one message), in bytes without its newline; the same
/// bound rmcp puts on a line.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// Deepest nesting of arrays and objects in one message: a spec sent as an
/// object may nest 64 levels (the YAML loader's bound) under the 3 levels of
/// the request around it; serde_json itself stops at 128.
pub const MAX_DEPTH: usize = 100;

/// The request methods of MCP that rmcp reads into a typed request (a
/// request for one of them that rmcp cannot read had bad `params`).
const STANDARD_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "resources/directory/read",
    "subscriptions/listen",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
];

/// A JSON-RPC error code this layer answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// `-32700`: the line is not JSON text (or not UTF-8).
    Parse,
    /// `-32600`: JSON, but not a message this server can take.
    InvalidRequest,
    /// `-32602`: a standard method whose `params` do not fit its schema.
    InvalidParams,
}

impl Code {
    /// The JSON-RPC number.
    pub fn number(self) -> i32 {
        match self {
            Code::Parse => -32700,
            Code::InvalidRequest => -32600,
            Code::InvalidParams => -32602,
        }
    }
}

/// A request id as JSON-RPC allows it (a string or an integer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Id {
    /// An integer id.
    Number(i64),
    /// A string id.
    Text(String),
}

impl Id {
    fn of(v: Option<&Value>) -> Option<Id> {
        v.and_then(|v| Id::deserialize(v).ok())
    }
}

/// An error answer of this layer: `{"jsonrpc":"2.0","id":…,"error":{code,message}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    jsonrpc: &'static str,
    /// The id of the request, `null` when it cannot be read.
    pub id: Option<Id>,
    /// The error.
    pub error: ErrorBody,
}

/// The `error` member of an [`Answer`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorBody {
    /// The JSON-RPC number of [`ErrorBody::kind`].
    pub code: i32,
    /// What is wrong and how to send it instead.
    pub message: String,
    /// The code as a type (not sent).
    #[serde(skip)]
    pub kind: Code,
}

impl Answer {
    fn new(kind: Code, id: Option<Id>, message: String) -> Answer {
        Answer {
            jsonrpc: "2.0",
            id,
            error: ErrorBody {
                code: kind.number(),
                message,
                kind,
            },
        }
    }

    /// The answer as one line of JSON, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        // Invariant: an answer is strings and integers only; it always serializes.
        let mut line = serde_json::to_vec(self).expect("invariant: an answer always serializes");
        line.push(b'\n');
        line
    }
}

/// Why a line is owed no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quiet {
    /// Empty or only whitespace.
    Blank,
    /// A notification rmcp cannot read (notifications are never answered).
    Notification,
    /// A response rmcp cannot read (responses are never answered).
    Response,
}

/// What one complete line is.
#[derive(Debug)]
pub enum Decoded {
    /// A message for rmcp to serve.
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// An error answer to send back.
    Answer(Answer),
    /// Nothing to do.
    Quiet(Quiet),
}

/// Splits a byte stream into lines and decodes each complete one.
#[derive(Debug, Default)]
pub struct Framer {
    line: Vec<u8>,
    /// Bytes of the current line dropped so far, while it is over [`MAX_LINE`].
    dropped: Option<usize>,
}

impl Framer {
    /// A framer at the start of a stream.
    pub fn new() -> Framer {
        Framer::default()
    }

    /// Feeds the next bytes of the stream; one [`Decoded`] per line that
    /// they complete is pushed on `out`, in order.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut VecDeque<Decoded>) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (piece, rest) = match newline {
                Some(i) => (&bytes[..i], &bytes[i + 1..]),
                None => (bytes, &[][..]),
            };
            match &mut self.dropped {
                Some(n) => *n = n.saturating_add(piece.len()),
                None if self.line.len() + piece.len() > MAX_LINE => {
                    self.dropped = Some(self.line.len() + piece.len());
                    self.line = Vec::new();
                }
                None => self.line.extend_from_slice(piece),
            }
            if newline.is_some() {
                out.push_back(match self.dropped.take() {
                    Some(n) => oversized(n),
                    None => decode_line(&self.line),
                });
                self.line.clear();
                if self.line.capacity() > 1024 * 1024 {
                    self.line = Vec::new();
                }
            }
            bytes = rest;
        }
    }

    /// Bytes of an unfinished line held (0 while one is being discarded).
    pub fn buffered(&self) -> usize {
        self.line.len()
    }
}

fn oversized(n: usize) -> Decoded {
    Decoded::Answer(Answer::new(
        Code::InvalidRequest,
        None,
        format!(
            "message of {n} bytes refused: one line may hold at most {MAX_LINE} bytes (16 MiB); \
             send a smaller spec or input"
        ),
    ))
}

/// Decodes one line (without its newline).
pub fn decode_line(line: &[u8]) -> Decoded {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Decoded::Quiet(Quiet::Blank);
    }
    let text = match std::str::from_utf8(line) {
        Ok(t) => t,
        Err(e) => {
            return Decoded::Answer(Answer::new(
                Code::Parse,
                None,
                format!(
                    "parse error: the message is not UTF-8 (invalid byte at offset {}); \
                     send JSON text in UTF-8, one message per line",
                    e.valid_up_to()
                ),
            ));
        }
    };
    let shape = scan(text);
    if shape.depth > MAX_DEPTH {
        return Decoded::Answer(Answer::new(
            Code::InvalidRequest,
            shape.id,
            format!(
                "message refused: it nests arrays and objects {} levels deep, at most {MAX_DEPTH} \
                 are read",
                shape.depth
            ),
        ));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v) => classify(&v),
        Err(e) => Decoded::Answer(Answer::new(
            Code::Parse,
            None,
            format!("parse error: the message is not JSON ({e}); send one JSON object per line"),
        )),
    }
}

/// Reads a parsed JSON value as a JSON-RPC message.
fn classify(value: &Value) -> Decoded {
    let Value::Object(map) = value else {
        let what = if value.is_array() {
            "a batch (an array); MCP takes one JSON-RPC object per line"
        } else {
            "not a JSON object; send one JSON-RPC object per line"
        };
        return Decoded::Answer(Answer::new(
            Code::InvalidRequest,
            None,
            format!("invalid request: the message is {what}"),
        ));
    };
    let id = Id::of(map.get("id"));
    if map.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Decoded::Answer(Answer::new(
            Code::InvalidRequest,
            id,
            "invalid request: `jsonrpc` must be \"2.0\"".into(),
        ));
    }
    let Some(method) = map.get("method").and_then(Value::as_str) else {
        return match RxJsonRpcMessage::<RoleServer>::deserialize(value) {
            Ok(m) if !map.contains_key("method") => Decoded::Message(Box::new(m)),
            _ if map.contains_key("result") || map.contains_key("error") => {
                Decoded::Quiet(Quiet::Response)
            }
            _ => Decoded::Answer(Answer::new(
                Code::InvalidRequest,
                id,
                "invalid request: a message needs a string `method` (a request or notification) \
                 or `result`/`error` (a response)"
                    .into(),
            )),
        };
    };
    let standard = STANDARD_METHODS.contains(&method);
    match RxJsonRpcMessage::<RoleServer>::deserialize(value) {
        Ok(JsonRpcMessage::Request(r))
            if standard && matches!(r.request, ClientRequest::CustomRequest(_)) =>
        {
            Decoded::Answer(bad_params(method, map.get("params"), Some(r.id.into())))
        }
        Ok(m) => Decoded::Message(Box::new(m)),
        Err(_) if map.contains_key("id") && standard => {
            Decoded::Answer(bad_params(method, map.get("params"), id))
        }
        Err(e) if map.contains_key("id") => Decoded::Answer(Answer::new(
            Code::InvalidRequest,
            id,
            format!("invalid request `{method}`: {e}"),
        )),
        Err(_) if method.starts_with("notifications/") => Decoded::Quiet(Quiet::Notification),
        Err(e) => Decoded::Answer(Answer::new(
            Code::InvalidRequest,
            None,
            format!("invalid request `{method}` (a request needs an `id`): {e}"),
        )),
    }
}

impl From<rmcp::model::RequestId> for Id {
    fn from(id: rmcp::model::RequestId) -> Id {
        match id {
            rmcp::model::NumberOrString::Number(n) => Id::Number(n),
            rmcp::model::NumberOrString::String(s) => Id::Text(s.to_string()),
        }
    }
}

/// `-32602` for a standard method whose `params` do not fit.
fn bad_params(method: &str, params: Option<&Value>, id: Option<Id>) -> Answer {
    let why = match (method, params) {
        ("tools/call", Some(p)) => match CallToolRequestParams::deserialize(p) {
            Err(e) => format!(": {e}"),
            Ok(_) => String::new(),
        },
        ("tools/call", None) => ": `params` is missing".into(),
        _ => String::new(),
    };
    let shape = if method == "tools/call" {
        "; send {\"name\": \"<tool>\", \"arguments\": {…}} (arguments an object)"
    } else {
        "; see the MCP schema for its params"
    };
    Answer::new(
        Code::InvalidParams,
        id,
        format!("invalid params of `{method}`{why}{shape}"),
    )
}

/// What a byte scan finds in a line before it is parsed.
struct Shape {
    /// The deepest nesting of `[`/`{` outside strings.
    depth: usize,
    /// The top-level `"id"`, when the line is an object that has a readable one.
    id: Option<Id>,
}

/// One pass over the text, no recursion: nesting depth, and the span of the
/// value of a top-level `"id"` key (so an over-deep request is still
/// answered with its id).
fn scan(text: &str) -> Shape {
    let bytes = text.as_bytes();
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    let mut string_start = 0;
    let mut last_key: Option<(usize, usize)> = None;
    let mut id_start: Option<usize> = None;
    let mut id_span: Option<(usize, usize)> = None;
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => {
                    in_string = false;
                    if depth == 1 {
                        last_key = Some((string_start, i));
                    }
                }
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                string_start = i + 1;
            }
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' | b',' if depth == 1 => {
                if let Some(s) = id_start.take() {
                    id_span.get_or_insert((s, i));
                }
                if b != b',' {
                    depth -= 1;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b':' if depth == 1 && last_key.take().is_some_and(|(s, e)| &bytes[s..e] == b"id") => {
                id_start = Some(i + 1);
            }
            _ => {}
        }
    }
    let id = id_span
        .and_then(|(s, e)| text.get(s..e))
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .and_then(|v| Id::of(Some(&v)));
    Shape { depth: deepest, id }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &[u8]) -> Decoded {
        decode_line(line)
    }

    fn answer(d: Decoded) -> Answer {
        match d {
            Decoded::Answer(a) => a,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    #[test]
    fn malformed_json_and_invalid_utf8_are_parse_errors_with_a_null_id() {
        let a = answer(one(b"{bad"));
        assert_eq!((a.error.code, &a.id), (-32700, &None));
        assert!(a.error.message.contains("not JSON"), "{}", a.error.message);
        let a = answer(one(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}"));
        assert_eq!((a.error.code, &a.id), (-32700, &None));
        assert!(a.error.message.contains("offset 34"), "{}", a.error.message);
        let line = String::from_utf8(a.to_line()).unwrap();
        assert!(line.starts_with(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"#));
        assert!(line.ends_with("}\n"));
    }

    #[test]
    fn deep_nesting_is_refused_with_the_id_when_it_can_be_read() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"ping","params":{{"a":{}{}}}}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        let a = answer(one(deep.as_bytes()));
        assert_eq!((a.error.code, &a.id), (-32600, &Some(Id::Number(7))));
        assert!(
            a.error.message.contains("10002 levels"),
            "{}",
            a.error.message
        );
        // the id after the deep part is found too; unbalanced text is still bounded
        let after = format!(
            r#"{{"x":{},"id":"r1"}}"#,
            "[".repeat(200) + &"]".repeat(200)
        );
        assert_eq!(
            answer(one(after.as_bytes())).id,
            Some(Id::Text("r1".into()))
        );
        assert_eq!(answer(one("[".repeat(300).as_bytes())).error.code, -32600);
        // 100 levels is within the bound (and within serde_json's)
        let ok = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"_meta":{{"a":{}{}}}}}}}"#,
            "[".repeat(96),
            "]".repeat(96)
        );
        assert!(matches!(one(ok.as_bytes()), Decoded::Message(_)));
    }

    #[test]
    fn bad_params_of_a_standard_method_are_invalid_params_not_method_not_found() {
        let a = answer(one(
            br#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"stratum_validate","arguments":"x"}}"#,
        ));
        assert_eq!((a.error.code, &a.id), (-32602, &Some(Id::Number(6))));
        assert!(
            a.error.message.contains("tools/call"),
            "{}",
            a.error.message
        );
        let a = answer(one(
            br#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":5}}"#,
        ));
        assert_eq!((a.error.code, &a.id), (-32602, &Some(Id::Text("s".into()))));
        let a = answer(one(
            br#"{"jsonrpc":"2.0","id":9,"method":"ping","params":5}"#,
        ));
        assert_eq!((a.error.code, &a.id), (-32602, &Some(Id::Number(9))));
        // an unknown method is rmcp's to answer (-32601)
        assert!(matches!(
            one(br#"{"jsonrpc":"2.0","id":8,"method":"nosuch"}"#),
            Decoded::Message(_)
        ));
    }

    #[test]
    fn shapes_that_are_not_messages() {
        assert_eq!(answer(one(b"[1,2]")).error.code, -32600);
        assert_eq!(answer(one(b"5")).error.code, -32600);
        let a = answer(one(br#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#));
        assert_eq!((a.error.code, a.id), (-32600, Some(Id::Number(3))));
        assert_eq!(
            answer(one(br#"{"jsonrpc":"2.0","id":3}"#)).error.code,
            -32600
        );
        // responses (even our own errors echoed back) and notifications are
        // never answered; blank lines are skipped
        for response in [
            &br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#[..],
            br#"{"jsonrpc":"2.0","error":{"code":"x"}}"#,
            br#"{"jsonrpc":"2.0","id":{},"result":1}"#,
        ] {
            assert!(!matches!(one(response), Decoded::Answer(_)));
        }
        assert!(matches!(
            one(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":5}"#),
            Decoded::Quiet(Quiet::Notification)
        ));
        assert!(matches!(one(b"  \r"), Decoded::Quiet(Quiet::Blank)));
        assert!(matches!(
            one(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r"),
            Decoded::Message(_)
        ));
    }

    #[test]
    fn an_over_long_line_is_discarded_to_its_newline_then_reading_goes_on() {
        let mut f = Framer::new();
        let mut out = VecDeque::new();
        let chunk = vec![b'x'; 1024 * 1024];
        for _ in 0..17 {
            f.feed(&chunk, &mut out);
            assert!(f.buffered() <= MAX_LINE);
        }
        assert!(out.is_empty(), "nothing is answered before the line ends");
        assert_eq!(f.buffered(), 0, "the dropped line is not kept");
        f.feed(
            b"tail\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n",
            &mut out,
        );
        assert_eq!(out.len(), 2);
        let a = answer(out.pop_front().unwrap());
        assert_eq!(a.error.code, -32600);
        assert!(
            a.error.message.contains("17825796 bytes"),
            "{}",
            a.error.message
        );
        assert!(matches!(out.pop_front(), Some(Decoded::Message(_))));
        // a line of exactly MAX_LINE bytes is read (and is not JSON)
        f.feed(&vec![b' '; MAX_LINE - 1], &mut out);
        f.feed(b"x\n", &mut out);
        assert_eq!(answer(out.pop_front().unwrap()).error.code, -32700);
    }

    #[test]
    fn lines_split_anywhere_decode_the_same() {
        let text = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n{bad\n\n";
        for cut in 0..text.len() {
            let mut f = Framer::new();
            let mut out = VecDeque::new();
            f.feed(&text[..cut], &mut out);
            f.feed(&text[cut..], &mut out);
            assert_eq!(out.len(), 3, "cut at {cut}");
            assert!(matches!(out[0], Decoded::Message(_)));
            assert!(matches!(out[1], Decoded::Answer(_)));
            assert!(matches!(out[2], Decoded::Quiet(Quiet::Blank)));
        }
    }
}
