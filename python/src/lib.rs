//! The Python extension `stratumc._native`: the `stratumc` command line and
//! the check, build, cost and run API, over the same Rust code as the CLI.
//!
//! Owns: the boundary between Python and the toolchain — JSON text both
//! ways (the pure-Python package `stratumc` turns it into typed classes and
//! raises `SpecError` for a spec with errors), `StratumError` for every
//! other refusal, the GIL released while Rust works, and the state
//! directory a call's `store=` chooses ([`Home`]). The run driver whose
//! agents are Python callables is [`run`].
//! Must never: implement a language or execution rule (the compiler, the
//! vm and the CLI's shared functions do), run a subprocess for the API, or
//! set a global allocator (the binary's mimalloc is not for a library).

mod run;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, TryLockError};

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::{Value, json};
use stratum_compiler::analysis::{Analysis, analyze_bytes_with};
use stratum_compiler::diagnostics::render;
use stratum_compiler::env::CheckEnv;
use stratum_vm::store::StoreLocation;
use stratumc::input::Kind;

create_exception!(
    stratumc,
    StratumError,
    PyException,
    "A refusal of stratumc: an unreadable file, a bad input, a store or engine error (the message says what and how to fix it)."
);

/// A spec or plan as a call names it: a file, or the text itself.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A file (read as the CLI reads it).
    Path(PathBuf),
    /// Spec text.
    Text(String),
}

impl Source {
    fn of(path: Option<PathBuf>, text: Option<String>) -> PyResult<Source> {
        match (path, text) {
            (Some(p), None) => Ok(Source::Path(p)),
            (None, Some(t)) => Ok(Source::Text(t)),
            _ => Err(StratumError::new_err(
                "give exactly one of `path` and `text`",
            )),
        }
    }

    /// How diagnostics name it (`None` for text).
    pub(crate) fn shown(&self) -> Option<String> {
        match self {
            Source::Path(p) => Some(p.display().to_string()),
            Source::Text(_) => None,
        }
    }

    /// Its bytes (a file read as `kind`).
    pub(crate) fn bytes(&self, kind: Kind) -> Result<Vec<u8>, String> {
        match self {
            Source::Path(p) => stratumc::input::read(p, kind).map_err(|e| e.to_string()),
            Source::Text(t) => Ok(t.clone().into_bytes()),
        }
    }

    /// The checker's environment: the `stratum.toml` beside the file (for
    /// text: in the current directory), found as `stratumc check` finds it,
    /// with the reason when it is unreadable.
    fn env(&self) -> (CheckEnv, Option<String>) {
        match self {
            Source::Path(p) => CheckEnv::near_spec(p),
            Source::Text(_) => CheckEnv::near_spec(Path::new("spec.stratum.yaml")),
        }
    }
}

/// A spec analysed as `stratumc check` analyses it.
pub(crate) struct Analysed {
    pub(crate) analysis: Analysis,
    /// Why the `stratum.toml` near it was not used, when it was unreadable.
    pub(crate) env_error: Option<String>,
}

pub(crate) fn analyse(source: &Source, portable: bool) -> Result<Analysed, String> {
    let bytes = source.bytes(Kind::Spec)?;
    let (env, env_error) = source.env();
    let analysis = analyze_bytes_with(&bytes, &env);
    let analysis = match portable {
        true => analysis.with_portability_warnings(),
        false => analysis,
    };
    Ok(Analysed {
        analysis,
        env_error,
    })
}

/// The diagnostics as `stratumc check --format json` gives them, each with
/// its byte span (`start`, `end`) and the file's `path` (`null` for text).
pub(crate) fn diagnostics_json(a: &Analysis, path: Option<&str>) -> Vec<Value> {
    a.diagnostics
        .iter()
        .map(|d| {
            let mut v = render::json_diagnostic(&a.text, &a.lines, d);
            if let Value::Object(fields) = &mut v {
                fields.insert("start".into(), d.span.start.into());
                fields.insert("end".into(), d.span.end.into());
                fields.insert("path".into(), path.into());
            }
            v
        })
        .collect()
}

/// The store of one call's `store=`, for the process while the call runs:
/// a state directory in place of `$STRATUM_HOME`
/// (`stratum_vm::store::set_home`: the lease heartbeat and every store
/// connection must see it too), or a store URL (`postgres://…`,
/// `sqlite:PATH`) in place of `STRATUM_STORE`
/// (`stratum_vm::store::set_location`). Calls that choose one run one at a
/// time; without `store=` nothing is set.
pub(crate) struct Home {
    previous: Previous,
    _one: MutexGuard<'static, ()>,
}

/// What a [`Home`] replaced, put back when it is dropped.
enum Previous {
    Home(Option<PathBuf>),
    Location(Option<StoreLocation>),
}

static CHOSEN_HOME: Mutex<()> = Mutex::new(());

impl Home {
    pub(crate) fn choose(store: Option<&Path>) -> Result<Option<Home>, String> {
        let Some(dir) = store else {
            return Ok(None);
        };
        let url = dir.to_str().filter(|t| stratum_vm::store::is_store_url(t));
        let location = url
            .map(|u| StoreLocation::parse(u, "store=").map_err(|e| e.to_string()))
            .transpose()?;
        let one = match CHOSEN_HOME.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Err(
                    "another call with `store=` is running in this process (an agent or gate callable of `stratumc.run` cannot use `store=`); calls that choose a store run one at a time"
                        .into(),
                );
            }
        };
        let previous = match location {
            Some(l) => Previous::Location(stratum_vm::store::set_location(Some(l))),
            None => Previous::Home(stratum_vm::store::set_home(Some(dir.to_path_buf()))),
        };
        Ok(Some(Home {
            previous,
            _one: one,
        }))
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        match &mut self.previous {
            Previous::Home(h) => {
                stratum_vm::store::set_home(h.take());
            }
            Previous::Location(l) => {
                stratum_vm::store::set_location(l.take());
            }
        }
    }
}

/// `stratumc` on the command line: runs `argv` (program name first) through
/// the CLI's own main and returns its exit status. `program` is how to start
/// this program again (`[python, -m, stratumc]`: `run --detach` and MCP
/// background drivers re-run it; this process's executable is Python).
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>, program: Vec<String>) -> u8 {
    stratum_vm::background::set_program(program.into_iter().map(OsString::from).collect());
    py.detach(|| {
        let exit = stratumc::exit_with_args(argv);
        // Rust's stdout is flushed at a Rust program's exit, not at a library's return
        let _ = std::io::Write::flush(&mut std::io::stdout());
        exit as u8
    })
}

/// The version of the toolchain (`stratumc --version`).
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Checks one spec: `{"path", "diagnostics": [...], "environment_error"}`.
#[pyfunction]
#[pyo3(signature = (path=None, text=None, portable=false))]
fn check(
    py: Python<'_>,
    path: Option<PathBuf>,
    text: Option<String>,
    portable: bool,
) -> PyResult<String> {
    let source = Source::of(path, text)?;
    py.detach(|| -> Result<String, String> {
        let a = analyse(&source, portable)?;
        let shown = source.shown();
        let doc = json!({
            "path": shown,
            "diagnostics": diagnostics_json(&a.analysis, shown.as_deref()),
            "environment_error": a.env_error,
        });
        Ok(doc.to_string())
    })
    .map_err(StratumError::new_err)
}

/// Builds one spec's plan: `({"path", "diagnostics", "hash", "written"},
/// bytes)`; a spec with errors has no hash and no bytes. With `output`, the
/// plan file is written there (as `stratumc build -o` writes it).
#[pyfunction]
#[pyo3(signature = (path=None, text=None, output=None))]
fn build<'py>(
    py: Python<'py>,
    path: Option<PathBuf>,
    text: Option<String>,
    output: Option<PathBuf>,
) -> PyResult<(String, Option<Bound<'py, PyBytes>>)> {
    let source = Source::of(path, text)?;
    let (doc, bytes) = py
        .detach(|| -> Result<(Value, Option<Vec<u8>>), String> {
            let a = analyse(&source, false)?.analysis;
            let shown = source.shown();
            let diagnostics = diagnostics_json(&a, shown.as_deref());
            let Some(plan) = stratum_compiler::build::build_plan(&a) else {
                return Ok((json!({"path": shown, "diagnostics": diagnostics}), None));
            };
            let (encoded, hash) = stratum_vm::plan::file::encode(&plan);
            if let Some(out) = &output {
                stratumc::commands::build::write_plan(out, &encoded)?;
            }
            let doc = json!({
                "path": shown,
                "diagnostics": diagnostics,
                "hash": hash.to_hex(),
                "written": output.as_ref().map(|o| o.display().to_string()),
            });
            Ok((doc, Some(encoded)))
        })
        .map_err(StratumError::new_err)?;
    Ok((doc.to_string(), bytes.map(|b| PyBytes::new(py, &b))))
}

/// Estimates a flow as `stratumc cost --format json` does: `{"cost": DOC}`,
/// or `{"diagnostics": [...]}` for a spec with errors.
#[pyfunction]
#[pyo3(signature = (path=None, text=None, inputs=None, flow=None, config=None, history=false, store=None))]
#[allow(clippy::too_many_arguments)] // the keyword arguments of `stratumc.cost`
fn cost(
    py: Python<'_>,
    path: Option<PathBuf>,
    text: Option<String>,
    inputs: Option<String>,
    flow: Option<String>,
    config: Option<PathBuf>,
    history: bool,
    store: Option<PathBuf>,
) -> PyResult<String> {
    use stratumc::commands::cost;
    let source = Source::of(path, text)?;
    py.detach(|| -> Result<String, String> {
        let a = analyse(&source, false)?.analysis;
        let shown = source.shown();
        let Some(ir) = a.ir.as_ref() else {
            let diagnostics = diagnostics_json(&a, shown.as_deref());
            return Ok(json!({ "diagnostics": diagnostics }).to_string());
        };
        let (profiles, _) = cost::load_config(config.as_deref())?;
        let flow = cost::flow_of(ir, flow.as_deref(), shown.as_deref().unwrap_or("the spec"))?;
        let inputs = inputs.as_deref().map(parse_inputs).transpose()?;
        let (profiles, scanned) = match history {
            true => {
                let _home = Home::choose(store.as_deref())?;
                let (p, s) = cost::with_history(&a, profiles)?;
                (p, Some(s))
            }
            false => (profiles, None),
        };
        let estimate = stratum_compiler::cost::analyze_cost(ir, flow, inputs.as_ref(), &profiles);
        Ok(json!({ "cost": cost::json_doc(&estimate, scanned) }).to_string())
    })
    .map_err(StratumError::new_err)
}

/// A flow's input from the JSON the Python layer wrote (an object there).
pub(crate) fn parse_inputs(text: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("the inputs must be a dict (the flow's input object)".into()),
        Err(e) => Err(format!("the inputs are not JSON: {e}")),
    }
}

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("StratumError", m.py().get_type::<StratumError>())?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(build, m)?)?;
    m.add_function(wrap_pyfunction!(cost, m)?)?;
    m.add_function(wrap_pyfunction!(run::run, m)?)?;
    Ok(())
}
