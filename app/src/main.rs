//! `splatforge`: the desktop trainer and its command line.

mod bench;
mod bench_memory;
mod convert_cmd;
mod info;
mod poses_cmd;
mod render_cmd;
mod render_video;
mod self_test_cmd;
mod train_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use splat_trainer::dataset::LoadOptions;
use splat_trainer::formats::filter::{CropBox, CropSphere, Filter};

/// With no subcommand, the desktop window opens (with the built-in sample scene, or PATH).
#[derive(Parser)]
#[command(name = "splatforge", version, about = "Train and view 3D Gaussian splats on your GPU.")]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// A dataset folder or .zip, or a splat file, to open in the window.
    path: Option<PathBuf>,
    /// Where Ctrl+E and Ctrl+S write (default: <dataset>_exports beside the dataset).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start training as soon as the dataset is loaded.
    #[arg(long)]
    start: bool,
    /// Steps of the runs started from the window.
    #[arg(long)]
    steps: Option<u32>,
    /// GPU memory budget of the runs started from the window, e.g. 6GiB or bytes (default:
    /// from the adapter).
    #[arg(long, value_parser = splatforge::parse_bytes)]
    memory_budget: Option<u64>,
}

#[derive(Subcommand)]
enum Command {
    /// Print one JSON object describing a splat file, a point cloud or a dataset.
    Info {
        /// A .ply, .compressed.ply, .splat or .spz file, or a dataset folder or .zip.
        path: PathBuf,
        /// How a dataset is loaded.
        #[command(flatten)]
        load: LoadOptions,
    },
    /// Render a splat scene from a camera into a PNG, or a video: once round it
    /// (--turntable) or along a camera path (--path).
    Render {
        /// A .ply, .compressed.ply, .splat or .spz scene.
        scene: PathBuf,
        #[arg(
            long,
            conflicts_with = "camera_from",
            help = "camera.json: {\"width\",\"height\",\"fx\",\"fy\",\"cx\",\"cy\",\"world_from_camera\":[16 numbers, row-major, OpenCV]}"
        )]
        camera: Option<PathBuf>,
        /// Take the camera of a dataset view instead (see --index); with --turntable, the
        /// dataset's cameras give the orbit its centre, size and up.
        #[arg(long)]
        camera_from: Option<PathBuf>,
        /// Which view of --camera-from.
        #[arg(long, default_value_t = 0)]
        index: usize,
        /// A video once round the scene in this many seconds, at the height and distance of
        /// the window's first view (centre and size from the splats, or --camera-from).
        #[arg(long, value_parser = render_video::parse_positive, conflicts_with_all = ["camera", "path"])]
        turntable: Option<f64>,
        #[arg(
            long,
            conflicts_with_all = ["camera", "camera_from"],
            help = "A video along a camera path: {\"fov_y_degrees\": 50, \"keyframes\": [{\"time\": 0, \"position\": [x,y,z], \"look_at\": [x,y,z]} or {\"time\": 2, \"world_from_camera\": [16 numbers, row-major, OpenCV]}, ...]}, passed smoothly"
        )]
        path: Option<PathBuf>,
        /// Video frames a second.
        #[arg(long, default_value = "30", value_parser = render_video::parse_positive)]
        fps: f64,
        /// Video frame size.
        #[arg(long, default_value = "1280x720", value_parser = render_video::parse_size)]
        size: (u32, u32),
        /// ffmpeg's executable, for a video file [default: ffmpeg on the PATH].
        #[arg(long)]
        ffmpeg: Option<PathBuf>,
        /// Where to write: a PNG; for a video a .mp4, .mov, .mkv or .webm file (encoded by
        /// ffmpeg), or a new folder for its PNG frames.
        #[arg(long)]
        out: PathBuf,
        /// Background colour r,g,b in 0..1.
        #[arg(long, default_value = "0,0,0", value_parser = splat_trainer::dataset::parse_background)]
        background: [f32; 3],
        /// Mip-Splatting's antialiasing filter.
        #[arg(long)]
        antialiased: bool,
    },
    /// Train splats on a dataset without a window; writes splats.ply and metrics.json.
    Train(train_cmd::TrainArgs),
    /// Camera poses for a folder of photos or a video, computed by COLMAP (frames cut by
    /// ffmpeg): writes a dataset (images/, sparse/0/) that train and the window open.
    Poses(poses_cmd::PosesArgs),
    /// Convert a splat scene between formats, each told by its extension: reads .ply (3DGS or
    /// compressed), .splat, .spz, SOG (.sog or meta.json) and .ckpt (a checkpoint's splats);
    /// writes .ply, .spz, .splat, .sog or DIR/meta.json. Optionally keeps only some splats
    /// (--crop-box, --crop-sphere, --min-opacity, --max-size, --drop-floaters) and levels the
    /// scene (--up, --level-from).
    Convert {
        input: PathBuf,
        output: PathBuf,
        /// Keep only splats whose centre is inside this box: xmin,ymin,zmin,xmax,ymax,zmax in
        /// the scene's coordinates (bounds included).
        #[arg(long, allow_hyphen_values = true)]
        crop_box: Option<CropBox>,
        /// Turn the crop box about its centre: x,y,z in degrees, about the scene's x axis,
        /// then y, then z (the window's crop shows the box's turn this way).
        #[arg(long, allow_hyphen_values = true, value_parser = splat_trainer::formats::filter::parse_turn)]
        crop_box_turn: Option<[f32; 3]>,
        /// Leave out likely floaters: keep only the splats in the dense scene's cells (cells of
        /// splats that touch, groups of at least 2% of them, and the cells touching those;
        /// small clusters apart from it are dropped, between parts of the scene too).
        #[arg(long)]
        drop_floaters: bool,
        /// Keep only splats whose centre is inside this ball: x,y,z,radius in the scene's
        /// coordinates (the surface included).
        #[arg(long, allow_hyphen_values = true)]
        crop_sphere: Option<CropSphere>,
        /// Keep only splats at least this opaque (0 to 1).
        #[arg(long, value_parser = convert_cmd::parse_opacity)]
        min_opacity: Option<f32>,
        /// Keep only splats whose largest axis (its standard deviation, in the scene's units)
        /// is at most this: drops the huge faint splats behind a scene.
        #[arg(long, value_parser = convert_cmd::parse_size)]
        max_size: Option<f32>,
        /// Level the scene: turn it so that this direction (x,y,z, the scene's up) becomes
        /// −y, the up of 3DGS files and web viewers.
        #[arg(long, allow_hyphen_values = true, value_parser = convert_cmd::parse_up, conflicts_with = "level_from")]
        up: Option<[f32; 3]>,
        /// Level the scene by the up of this dataset's cameras (the capture it was trained on).
        #[arg(long)]
        level_from: Option<PathBuf>,
    },
    /// Predicted vs measured peak GPU memory of training runs at given splat caps.
    BenchMemory(bench_memory::BenchMemoryArgs),
    /// Step time per window over a long training run (densification off): it must not drift.
    /// With --profile: GPU milliseconds per pass (median, p90), steps/s and the GPU-busy
    /// fraction.
    BenchTrain(bench::TrainBenchArgs),
    /// Check the rasterizer (forward and backward against the CPU reference, every reduction
    /// width) and training (the same bits twice) on this GPU, with its limits and per-pass
    /// times; exits non-zero when a check fails. Run it first on a new GPU, and attach its
    /// --json to a bug report.
    SelfTest {
        /// Write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// The memory budget to report the largest run for, e.g. 24GiB (default: from the
        /// adapter).
        #[arg(long, value_parser = splatforge::parse_bytes)]
        memory_budget: Option<u64>,
        /// Print the adapter's report as JSON (name, backend, type, limits, memory) and stop,
        /// without running a check: what a script asks before it commits to a GPU.
        #[arg(long)]
        adapter_only: bool,
        /// The training check runs 60 steps (refining every 20) instead of 150; the
        /// rasterizer's checks are unchanged. For scripts that check their own wiring; a
        /// verdict on a GPU is the full self-test's.
        #[arg(long, conflicts_with = "adapter_only")]
        quick: bool,
    },
    /// Regenerate the built-in sample scene (assets/sample-scene.zip) from its definition.
    #[command(hide = true)]
    MakeSampleScene {
        #[arg(long)]
        out: PathBuf,
    },
    /// SOG's encode time for random splats: the SH palette's k-means (on the GPU) and the
    /// rest.
    BenchSog {
        #[arg(long, default_value_t = 1_000_000)]
        splats: usize,
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=3))]
        sh_degree: u32,
    },
    /// Time the rasterizer forward and forward + backward on random scenes.
    BenchRender(bench::BenchArgs),
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let Some(command) = cli.command else {
        let args = splatforge::gui::GuiArgs {
            path: cli.path,
            out: cli.out,
            start: cli.start,
            steps: cli.steps,
            memory_budget: cli.memory_budget,
        };
        return exit_code(splatforge::gui::run(args));
    };
    exit_code(run(command, &matches))
}

/// Runs a subcommand.
#[expect(clippy::too_many_lines, reason = "one arm a subcommand, each handing on its arguments")]
fn run(command: Command, matches: &ArgMatches) -> anyhow::Result<()> {
    match command {
        Command::MakeSampleScene { out } => make_sample_scene(&out),
        Command::SelfTest { json, memory_budget, adapter_only, quick } => {
            self_test_cmd::run(&self_test_cmd::SelfTestArgs {
                json,
                memory_budget,
                adapter_only,
                quick,
            })
        }
        Command::Info { path, load } => info::run(&path, &load),
        Command::Train(mut args) => {
            // Which options were given (and not defaulted): --resume refuses those that
            // contradict its checkpoint.
            if let Some(train) = matches.subcommand_matches("train") {
                args.given = train
                    .ids()
                    .filter(|id| train.value_source(id.as_str()) == Some(ValueSource::CommandLine))
                    .map(|id| {
                        let text = train.get_raw(id.as_str()).into_iter().flatten();
                        let text: Vec<_> = text.map(|t| t.to_string_lossy()).collect();
                        (id.as_str().to_owned(), text.join(","))
                    })
                    .collect();
            }
            train_cmd::run(&args)
        }
        Command::Convert {
            input,
            output,
            crop_box,
            crop_box_turn,
            crop_sphere,
            min_opacity,
            max_size,
            drop_floaters,
            up,
            level_from,
        } => {
            let level = match (up, level_from) {
                (Some(up), _) => Some(convert_cmd::Level::Up(up)),
                (None, Some(dataset)) => Some(convert_cmd::Level::FromDataset(dataset)),
                (None, None) => None,
            };
            anyhow::ensure!(
                crop_box.is_some() || crop_box_turn.is_none(),
                "--crop-box-turn turns a crop box: give --crop-box too"
            );
            let crop_box =
                crop_box.map(|b| CropBox { turn: crop_box_turn.unwrap_or_default(), ..b });
            let filter =
                Filter { crop_box, crop_sphere, min_opacity, max_size, ..Filter::default() };
            convert_cmd::run(&input, &output, &filter, drop_floaters, level.as_ref())
        }
        Command::Poses(args) => poses_cmd::run(&args),
        Command::BenchMemory(args) => bench_memory::run(&args),
        Command::BenchTrain(args) => bench::run_train(&args),
        Command::BenchSog { splats, sh_degree } => bench::run_sog(splats.max(1), sh_degree),
        Command::BenchRender(args) => bench::run(&args),
        Command::Render {
            scene,
            camera,
            camera_from,
            index,
            turntable,
            path,
            fps,
            size: (width, height),
            ffmpeg,
            out,
            background,
            antialiased,
        } => {
            let motion = match (turntable, path) {
                (Some(seconds), None) => Some(render_video::Motion::Turntable { seconds }),
                (None, Some(path)) => Some(render_video::Motion::Path(path)),
                _ => None,
            };
            let (camera_from, video) = match motion {
                Some(motion) => (
                    None,
                    Some(render_video::VideoArgs {
                        motion,
                        fps,
                        width,
                        height,
                        cameras_from: camera_from,
                        ffmpeg,
                    }),
                ),
                None => (camera_from, None),
            };
            render_cmd::run(&render_cmd::RenderArgs {
                scene,
                camera,
                camera_from,
                index,
                out,
                background,
                antialiased,
                video,
            })
        }
    }
}

fn make_sample_scene(out: &std::path::Path) -> anyhow::Result<()> {
    let ctx = pollster::block_on(splat_trainer::render::GpuContext::new_headless())?;
    splat_trainer::sample_scene::write_zip(&ctx, out)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

fn exit_code(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line: the whole chain of causes, separated by ": ".
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
