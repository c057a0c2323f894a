//! `splatforge`: the desktop trainer and its command line.

mod info;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "splatforge", version, about = "Train and view 3D Gaussian splats on your GPU.")]
#[command(arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print one JSON object describing a splat file, a point cloud or a dataset.
    Info {
        /// A .ply, .compressed.ply, .splat or .spz file, or a dataset folder or .zip.
        path: PathBuf,
        /// Longest image side, in pixels, when loading a dataset.
        #[arg(long, default_value_t = 1600)]
        max_resolution: u32,
    },
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info { path, max_resolution } => info::run(&path, max_resolution),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line: the whole chain of causes, separated by ": ".
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
