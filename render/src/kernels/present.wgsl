// Present: the rasterizer's image (`[H, W]` of rgb + alpha, f32, background already
// composited) into an rgba8unorm storage texture that a UI samples directly. Colour values are
// the same "display" values the training images hold (no transfer function is applied: egui
// treats texture values as gamma-encoded, which is what image files hold too).

struct PresentParams {
    size: vec2<u32>,
    _pad: vec2<u32>,
}

@group(0) @binding(0) var<storage, read> params: PresentParams;
@group(0) @binding(1) var<storage, read> image: array<vec4<f32>>;
@group(0) @binding(2) var output: texture_storage_2d<rgba8unorm, write>;

@compute @workgroup_size(16, 16)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x >= params.size.x || id.y >= params.size.y {
        return;
    }
    let pixel = image[id.y * params.size.x + id.x];
    // Opaque: the background is part of the colour already.
    textureStore(output, vec2<i32>(id.xy), vec4<f32>(clamp(pixel.rgb, vec3<f32>(0.0), vec3<f32>(1.0)), 1.0));
}
