//! Generates the expression parser from `src/expr.lalrpop` into `OUT_DIR`.

fn main() {
    if let Err(err) = lalrpop::Configuration::new()
        .set_in_dir("src")
        .emit_rerun_directives(true)
        .process()
    {
        eprintln!("lalrpop failed: {err}");
        std::process::exit(1);
    }
}
