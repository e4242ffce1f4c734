//! `stratumc explain CODE`: prints the long explanation of a diagnostic code.
//!
//! Owns: looking the code up in the compiler's catalogue.
//! Must never: hold explanation text of its own.

use stratum_compiler::Code;

use crate::Exit;

/// Arguments of `stratumc explain`.
#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// The code (`S0305`), or `--list` to list every code.
    pub code: Option<String>,
    /// List every code with its title.
    #[arg(long)]
    pub list: bool,
}

/// Runs the command.
pub fn run(args: &ExplainArgs) -> Exit {
    let (code, list) = (args.code.as_deref(), args.list);
    if list || code.is_none() {
        for c in Code::ALL {
            super::emit(&format!(
                "{}  {:<7}  {}\n",
                c.as_str(),
                c.severity().as_str(),
                c.title()
            ));
        }
        return Exit::Ok;
    }
    let text = code.unwrap_or_default();
    match Code::parse(text) {
        Some(c) => {
            super::emit(c.explanation());
            if !c.explanation().ends_with('\n') {
                super::emit("\n");
            }
            Exit::Ok
        }
        None => {
            eprintln!("error: `{text}` is not a stratumc diagnostic code");
            eprintln!(
                "help: codes look like `S0305`; run `stratumc explain --list` to see them all"
            );
            Exit::Usage
        }
    }
}
