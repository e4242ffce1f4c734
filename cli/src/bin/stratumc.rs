//! The `stratumc` binary: [`stratumc::main_with_args`] with a faster
//! allocator (the front end allocates many small values; a library, such as
//! the Python extension, must not set one).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    stratumc::main_with_args(std::env::args_os())
}
