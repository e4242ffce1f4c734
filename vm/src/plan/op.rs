//! The expression instruction set: one table of opcodes, their operands and
//! stack effects drives the encoder, the decoder, the verifier and the
//! disassembler.
//!
//! Owns: opcode numbering (part of the plan format: never renumber; add new
//! opcodes at the end and bump the format version), operand shapes, stack
//! effects, and the builtin function table.
//! Must never: execute instructions.

/// The shape of one operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operand {
    /// One byte.
    U8,
    /// Two bytes, little-endian.
    U16,
    /// Four bytes, little-endian.
    U32,
}

impl Operand {
    /// Encoded width in bytes.
    pub fn width(self) -> usize {
        match self {
            Operand::U8 => 1,
            Operand::U16 => 2,
            Operand::U32 => 4,
        }
    }
}

macro_rules! ops {
    ($( $(#[$doc:meta])* $name:ident = $byte:literal, [$($operand:ident),*], $effect:expr; )*) => {
        /// An opcode.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        pub enum Op { $( $(#[$doc])* $name = $byte, )* }

        impl Op {
            /// Every opcode.
            pub const ALL: &'static [Op] = &[ $( Op::$name, )* ];

            /// Decodes an opcode byte (checked: plans come from disk).
            pub fn from_byte(b: u8) -> Option<Op> {
                match b { $( $byte => Some(Op::$name), )* _ => None }
            }

            /// The operand shapes that follow the opcode byte.
            pub fn operands(self) -> &'static [Operand] {
                match self { $( Op::$name => &[$(Operand::$operand),*], )* }
            }

            /// Mnemonic for listings.
            pub fn name(self) -> &'static str {
                match self { $( Op::$name => stringify!($name), )* }
            }

            /// Stack effect `(pops, pushes)`; `None` for `Call`, whose pops depend on its operand.
            pub fn effect(self) -> Option<(u32, u32)> {
                match self { $( Op::$name => $effect, )* }
            }
        }
    };
}

ops! {
    /// End of the chunk: the single value on the stack is the result.
    Return = 0x00, [], Some((1, 0));
    /// Push the `result` binding.
    LoadResult = 0x01, [], Some((0, 1));
    /// Push the `input` binding.
    LoadInput = 0x02, [], Some((0, 1));
    /// Push the `item` binding.
    LoadItem = 0x03, [], Some((0, 1));
    /// Push the `prev` binding.
    LoadPrev = 0x04, [], Some((0, 1));
    /// Push constant `consts[a]`.
    Const = 0x05, [U16], Some((0, 1));
    /// Replace the object on top with its field `strings[a]` (missing field: type error).
    Field = 0x06, [U32], Some((1, 1));
    /// Replace the list on top with its element `a` (out of range: type error).
    Index = 0x07, [U32], Some((1, 1));
    /// Boolean not (operand must be a boolean).
    Not = 0x08, [], Some((1, 1));
    /// Numeric negation.
    Neg = 0x09, [], Some((1, 1));
    /// `+` on two numbers or two strings.
    Add = 0x0a, [], Some((2, 1));
    /// `-`.
    Sub = 0x0b, [], Some((2, 1));
    /// `*`.
    Mul = 0x0c, [], Some((2, 1));
    /// `/` (division by zero: type error).
    Div = 0x0d, [], Some((2, 1));
    /// Structural equality.
    Eq = 0x0e, [], Some((2, 1));
    /// Structural inequality.
    Ne = 0x0f, [], Some((2, 1));
    /// `<` on two numbers or two strings.
    Lt = 0x10, [], Some((2, 1));
    /// `<=`.
    Le = 0x11, [], Some((2, 1));
    /// `>`.
    Gt = 0x12, [], Some((2, 1));
    /// `>=`.
    Ge = 0x13, [], Some((2, 1));
    /// `a in b` (list element, substring, own key).
    In = 0x14, [], Some((2, 1));
    /// `&&`: top must be a boolean; if false jump forward by `a` keeping it, else pop it.
    AndJump = 0x15, [U16], Some((1, 0));
    /// `||`: top must be a boolean; if true jump forward by `a` keeping it, else pop it.
    OrJump = 0x16, [U16], Some((1, 0));
    /// Top must be a boolean (the right side of `&&`/`||`).
    CheckBool = 0x17, [], Some((1, 1));
    /// Call builtin `a` with `b` arguments from the stack.
    Call = 0x18, [U8, U8], None;
    /// Push the `steps` binding (X1: step id → `{status, output, failure, attempts}`).
    LoadSteps = 0x19, [], Some((0, 1));
    /// Start of a lambda form (X3): pop the list, run the body that follows
    /// once per element; `a` is the builtin (one of [`LAMBDA_FORMS`]), `b` the
    /// distance from the end of this instruction to just past its `EachEnd`,
    /// where an empty list (or a decided `all`/`any`) jumps with the result.
    Each = 0x1a, [U8, U16], Some((1, 0));
    /// End of a lambda body: pop the body's value, fold it into the form's
    /// result; jump back to the body for the next element, or push the result.
    EachEnd = 0x1b, [], Some((1, 1));
    /// Push the element a lambda parameter is bound to: `a` counts lambdas
    /// outwards from the innermost one (0).
    Param = 0x1c, [U8], Some((0, 1));
}

/// The arity of a builtin that takes one or more arguments (`coalesce`).
pub const VARIADIC: u8 = u8::MAX;

/// The builtins that take a lambda as their last argument (X3): `all` and
/// `any` may (without one they keep their v1 meaning), `count`, `filter`
/// and `map` must. Their arity in [`BUILTINS`] is that of the lambda form
/// for `count`, `filter` and `map`, which `Call` never runs.
pub const LAMBDA_FORMS: &[&str] = &["all", "any", "count", "filter", "map"];

/// Whether builtin `name` runs only as a lambda form (`Each`), never through `Call`.
pub fn lambda_only(name: &str) -> bool {
    matches!(name, "count" | "filter" | "map")
}

/// Whether a builtin of arity `arity` accepts `argc` arguments.
pub fn arity_accepts(arity: u8, argc: usize) -> bool {
    if arity == VARIADIC {
        argc >= 1
    } else {
        argc == usize::from(arity)
    }
}

/// One line about each builtin (its signature and meaning), for hover and
/// completion; in the order of [`BUILTINS`].
pub const BUILTIN_DOCS: &[&str] = &[
    "len(x) -> number: characters of a string, elements of a list, keys of an object",
    "any(xs) -> boolean: some element is truthy; any(xs, p -> cond): some element satisfies cond",
    "all(xs) -> boolean: every element is truthy; all(xs, p -> cond): every element satisfies cond",
    "max(xs) -> number|string: the largest of a list of numbers or of strings",
    "min(xs) -> number|string: the smallest of a list of numbers or of strings",
    "str(x) -> string: the value as text",
    "int(x) -> number: a boolean, number or whole-number string as an integer",
    "bool(x) -> boolean: truthiness",
    "matches(s, pattern) -> boolean: the (safe-shape) regular expression matches somewhere in s",
    "file_exists(path) -> boolean: a regular file exists at the workspace path",
    "file_contains(path, text) -> boolean: the workspace file contains the text",
    "unique(xs) -> list: the elements without repeats, first occurrence kept",
    "keys(o) -> list of strings: the object's keys, sorted",
    "coalesce(a, b, ...) -> the first argument that is not null (null if all are)",
    "digest(v) -> string: sha256 hex of the canonical JSON of v",
    "file(path) -> {exists, size, text, json, sha256}: the workspace file, read lazily",
    "glob(pattern) -> list of strings: sorted workspace paths of regular files matching the pattern",
    "count(xs, p -> cond) -> number: how many elements satisfy cond",
    "filter(xs, p -> cond) -> list: the elements that satisfy cond, in order",
    "map(xs, p -> value) -> list: the value of the body for each element",
    "receipts() -> list of objects: this attempt's `exec` receipts so far ({command, argv, exit, ms, stdout_sha256, tail, timed_out, truncated}); ensure only",
    "changes() -> list of {path, status, bytes}: the files this dispatch changed since its snapshot (status added, modified or deleted; only in the ensure of a step with `scope`)",
];

/// The builtin functions, by index: name and arity ([`VARIADIC`]: one or
/// more). Append only: the index is part of the plan format.
pub const BUILTINS: &[(&str, u8)] = &[
    ("len", 1),
    ("any", 1),
    ("all", 1),
    ("max", 1),
    ("min", 1),
    ("str", 1),
    ("int", 1),
    ("bool", 1),
    ("matches", 2),
    ("file_exists", 1),
    ("file_contains", 2),
    ("unique", 1),
    ("keys", 1),
    ("coalesce", VARIADIC),
    ("digest", 1),
    ("file", 1),
    ("glob", 1),
    ("count", 2),
    ("filter", 2),
    ("map", 2),
    ("receipts", 0),
    ("changes", 0),
];

/// The index of a builtin by name.
pub fn builtin(name: &str) -> Option<u8> {
    BUILTINS
        .iter()
        .position(|(n, _)| *n == name)
        .map(|i| i as u8)
}

/// One decoded instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instr {
    /// Offset of the opcode byte.
    pub pc: usize,
    /// The opcode.
    pub op: Op,
    /// Operands (unused slots are 0).
    pub args: [u32; 2],
    /// Encoded length.
    pub len: usize,
}

/// Appends an instruction to `code`.
pub fn encode(code: &mut Vec<u8>, op: Op, args: &[u32]) {
    code.push(op as u8);
    for (shape, &value) in op.operands().iter().zip(args) {
        let bytes = value.to_le_bytes();
        code.extend_from_slice(&bytes[..shape.width()]);
    }
}

/// Why bytes could not be decoded as an instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// An opcode byte that is not in the table.
    UnknownOpcode {
        /// Offset.
        pc: usize,
        /// The byte.
        byte: u8,
    },
    /// Operands run past the end of the code.
    Truncated {
        /// Offset.
        pc: usize,
    },
}

/// Decodes the instruction at `pc`.
pub fn decode(code: &[u8], pc: usize) -> Result<Instr, DecodeError> {
    let byte = *code.get(pc).ok_or(DecodeError::Truncated { pc })?;
    let op = Op::from_byte(byte).ok_or(DecodeError::UnknownOpcode { pc, byte })?;
    let mut args = [0u32; 2];
    let mut at = pc + 1;
    for (i, shape) in op.operands().iter().enumerate() {
        let w = shape.width();
        let bytes = code.get(at..at + w).ok_or(DecodeError::Truncated { pc })?;
        let mut buf = [0u8; 4];
        buf[..w].copy_from_slice(bytes);
        args[i] = u32::from_le_bytes(buf);
        at += w;
    }
    Ok(Instr {
        pc,
        op,
        args,
        len: at - pc,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_tables_agree() {
        assert_eq!(BUILTINS.len(), BUILTIN_DOCS.len());
        for ((name, _), doc) in BUILTINS.iter().zip(BUILTIN_DOCS) {
            assert!(doc.starts_with(&format!("{name}(")), "{doc}");
        }
        for name in LAMBDA_FORMS {
            assert!(builtin(name).is_some(), "{name}");
        }
        assert!(arity_accepts(VARIADIC, 3) && !arity_accepts(VARIADIC, 0));
        assert!(arity_accepts(1, 1) && !arity_accepts(1, 2));
    }

    #[test]
    fn every_opcode_round_trips() {
        for &op in Op::ALL {
            let mut code = Vec::new();
            let args: Vec<u32> = op
                .operands()
                .iter()
                .map(|s| if *s == Operand::U8 { 7 } else { 300 })
                .collect();
            encode(&mut code, op, &args);
            let i = decode(&code, 0).unwrap();
            assert_eq!(i.op, op);
            assert_eq!(i.len, code.len());
            assert_eq!(&i.args[..args.len()], &args[..]);
            assert_eq!(Op::from_byte(op as u8), Some(op));
        }
        assert!(matches!(
            decode(&[0xff], 0),
            Err(DecodeError::UnknownOpcode { .. })
        ));
        assert!(matches!(
            decode(&[Op::Const as u8, 1], 0),
            Err(DecodeError::Truncated { .. })
        ));
    }
}
