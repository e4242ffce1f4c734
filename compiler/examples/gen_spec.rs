//! Prints a generated spec of N steps (`cargo run --example gen_spec -- N`).
//!
//! Owns: the command-line door to [`stratum_compiler::testgen::generate_spec`]
//! that `scripts/bench-check.sh` uses to write its inputs.
//! Must never: analyse or validate anything itself; it only prints the text.

use std::io::Write as _;

fn main() {
    let arg = std::env::args().nth(1);
    let steps = match arg.as_deref().map(str::parse::<usize>) {
        Some(Ok(n)) if n > 0 => n,
        _ => {
            eprintln!("usage: gen_spec STEPS   (STEPS a positive integer)");
            std::process::exit(2);
        }
    };
    let text = stratum_compiler::testgen::generate_spec(steps);
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        std::process::exit(1);
    }
}
