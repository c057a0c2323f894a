//! The format crate's integration tests: one binary, a module per concern (TESTING.md).

mod compressed_ply;
mod fuzz_real_files;
mod ply_files;
mod splat;
mod spz;

/// `fuzz_real_files` bounds what a parse allocates; it runs in a process of its own.
#[global_allocator]
static ALLOCATOR: splat_test_support::CountingAllocator = splat_test_support::CountingAllocator;
