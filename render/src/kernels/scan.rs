//! Prefix sums on the GPU. (Being written.)
