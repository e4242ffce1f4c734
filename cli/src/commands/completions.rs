//! `stratumc completions SHELL` and `stratumc man`: shell completion scripts
//! and manual pages, generated from the clap definitions of the command line.
//!
//! Owns: choosing the generator and where its output goes.
//! Must never: describe a command or flag itself — every word comes from the
//! clap definitions, so the completions and the pages cannot drift from the
//! command line.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap_complete::Shell;

use crate::Exit;

/// Arguments of `stratumc completions`.
#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: `bash` (source it, or put it in /usr/share/bash-completion/completions/stratumc), `zsh` (a file `_stratumc` on $fpath), `fish` (~/.config/fish/completions/stratumc.fish), `elvish` or `powershell`.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Arguments of `stratumc man`.
#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// Write `stratumc.1` and one page per subcommand (`stratumc-check.1`, …) into this directory (created when missing) instead of printing `stratumc.1` to stdout.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// Prints the completion script of `shell` for the command line `cmd`.
pub fn completions(args: &CompletionsArgs, mut cmd: clap::Command) -> Exit {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "stratumc", &mut out);
    write_stdout(&out)
}

/// Prints or writes the manual pages of the command line `cmd`.
pub fn man(args: &ManArgs, cmd: clap::Command) -> Exit {
    let Some(dir) = &args.out_dir else {
        let mut out = Vec::new();
        return match clap_mangen::Man::new(cmd).render(&mut out) {
            Ok(()) => write_stdout(&out),
            Err(e) => {
                eprintln!("error: cannot render the manual page: {e}");
                Exit::Usage
            }
        };
    };
    match write_pages(cmd, dir) {
        Ok(n) => {
            eprintln!("wrote {n} manual pages to {}", dir.display());
            Exit::Ok
        }
        Err(e) => {
            eprintln!(
                "error: cannot write the manual pages to {}: {e}",
                dir.display()
            );
            Exit::Usage
        }
    }
}

/// `stratumc.1` and a page per visible subcommand (nested ones too, e.g.
/// `stratumc-query-flows.1`); returns how many were written.
fn write_pages(cmd: clap::Command, dir: &Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = cmd;
    cmd.build();
    let mut count = 0;
    let mut stack = vec![(cmd, "stratumc".to_string())];
    while let Some((cmd, name)) = stack.pop() {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            stack.push((sub.clone(), format!("{name}-{}", sub.get_name())));
        }
        let cmd = cmd.name(name.clone());
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut page)?;
        std::fs::write(dir.join(format!("{name}.1")), page)?;
        count += 1;
    }
    Ok(count)
}

fn write_stdout(bytes: &[u8]) -> Exit {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Exit::Ok,
        // a closed pipe (`| head`) is not the tool's failure
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Exit::Ok,
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            Exit::Usage
        }
    }
}
