//! The trainer crate's integration tests: one binary, a module per concern (TESTING.md).
//! Tests that measure the whole process (its resident set, its heap) check that they have it
//! to themselves (`splat_test_support::assert_own_process`: cargo-nextest runs each test in a
//! process of its own).

mod adam;
mod appearance;
mod checkpoint;
mod dataset;
mod dataset_malformed;
mod densify;
mod eval_masked;
mod eval_over_backgrounds;
mod faults;
mod helpers;
mod init_upload;
mod kernel_needs;
mod long_run;
mod loss;
mod memory_flat;
mod memory_prediction;
mod pause_resume;
mod progressive;
mod reproducible;
mod sample_scene;
mod step_pipeline;
mod task;
mod task_unread;
mod train_quality;
mod trained_gradients;

/// `init_upload` bounds the host's heap during an upload; it runs in a process of its own.
#[global_allocator]
static ALLOCATOR: splat_test_support::CountingAllocator = splat_test_support::CountingAllocator;
