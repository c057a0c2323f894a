//! CPU reference of the rasterizer (tests only). (Being written.)
