//! The catalogue of diagnostic codes: one row per code, with its default
//! severity, a one-line title and the long explanation that `stratumc explain`
//! prints.
//!
//! Owns: the stable mapping from [`Code`] to `S####` strings. Codes are never
//! renumbered or reused; a retired code keeps its row.
//! Must never: decide *when* a code is emitted (that belongs to the checks).

use super::Severity;

macro_rules! codes {
    ($( $variant:ident = $code:literal, $sev:ident, $title:literal; )*) => {
        /// A stable diagnostic code (`S` + four digits, grouped by area).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code { $( $variant, )* }

        impl Code {
            /// Every code, in catalogue order.
            pub const ALL: &'static [Code] = &[ $( Code::$variant, )* ];

            /// The `S####` string of this code.
            pub fn as_str(self) -> &'static str {
                match self { $( Code::$variant => $code, )* }
            }

            /// The severity this code is reported with.
            pub fn severity(self) -> Severity {
                match self { $( Code::$variant => Severity::$sev, )* }
            }

            /// A one-line title of the rule behind the code.
            pub fn title(self) -> &'static str {
                match self { $( Code::$variant => $title, )* }
            }

            /// The long explanation (Markdown): what it means, why, an example, how to fix.
            pub fn explanation(self) -> &'static str {
                match self { $( Code::$variant => include_str!(concat!("explanations/", $code, ".md")), )* }
            }

            /// Looks a code up by its `S####` string (case-insensitive `s` accepted).
            pub fn parse(text: &str) -> Option<Code> {
                let upper = text.trim().to_ascii_uppercase();
                match upper.as_str() { $( $code => Some(Code::$variant), )* _ => None }
            }
        }
    };
}

codes! {
    // S00xx — reading the file: UTF-8, YAML syntax, YAML features we refuse.
    InvalidUtf8 = "S0001", Error, "the file is not valid UTF-8 text";
    YamlSyntax = "S0002", Error, "YAML syntax error";
    DuplicateKey = "S0003", Error, "a mapping has the same key twice";
    MultipleDocuments = "S0004", Error, "the file holds more than one YAML document";
    AliasLimit = "S0005", Error, "YAML aliases expand to too many nodes";
    NestingTooDeep = "S0006", Error, "the YAML is nested too deeply";
    UnsupportedTag = "S0007", Error, "a YAML tag that specs may not use";
    ComplexKey = "S0008", Error, "a mapping key that is not a plain scalar";
    FileTooLarge = "S0009", Error, "the file is larger than a spec may be";
    AliasBytesLimit = "S0010", Error, "YAML aliases expand to too much text";

    // S01xx — structure of the v1 schema.
    UnknownField = "S0101", Error, "a field that does not exist at this place";
    WrongType = "S0102", Error, "a value of the wrong type";
    MissingField = "S0103", Error, "a required field is missing";
    InvalidValue = "S0104", Error, "a value outside the allowed set or pattern";
    UnsupportedVersion = "S0105", Error, "the spec version is not 1";
    MissingConstruct = "S0106", Error, "a step names no construct";
    ConstructMix = "S0107", Error, "a step names more than one construct";
    FieldForKind = "S0108", Error, "a step field that this construct does not take";
    ReservedName = "S0109", Error, "a reserved name (`__proto__`, `constructor`, `prototype`)";
    EmptyBudget = "S0110", Error, "a budget with no limit in it";
    InvalidPredicate = "S0111", Error, "an ensure entry that is not a predicate";
    NotSupportedYet = "S0112", Error, "retired: every v1 construct is supported since language 1.1 (X12)";

    // S02xx — the contract type language.
    InvalidTypeString = "S0201", Error, "a type string that does not parse";
    UnknownContract = "S0202", Error, "a contract name that is not declared";
    RecursiveContract = "S0203", Error, "contracts that refer to themselves";

    // S03xx — flows, steps and the step graph.
    UnknownEntry = "S0301", Error, "`flows.entry` names no flow";
    UnknownFlow = "S0302", Error, "`run` names no flow";
    WithMismatch = "S0303", Error, "`with` keys differ from the called flow's inputs";
    DuplicateStep = "S0304", Error, "two steps of one flow have the same id";
    UnknownStep = "S0305", Error, "a step id that names no step of this flow";
    SelfReference = "S0306", Error, "a step that depends on or routes to itself";
    Cycle = "S0307", Error, "a cycle in the step graph";
    ReviseNeedsMaxRounds = "S0308", Error, "a revising gate in a flow without `max_rounds`";
    ReviseNotAncestor = "S0309", Error, "a revise target that does not come before its gate";
    RecursiveSubflow = "S0310", Error, "flows that call themselves through `run`";
    SubflowBodyRestricted = "S0311", Error, "a `fanout` or `run` step outside the entry flow";
    FanoutOverNotSingleRef = "S0312", Error, "`fanout.over` is not one full reference";
    ConsumerWorktreeFilesystem = "S0313", Error, "a file predicate in a consumer worktree fanout";
    ConsumerWorktreeGate = "S0314", Error, "a consumer worktree fanout without a gate after it";
    UnreachableStep = "S0315", Warning, "a step that can never run";
    JudgedFormMix = "S0323", Error, "a `judged` predicate that mixes the statement form and the scored form";
    JudgeThreshold = "S0324", Error, "a `judged` threshold outside [0, 1]";
    UnknownJudge = "S0325", Warning, "a `judge:` name that the stratum.toml near the spec does not configure";
    RouteNeedsMax = "S0326", Error, "a `goto` route without `max`";
    RouteShape = "S0327", Error, "a `route` entry that is not `{when, goto, max, note?}` or `{when, fail}`";
    RouteNotAncestor = "S0328", Error, "a route `goto` that does not name a strict ancestor of its step";
    OnFailShape = "S0329", Error, "an `on_fail` entry that is not `STEP`, `continue` or `{when?, goto, max, note?}`, or that is never tried";
    ScopeNotPath = "S0340", Error, "a `scope` entry that does not render to a path or a list of paths";
    InvalidScopePath = "S0341", Error, "a `scope` entry that leaves the workspace, or a glob that does not parse";
    ChangesOutsideScope = "S0342", Error, "`changes()` outside the `ensure` of a step or stage with `scope`";
    FencedChangeBudget = "S0343", Warning, "`max_changed_bytes` on a write fence that creates nothing";
    RollbackTarget = "S0344", Error, "a `rollback` target that is not a scoped `do` step finishing before the routing step";
    StageOnFailForm = "S0345", Error, "a fanout stage's `on_fail` entry that names a recovery step or a `rollback`";
    UnknownCommand = "S0334", Warning, "an `exec` or `evaluate` command that the stratum.toml near the spec does not declare";
    ExecArgNotText = "S0335", Error, "an `exec` argument that does not render to text or a list of texts";
    ExecExitStatus = "S0336", Error, "an `exec.expect_exit` that is not an exit status 0..=255";
    ReceiptsOutsideEnsure = "S0337", Error, "`receipts()` outside an `ensure` expression";
    ContinueStepName = "S0317", Error, "a step named `continue` in a flow that uses `on_fail: continue`";
    ContinueFlowOutput = "S0318", Error, "`on_fail: continue` on the step the flow output comes from";
    ArtifactNotPath = "S0320", Error, "an `artifacts` entry that does not render to a path or a list of paths";
    InvalidArtifactPath = "S0321", Error, "an `artifacts` entry that leaves the workspace, or a glob that does not parse";
    GateShowNotText = "S0322", Error, "a gate `show` entry or `prompt` that does not render to text";
    GateOptionNotString = "S0331", Error, "a gate `options` entry that is not a string, or options that do not render to a list of strings";
    ChoiceWithoutOptions = "S0332", Error, "a read of the `choice` of a gate that has no `options`";
    GateOptionsInvalid = "S0333", Error, "gate `options` that are empty or list an option twice";

    // S04xx — `${...}` references and the types that flow through them.
    InvalidReference = "S0401", Error, "a `${...}` reference that does not parse";
    ReferenceScope = "S0402", Error, "`${item}` or `${prev}` outside a fanout stage";
    UnknownPath = "S0403", Error, "a reference path that the contract does not have";
    UnknownStepReference = "S0404", Error, "a reference to a step that does not exist";
    NoOutputContract = "S0405", Error, "a reference to the output of a step without a contract";
    FanoutNeedsFinalOut = "S0406", Error, "a fanout whose output is read has no final `out`";
    InvalidFlowOutput = "S0407", Error, "`output.from` is not one full step-output reference";
    TemplateInExpression = "S0408", Error, "`${...}` inside an expression field";
    ReferenceTypeMismatch = "S0409", Error, "a referenced value of a type that cannot fit";
    FlowOutputMismatch = "S0410", Error, "the flow output's source does not match `output.contract`";
    LiteralFilePath = "S0411", Warning, "retired: file predicate paths are templates since language 1.1 (X3)";
    UnguardedContinueOutput = "S0412", Warning, "a read of the output of an `on_fail: continue` step that does not check its status";
    StepStateMember = "S0413", Error, "a step-state reference (`${<id>.status}`, …) with a member the step does not have";
    FilePathNotString = "S0415", Error, "a file predicate path that is one reference to a value that is not a string";

    // S05xx — carry variables.
    CarryRootOnly = "S0501", Error, "`carry` on a flow that is not the entry flow";
    CarryNameConflict = "S0502", Error, "a carry name that is already taken";
    CarryInvalidReference = "S0503", Error, "a carry value that is not one full step or input reference";
    CarryInitialConditional = "S0504", Error, "a carry initial value from a step that may not run";
    UnknownCarry = "S0505", Error, "a reference to a carry variable that is not declared";
    CarryBeforeInitial = "S0506", Error, "a carry variable read before its initial value exists";
    CarryUnknownGate = "S0507", Error, "a carry `on_revise` key that names no gate";
    CarryReviseTargetNull = "S0508", Error, "a carry `on_revise` gate that cannot revise";
    CarryReviseMissesConsumer = "S0509", Error, "a carry reader outside the gate's revise closure";
    CarryGateNotAfterConsumer = "S0510", Error, "a carry reader that does not come before the gate";
    CarryPathReserved = "S0511", Error, "`${name.output}` where `name` is a carry variable";

    // S06xx — expressions (`ensure`, `when`, `set`, `iterate.until`).
    ExprSyntax = "S0601", Error, "an expression that does not parse";
    UnknownBinding = "S0602", Error, "a name that is not a binding";
    BindingUnavailable = "S0603", Error, "a binding that this field does not provide";
    UnknownFunction = "S0604", Error, "a call of a function that does not exist";
    WrongArity = "S0605", Error, "a call with the wrong number of arguments";
    ForbiddenMember = "S0606", Error, "access to `__proto__`, `constructor` or `prototype`";
    InvalidIndex = "S0607", Error, "an index that is not a non-negative integer literal";
    UnknownMember = "S0608", Error, "a field that the value's contract does not have";
    OperandType = "S0609", Error, "an operation whose operand types can never work";
    UnorderedRead = "S0610", Error, "a read of `result.<step>` that may happen before the step ran";
    ConstantCondition = "S0611", Warning, "a condition that is always true or always false";
    ExprTooComplex = "S0612", Error, "an expression nested too deeply or too large";
    UnknownResultStep = "S0613", Error, "`result.<step>` names no step of this flow";
    NonBooleanCondition = "S0614", Error, "a condition that can never be a boolean";
    InvalidRegex = "S0615", Error, "a `matches` pattern that can never be used";
    SetContractMismatch = "S0616", Error, "`set` keys or values that the `out` contract rejects";
    UnorderedStepRead = "S0617", Error, "a read of `steps.<id>` that may happen before the step finished";
    UnknownStepState = "S0618", Error, "`steps.<id>` names no step of this flow, or a member a step does not have";
    MisplacedLambda = "S0619", Error, "a lambda that is not the last argument of `all`, `any`, `count`, `filter` or `map`";
    LambdaShadows = "S0620", Error, "a lambda parameter that hides a binding or an outer parameter";
    LambdaBodyType = "S0621", Error, "a lambda body that must be a boolean but is not";

    // S07xx — cost
    BudgetExceeded = "S0701", Warning, "a worst case above a declared budget";

    // S09xx — portability (`check --portable`): S09NN is addition XNN of language 1.1
    PortableScoredJudge = "S0905", Warning, "the scored form of `judged` (`rubric`, `threshold`, `judge`, `inputs`), which the original engine does not know";
    PortableStepState = "S0901", Warning, "step status in expressions and templates (`steps.<id>`, `${<id>.status}`), which the original engine does not know";
    PortableContinue = "S0902", Warning, "`on_fail: continue`, which the original engine reads as a step named `continue`";
    PortableArtifacts = "S0904", Warning, "`artifacts` and gate `show`/`prompt`, which the original engine does not know";
    PortableBuiltins = "S0903", Warning, "lambdas and the language 1.1 built-ins, which the original engine does not know";
    PortableCostHint = "S0906", Warning, "`cost` hints, which the original engine does not know";
    PortableCommands = "S0912", Warning, "`exec` checks and `evaluate` steps on declared commands, which the original engine does not know";
    PortableGateOptions = "S0910", Warning, "gate `options` and `choice`, which the original engine does not know";
    PortableRoutes = "S0909", Warning, "`route` entries (conditional edges after success), which the original engine does not know";
    PortableLease = "S0907", Warning, "dispatch leases (`timeout_ms`, `dispatch_timeout_ms`), which the original engine does not know";
    PortableScope = "S0911", Warning, "`scope` and `changes()`, which the original engine does not know";
}

/// The whole catalogue as one Markdown document (`docs/diagnostics.md`).
pub fn catalogue_markdown() -> String {
    let mut out = String::from(
        "# Diagnostics\n\n<!-- Generated from compiler/src/diagnostics/codes.rs and explanations/; \
         regenerate with `UPDATE_DOCS=1 cargo test -p stratum-conformance --test tidy`. -->\n\n\
         | code | severity | title |\n|---|---|---|\n",
    );
    for c in Code::ALL {
        out.push_str(&format!(
            "| [{}](#{}) | {} | {} |\n",
            c.as_str(),
            c.as_str().to_lowercase(),
            c.severity().as_str(),
            c.title()
        ));
    }
    for c in Code::ALL {
        // an explicit anchor: the heading's own slug also holds its title,
        // and links (the table above, the language reference) use the code alone
        out.push_str(&format!(
            "\n<a id=\"{}\"></a>\n\n",
            c.as_str().to_lowercase()
        ));
        let text = c.explanation().trim_end();
        // demote headings one level so that each code is a section
        for line in text.lines() {
            if line.starts_with('#') {
                out.push('#');
            }
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
