//! `splatforge self-test`: checks the rasterizer and training on this machine's GPU
//! (`splat_trainer::self_test`), prints a summary, writes the report as JSON, and fails when a
//! check does.

use std::path::PathBuf;

use anyhow::Context as _;
use splat_trainer::render::GpuContext;
use splatforge::gui::sample;

pub struct SelfTestArgs {
    pub json: Option<PathBuf>,
    pub memory_budget: Option<u64>,
    /// Print the adapter's report as JSON and stop, without running a check.
    pub adapter_only: bool,
    /// Shorter training runs ([`splat_trainer::self_test::Options::quick`]).
    pub quick: bool,
}

pub fn run(args: &SelfTestArgs) -> anyhow::Result<()> {
    let ctx = pollster::block_on(GpuContext::new_headless())?;
    let budget = args.memory_budget.map_or_else(
        || splat_trainer::memory::default_budget(&ctx),
        splat_trainer::memory::MemoryBudget::given,
    );
    if args.adapter_only {
        let adapter = splat_trainer::self_test::adapter_report(&ctx, budget);
        let text = serde_json::to_string_pretty(&adapter)?;
        if let Some(path) = &args.json {
            std::fs::write(path, &text).with_context(|| format!("{}", path.display()))?;
        }
        println!("{text}");
        return Ok(());
    }
    let sample = sample::load_dataset()?;
    let length = if args.quick { "quick" } else { "about a minute" };
    eprintln!("self-test on {} ({length})…", ctx.adapter_info.name);
    let options = splat_trainer::self_test::Options {
        memory_budget: budget,
        profile: true,
        quick: args.quick,
    };
    let report = splat_trainer::self_test::run(&ctx, &sample, &options)
        .context("the self-test could not run")?;
    println!("{}", report.summary());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text).with_context(|| format!("{}", path.display()))?;
        println!("wrote {}", path.display());
    }
    let failed: Vec<&str> = report.checks.iter().filter(|c| !c.passed).map(|c| c.name).collect();
    anyhow::ensure!(failed.is_empty(), "self-test failed: {}", failed.join(", "));
    Ok(())
}
