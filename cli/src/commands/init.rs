//! `stratumc init [DIR] [--preset NAME]`: writes a working project — a
//! starter spec (the default), or a preset such as the staged research
//! pipeline — that `stratumc check` passes as written.
//!
//! Owns: the table of presets (each one a list of files embedded in the
//! binary) and writing them into a directory without overwriting anything.
//! Must never: hard-code a workflow in the tool (a preset is plain files
//! the user edits), or replace a file that already exists.

use std::path::{Path, PathBuf};

use crate::Exit;

/// The presets `init` can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// One agent task with a contract and ensures.
    Starter,
    /// The staged research pipeline (plan, literature, simulation, analysis,
    /// paper) with artifact gates, a local judge and a scripted agent: the
    /// files of `examples/research-pipeline/`.
    Research,
}

/// Arguments of `stratumc init`.
#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// The directory to write into (created when missing; default: the current one).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// What to write.
    #[arg(long, value_enum, default_value_t = Preset::Starter)]
    pub preset: Preset,
}

/// One file of a preset: its path relative to the project, and its text.
struct File {
    path: &'static str,
    text: &'static str,
}

/// The files of a preset.
fn files(preset: Preset) -> &'static [File] {
    match preset {
        Preset::Starter => &[
            File {
                path: "spec.stratum.yaml",
                text: include_str!("../../presets/starter/spec.stratum.yaml"),
            },
            File {
                path: "inputs.json",
                text: include_str!("../../presets/starter/inputs.json"),
            },
        ],
        Preset::Research => RESEARCH,
    }
}

/// `examples/research-pipeline/`, the one copy of the research preset.
const RESEARCH: &[File] = &[
    File {
        path: "research.stratum.yaml",
        text: include_str!("../../../examples/research-pipeline/research.stratum.yaml"),
    },
    File {
        path: "stratum.toml",
        text: include_str!("../../../examples/research-pipeline/stratum.toml"),
    },
    File {
        path: "inputs.json",
        text: include_str!("../../../examples/research-pipeline/inputs.json"),
    },
    File {
        path: "agent-config.json",
        text: include_str!("../../../examples/research-pipeline/agent-config.json"),
    },
    File {
        path: "agents/research-agent.py",
        text: include_str!("../../../examples/research-pipeline/agents/research-agent.py"),
    },
    File {
        path: "judge/fake-openai-judge.py",
        text: include_str!("../../../examples/research-pipeline/judge/fake-openai-judge.py"),
    },
    File {
        path: "README.md",
        text: include_str!("../../../examples/research-pipeline/README.md"),
    },
    File {
        path: ".gitignore",
        text: include_str!("../../../examples/research-pipeline/.gitignore"),
    },
];

/// The command to suggest after writing.
fn next_steps(preset: Preset, dir: &Path) -> String {
    let shown = dir.display();
    match preset {
        Preset::Starter => format!(
            "next: stratumc check {shown}/spec.stratum.yaml, then stratumc run {shown}/spec.stratum.yaml --inputs @{shown}/inputs.json --agent CMD"
        ),
        Preset::Research => format!(
            "next: cd {shown}, stratumc check research.stratum.yaml, stratumc cost research.stratum.yaml --inputs @inputs.json, then follow README.md (a local judge: ollama, or the fake judge in judge/)"
        ),
    }
}

/// Runs the command: exit 0 written, 2 a file exists or cannot be written.
pub fn run(args: &InitArgs) -> Exit {
    let files = files(args.preset);
    let taken: Vec<String> = files
        .iter()
        .map(|f| args.dir.join(f.path))
        .filter(|p| p.symlink_metadata().is_ok())
        .map(|p| p.display().to_string())
        .collect();
    if !taken.is_empty() {
        return super::usage(format_args!(
            "not writing the project: {} already exist(s); init never overwrites files (choose another directory or move them away)",
            taken.join(", ")
        ));
    }
    for f in files {
        let path = args.dir.join(f.path);
        if let Err(e) = write_new(&path, f.text) {
            return super::usage(format_args!("cannot write {}: {e}", path.display()));
        }
        eprintln!("wrote {}", path.display());
    }
    eprintln!("{}", next_steps(args.preset, &args.dir));
    Exit::Ok
}

/// Creates `path` (and its directories) with `text`; fails if it exists.
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_spec_passes_check() {
        for preset in [Preset::Starter] {
            for f in files(preset)
                .iter()
                .filter(|f| f.path.ends_with(".stratum.yaml"))
            {
                let a = stratum_compiler::analysis::analyze(f.text);
                assert!(
                    a.diagnostics.is_empty(),
                    "{preset:?} {}: {:?}",
                    f.path,
                    a.diagnostics
                );
            }
        }
    }
}
