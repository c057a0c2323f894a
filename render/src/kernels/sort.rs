//! Radix sort on the GPU. (Being written.)
