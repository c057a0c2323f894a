//! Tests of `view_controller.rs`.

use splat_formats::random::SplitMix64;

use super::*;

fn vec3(rng: &mut SplitMix64, lo: f32, hi: f32) -> Vec3 {
    Vec3::new(rng.range(lo, hi), rng.range(lo, hi), rng.range(lo, hi))
}

/// Uniform random rotation (rejection sampling in the 4-ball).
fn rotation(rng: &mut SplitMix64) -> Quat {
    loop {
        let q = Quat::from_xyzw(
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
        );
        let length = q.length();
        if length > 0.1 && length <= 1.0 {
            return q.normalize();
        }
    }
}

/// A dataset-like camera with non-square pixels and an off-centre principal point.
fn dataset_camera(rotation: Quat, position: Vec3) -> Camera {
    Camera {
        width: 1297,
        height: 840,
        fx: 1011.3,
        fy: 1008.7,
        cx: 650.2,
        cy: 418.9,
        world_from_camera: Mat4::from_rotation_translation(rotation, position),
    }
}

/// Camera looking from `eye` at `at` with no roll about `up`.
fn look_at(eye: Vec3, at: Vec3, up: Vec3) -> Quat {
    let forward = (at - eye).normalize();
    rotation_from_axes(forward.cross(up), forward).unwrap()
}

/// Pixel position of world point `p`, and its depth.
fn project(camera: &Camera, p: Vec3) -> (Vec2, f32) {
    let c = camera.camera_from_world().transform_point3(p);
    (Vec2::new(camera.fx * c.x / c.z + camera.cx, camera.fy * c.y / c.z + camera.cy), c.z)
}

fn max_abs_diff(a: Mat4, b: Mat4) -> f32 {
    (a - b).to_cols_array().iter().fold(0.0_f32, |m, v| m.max(v.abs()))
}

fn all_finite(camera: &Camera) -> bool {
    [camera.fx, camera.fy, camera.cx, camera.cy].iter().all(|v| v.is_finite())
        && camera.world_from_camera.is_finite()
}

#[test]
fn from_camera_round_trips_random_poses() {
    let mut rng = SplitMix64::new(1);
    for _ in 0..200 {
        // Random rotations include every roll; positions and distances span scene size 1–10.
        let camera = dataset_camera(rotation(&mut rng), vec3(&mut rng, -5.0, 5.0));
        let up = vec3(&mut rng, -1.0, 1.0);
        let distance = rng.range(0.5, 10.0);
        let back =
            ViewController::from_camera(&camera, up, distance).camera(camera.width, camera.height);
        // f32 rounding of the target (≲ 15 units away) and the quaternion round trip: a few
        // ulp of 16 (1.9e-6 each).
        let error = max_abs_diff(back.world_from_camera, camera.world_from_camera);
        assert!(error <= 1e-5, "world_from_camera off by {error}");
        assert_eq!((back.width, back.height), (camera.width, camera.height));
        for (a, b) in
            [(back.fx, camera.fx), (back.fy, camera.fy), (back.cx, camera.cx), (back.cy, camera.cy)]
        {
            assert_eq!(a.to_bits(), b.to_bits(), "intrinsics must be reproduced exactly");
        }
    }
}

#[test]
fn from_camera_at_another_size_keeps_the_vertical_fov() {
    let camera = dataset_camera(Quat::from_rotation_z(0.3), Vec3::new(1.0, 2.0, 3.0));
    let view = ViewController::from_camera(&camera, Vec3::NEG_Y, 4.0);
    let other = view.camera(640, 360);
    // fy scales with the height (relative f32 rounding of atan/tan, ~1e-6).
    let expected_fy = camera.fy * 360.0 / camera.height as f32;
    assert!((other.fy - expected_fy).abs() <= 1e-4 * expected_fy);
    assert_eq!(other.fx.to_bits(), other.fy.to_bits());
    assert_eq!((other.cx, other.cy), (320.0, 180.0));
    assert!(max_abs_diff(other.world_from_camera, camera.world_from_camera) <= 1e-5);
}

#[test]
fn set_fov_forgets_the_dataset_intrinsics() {
    let camera = dataset_camera(Quat::IDENTITY, Vec3::ZERO);
    let mut view = ViewController::from_camera(&camera, Vec3::NEG_Y, 2.0);
    view.set_fov_y(1.0);
    let back = view.camera(camera.width, camera.height);
    assert_eq!(back.fx.to_bits(), back.fy.to_bits());
    assert_eq!(back.cx.to_bits(), (0.5 * camera.width as f32).to_bits());
    assert!((view.fov_y() - 1.0).abs() < 1e-7);
}

#[test]
fn orbit_keeps_the_target_and_the_distance() {
    let mut rng = SplitMix64::new(2);
    for _ in 0..20 {
        let camera = dataset_camera(rotation(&mut rng), vec3(&mut rng, -5.0, 5.0));
        let mut view = ViewController::from_camera(&camera, Vec3::NEG_Y, rng.range(0.5, 10.0));
        let (target, distance) = (view.target(), view.distance());
        for _ in 0..50 {
            view.orbit(Vec2::new(rng.range(-200.0, 200.0), rng.range(-200.0, 200.0)));
            assert_eq!(view.target(), target);
            assert_eq!(view.distance().to_bits(), distance.to_bits());
            // The eye is `distance` from the target up to f32 rounding at ~15 units.
            let actual = view.position().distance(target);
            assert!((actual - distance).abs() <= 1e-5, "{actual} vs {distance}");
            assert!((view.rotation().length() - 1.0).abs() < 1e-6);
        }
    }
}

#[test]
fn full_yaw_returns_to_the_start() {
    let start = ViewController::framing(Vec3::new(1.0, -2.0, 0.5), 3.0, Vec3::NEG_Y);
    let full_turn = TAU / ORBIT_RADIANS_PER_PIXEL;

    let mut once = start;
    once.orbit(Vec2::new(full_turn, 0.0));
    let mut steps = start;
    for _ in 0..100 {
        steps.orbit(Vec2::new(full_turn / 100.0, 0.0));
    }
    let reference = start.camera(800, 600).world_from_camera;
    for view in [once, steps] {
        // Eye ~8 units from a target ~2 from the origin; 100 composed rotations drift ~1e-6.
        let error = max_abs_diff(view.camera(800, 600).world_from_camera, reference);
        assert!(error <= 1e-5, "off by {error}");
    }

    // Half a turn puts the eye on the opposite side, at the same height.
    let mut half = start;
    half.orbit(Vec2::new(full_turn / 2.0, 0.0));
    let (a, b) = (start.position() - start.target(), half.position() - half.target());
    assert!((a.dot(start.up()) - b.dot(start.up())).abs() < 1e-5);
    let horizontal = |v: Vec3| v - start.up() * v.dot(start.up());
    assert!((horizontal(a) + horizontal(b)).length() < 1e-4);
}

#[test]
fn orbit_and_look_follow_the_documented_directions() {
    let start = ViewController::framing(Vec3::ZERO, 1.0, Vec3::Y);
    let right = start.rotation() * Vec3::X;

    let mut view = start;
    view.orbit(Vec2::new(20.0, 0.0));
    assert!((view.position() - start.position()).dot(right) < 0.0, "eye moves left");
    assert!(view.forward().dot(right) > 0.0, "view turns right");

    let mut view = start;
    view.orbit(Vec2::new(0.0, 20.0));
    assert!(view.position().dot(Vec3::Y) > start.position().dot(Vec3::Y), "eye rises");
    let expected = start.elevation() - 20.0 * ORBIT_RADIANS_PER_PIXEL;
    assert!((view.elevation() - expected).abs() < 1e-5);

    let mut view = start;
    view.look(Vec2::new(20.0, 10.0));
    assert!(view.position().distance(start.position()) < 1e-5, "the eye stays");
    assert!((view.target().distance(view.position()) - start.distance()).abs() < 1e-5);
    assert!(view.forward().dot(right) > 0.0, "look right");
    let expected = start.elevation() - 10.0 * LOOK_RADIANS_PER_PIXEL;
    assert!((view.elevation() - expected).abs() < 1e-5, "look down");
}

#[test]
fn pitch_is_clamped_and_never_flips() {
    let start = ViewController::framing(Vec3::ZERO, 1.0, Vec3::Z);
    for (drag, limit) in [(1e5, -MAX_ELEVATION), (-1e5, MAX_ELEVATION)] {
        let mut once = start;
        once.orbit(Vec2::new(0.0, drag));
        let mut steps = start;
        for _ in 0..2000 {
            steps.orbit(Vec2::new(3.0, drag / 1e4));
            assert!(steps.elevation().abs() <= MAX_ELEVATION + 1e-5);
            // Camera up (−y) keeps pointing to the upper hemisphere: no flip over the pole.
            assert!((steps.rotation() * Vec3::NEG_Y).dot(Vec3::Z) > 0.0);
        }
        for view in [once, steps] {
            assert!((view.elevation() - limit).abs() < 1e-4, "{}", view.elevation());
        }
    }
    let mut look = start;
    look.look(Vec2::new(0.0, -1e6));
    assert!((look.elevation() - MAX_ELEVATION).abs() < 1e-4);
}

#[test]
fn a_pose_beyond_the_clamp_is_not_snapped() {
    // A dataset camera looking straight down.
    let rotation = look_at(Vec3::new(0.0, 0.0, 5.0), Vec3::ZERO, Vec3::Y);
    let camera = dataset_camera(rotation, Vec3::new(0.0, 0.0, 5.0));
    let start = ViewController::from_camera(&camera, Vec3::Z, 5.0);
    assert!((start.elevation() + PI / 2.0).abs() < 1e-3);

    let mut further = start;
    further.orbit(Vec2::new(0.0, 5.0));
    assert!((further.elevation() - start.elevation()).abs() < 1e-6, "no further down");

    let mut back = start;
    back.orbit(Vec2::new(0.0, -5.0));
    let expected = start.elevation() + 5.0 * ORBIT_RADIANS_PER_PIXEL;
    assert!((back.elevation() - expected).abs() < 1e-4, "a small step, not a snap");
}

#[test]
fn roll_survives_the_jump_and_eases_out_while_orbiting() {
    let eye = Vec3::new(4.0, -1.0, 0.5);
    let level = look_at(eye, Vec3::ZERO, Vec3::NEG_Y);
    let rolled = Quat::from_axis_angle(level * Vec3::Z, 0.5) * level;
    let view = ViewController::from_camera(&dataset_camera(rolled, eye), Vec3::NEG_Y, 4.0);
    assert!((view.roll() - 0.5).abs() < 1e-5, "roll {}", view.roll());

    // Yaw and pitch keep the roll; only the easing changes it, by exp(−pixels / 300).
    for delta in [Vec2::new(10.0, 0.0), Vec2::new(0.0, 10.0), Vec2::new(-6.0, 8.0)] {
        let mut moved = view;
        moved.orbit(delta);
        let expected = 0.5 * (-delta.length() / ROLL_EASE_PIXELS).exp();
        assert!((moved.roll() - expected).abs() < 1e-4, "{} vs {expected}", moved.roll());
        assert!(moved.roll() > 0.45, "a small drag never snaps the roll");
    }

    let mut long = view;
    for _ in 0..100 {
        long.orbit(Vec2::new(30.0, 0.0));
    }
    assert!(long.roll().abs() < 1e-3, "roll {}", long.roll());

    let mut levelled = view;
    levelled.level_roll();
    assert!(levelled.roll().abs() < 1e-5);
    assert!(levelled.forward().distance(view.forward()) < 1e-5);
}

#[test]
fn pan_moves_the_target_by_exactly_the_mouse_delta() {
    let framed = ViewController::framing(Vec3::new(0.5, 1.0, -2.0), 2.0, Vec3::NEG_Y);
    let camera = dataset_camera(Quat::from_rotation_y(0.4), Vec3::new(1.0, 0.0, -3.0));
    // fx = fy so the horizontal motion is exact at the dataset camera's own size too.
    let square = Camera { fx: camera.fy, ..camera };
    let jumped = ViewController::from_camera(&square, Vec3::NEG_Y, 3.0);
    for (view, (w, h)) in [(framed, (800, 600)), (jumped, (square.width, square.height))] {
        let before = view.camera(w, h);
        let (start, _) = project(&before, view.target());
        assert!(start.distance(Vec2::new(before.cx, before.cy)) < 1e-3);
        for delta in [Vec2::new(37.0, -12.0), Vec2::new(-250.0, 400.0), Vec2::new(0.5, 0.0)] {
            let mut moved = view;
            moved.pan(delta, h as f32);
            let (pixel, depth) = project(&moved.camera(w, h), view.target());
            // f32 rounding of a point ~5 units away, seen at ~1000 px focal length: ~1e-3 px.
            assert!((pixel - (start + delta)).length() < 5e-3, "{pixel} vs {}", start + delta);
            assert!((depth - view.distance()).abs() < 1e-5);
            assert_eq!(moved.rotation(), view.rotation());
        }
    }
}

#[test]
fn zoom_is_multiplicative_and_never_reaches_zero() {
    let start = ViewController::framing(Vec3::ONE, 2.0, Vec3::Y);
    let mut view = start;
    view.zoom(50.0);
    assert!(view.distance() < start.distance());
    assert_eq!(view.target(), start.target());
    view.zoom(-50.0);
    assert!((view.distance() / start.distance() - 1.0).abs() < 1e-6);

    for _ in 0..1000 {
        view.zoom(1e4);
        assert!(view.distance() > 0.0);
    }
    assert!((view.distance() - 2.0 * MIN_DISTANCE_FRACTION).abs() < 1e-7);
    view.zoom(f32::MAX);
    assert!(view.distance() > 0.0);
    view.zoom(-f32::MAX);
    assert!((view.distance() - 2.0 * MAX_DISTANCE_FRACTION).abs() < 1e-3);
    assert!(view.camera(640, 480).world_from_camera.is_finite());
}

#[test]
fn fly_moves_along_the_camera_axes() {
    let mut rng = SplitMix64::new(3);
    let camera = dataset_camera(rotation(&mut rng), vec3(&mut rng, -5.0, 5.0));
    let start = ViewController::from_camera(&camera, Vec3::NEG_Y, 2.0);
    let expected_step = FLY_SPEED * 2.0 * 0.25;

    let mut view = start;
    view.fly(Vec3::Z, 0.25);
    let moved = view.position() - start.position();
    assert!(moved.distance(start.forward() * expected_step) < 1e-5);
    assert!((view.target() - start.target()).distance(moved) < 1e-5);
    assert_eq!(view.rotation(), start.rotation());
    assert_eq!(view.distance().to_bits(), start.distance().to_bits());

    let mut view = start;
    view.fly(Vec3::new(1.0, 1.0, 0.0), 0.25);
    let axes = (start.rotation() * Vec3::X) + (start.rotation() * Vec3::Y);
    assert!((view.position() - start.position()).distance(axes * expected_step) < 1e-5);

    // Zoomed very close, the speed floor still moves at a fraction of the scene radius.
    let mut close = start.with_scene_radius(10.0);
    close.zoom(1e5);
    let before = close.position();
    close.fly(Vec3::Z, 1.0);
    let step = close.position().distance(before);
    assert!((step - FLY_SPEED * FLY_MIN_SPEED_FRACTION * 10.0).abs() < 1e-4);
}

#[test]
fn framing_shows_the_whole_sphere_from_above() {
    let center = Vec3::new(3.0, -1.0, 2.0);
    let up = Vec3::new(0.2, -1.0, 0.1).normalize();
    let view = ViewController::framing(center, 2.5, up);
    assert_eq!(view.target(), center);
    let height = (view.position() - center).dot(up) / view.distance();
    assert!((height - FRAMING_ELEVATION.sin()).abs() < 1e-5);
    assert!(view.roll().abs() < 1e-5);

    let camera = view.camera(800, 600);
    let mut rng = SplitMix64::new(4);
    for _ in 0..1000 {
        let direction = vec3(&mut rng, -1.0, 1.0).normalize_or(Vec3::X);
        let (pixel, depth) = project(&camera, center + direction * 2.5);
        assert!(depth > 0.0);
        assert!(pixel.x > 0.0 && pixel.x < 800.0 && pixel.y > 0.0 && pixel.y < 600.0, "{pixel}");
    }
}

/// Cameras on a ring of `radius` around `center` at `height` along `axis`, looking at the
/// centre, level about `axis`, for the given angles.
fn ring(center: Vec3, axis: Vec3, radius: f32, height: f32, angles: &[f32]) -> Vec<Camera> {
    let (a, b) = horizontal_basis(axis);
    angles
        .iter()
        .map(|angle| {
            let eye = center + (a * angle.cos() + b * angle.sin()) * radius + axis * height;
            dataset_camera(look_at(eye, center, axis), eye)
        })
        .collect()
}

#[test]
fn scene_up_recovers_the_axis_of_a_ring() {
    let axis = Vec3::new(0.3, 0.8, -0.5).normalize();
    let angles: Vec<f32> = (0..24).map(|i| i as f32 * TAU / 24.0).collect();
    let cameras = ring(Vec3::new(1.0, 2.0, 3.0), axis, 4.0, 1.5, &angles);
    assert!(scene_up(&cameras).distance(axis) < 1e-5);

    // With some roll jitter on each camera the estimate is still close.
    let mut rng = SplitMix64::new(5);
    let jittered: Vec<Camera> = cameras
        .iter()
        .map(|camera| {
            let rotation = Quat::from_mat4(&camera.world_from_camera);
            let roll = Quat::from_axis_angle(rotation * Vec3::Z, rng.range(-0.15, 0.15));
            Camera {
                world_from_camera: Mat4::from_rotation_translation(
                    roll * rotation,
                    camera.position(),
                ),
                ..*camera
            }
        })
        .collect();
    assert!(scene_up(&jittered).angle_between(axis) < 0.05);
}

#[test]
fn scene_focus_recovers_the_centre() {
    let center = Vec3::new(2.0, -1.0, 0.5);
    // Half a ring: the centroid of the cameras is far from the centre they look at.
    let angles: Vec<f32> = (0..12).map(|i| i as f32 * PI / 11.0).collect();
    let cameras = ring(center, Vec3::NEG_Y, 4.0, 1.0, &angles);
    let (focus, radius) = scene_focus(&cameras);
    // The Tikhonov term moves it by ~2e-6 of the centroid offset (~3 units).
    assert!(focus.distance(center) < 1e-4, "{focus}");
    let camera_distance = (4.0_f32 * 4.0 + 1.0).sqrt();
    assert!((radius - FOCUS_RADIUS_FACTOR * camera_distance).abs() < 1e-4);
}

#[test]
fn focus_from_points_ignores_outliers() {
    let mut rng = SplitMix64::new(6);
    let center = Vec3::new(10.0, -3.0, 4.0);
    let mut points: Vec<[f32; 3]> =
        (0..9_900).map(|_| (center + vec3(&mut rng, -1.0, 1.0)).to_array()).collect();
    // 1% floaters far away, all on one side.
    points.extend(
        (0..100).map(|_| (center + Vec3::splat(500.0) + vec3(&mut rng, 0.0, 500.0)).to_array()),
    );
    let (focus, radius) = focus_from_points(&points);
    assert!(focus.distance(center) < 0.1, "{focus}");
    // Half the diagonal of the (trimmed) cube of side 2 is √3.
    assert!(radius > 1.5 && radius < 1.8, "{radius}");
}

#[test]
fn degenerate_inputs_give_finite_results() {
    let nan_camera = Camera {
        world_from_camera: Mat4::from_cols_array(&[f32::NAN; 16]),
        fy: f32::NAN,
        ..dataset_camera(Quat::IDENTITY, Vec3::ZERO)
    };
    let zero_camera = Camera {
        width: 0,
        height: 0,
        fx: 0.0,
        fy: 0.0,
        cx: 0.0,
        cy: 0.0,
        world_from_camera: Mat4::ZERO,
    };
    let one = dataset_camera(Quat::from_rotation_x(0.3), Vec3::ONE);

    for cameras in [
        vec![],
        vec![nan_camera],
        vec![zero_camera],
        vec![one],
        vec![one; 5],
        vec![one, nan_camera, zero_camera],
    ] {
        let up = scene_up(&cameras);
        assert!(up.is_finite() && (up.length() - 1.0).abs() < 1e-5);
        let (focus, radius) = scene_focus(&cameras);
        assert!(focus.is_finite() && radius.is_finite() && radius > 0.0);
    }
    let up = Vec3::new(0.0, 1.0, 0.0);
    let mirrored = Camera { world_from_camera: Mat4::from_scale(Vec3::new(1.0, -1.0, 1.0)), ..one };
    // As many cameras upside down as upright: no estimate.
    let mut upside_down = [dataset_camera(Quat::IDENTITY, Vec3::ZERO); 4];
    for camera in &mut upside_down[..2] {
        camera.world_from_camera = Mat4::from_rotation_z(PI);
    }
    assert_eq!(scene_up(&upside_down), DEFAULT_UP);

    for points in [
        vec![],
        vec![[f32::NAN; 3]],
        vec![[1.0, 2.0, 3.0]; 7],
        vec![[f32::MAX, -f32::MAX, 0.0], [-f32::MAX, f32::MAX, 0.0]],
    ] {
        let (focus, radius) = focus_from_points(&points);
        assert!(focus.is_finite() && radius.is_finite() && radius > 0.0);
    }

    let views = [
        ViewController::framing(Vec3::NAN, f32::NAN, Vec3::ZERO),
        ViewController::framing(Vec3::ZERO, 0.0, Vec3::INFINITY),
        ViewController::framing(Vec3::splat(f32::MAX), f32::MAX, up),
        ViewController::from_camera(&nan_camera, Vec3::NAN, f32::NAN),
        ViewController::from_camera(&zero_camera, up, 0.0),
        ViewController::from_camera(&mirrored, up, -1.0),
        ViewController::from_camera(&one, Vec3::ZERO, f32::INFINITY),
        ViewController::default(),
    ];
    for start in views {
        for (w, h) in [(0, 0), (0, 10), (10, 0), (1, 1), (4096, 2160)] {
            assert!(all_finite(&start.camera(w, h)), "{start:?} at {w}x{h}");
        }

        // Non-finite and zero input leaves the state exactly as it was.
        let mut view = start;
        for bad in [Vec2::NAN, Vec2::new(f32::INFINITY, 0.0), Vec2::ZERO] {
            view.orbit(bad);
            view.look(bad);
            view.pan(bad, 600.0);
        }
        view.pan(Vec2::ONE, 0.0);
        view.pan(Vec2::ONE, f32::NAN);
        view.zoom(f32::NAN);
        view.zoom(0.0);
        view.fly(Vec3::NAN, 0.1);
        view.fly(Vec3::Z, f32::NAN);
        view.fly(Vec3::Z, -1.0);
        view.fly(Vec3::ZERO, 0.1);
        view.set_scene_radius(f32::NAN);
        view.set_scene_radius(-1.0);
        view.set_fov_y(f32::INFINITY);
        view.set_up(Vec3::ZERO);
        assert_eq!(view, start);

        // Huge input stays finite.
        view.orbit(Vec2::splat(1e30));
        view.look(Vec2::splat(-1e30));
        view.pan(Vec2::splat(1e30), 1.0);
        view.zoom(1e30);
        view.zoom(-1e30);
        view.fly(Vec3::splat(1e30), 1e30);
        view.set_fov_y(-5.0);
        view.level_roll();
        let camera = view.camera(800, 600);
        assert!(all_finite(&camera), "{view:?}");
        assert!(view.distance() > 0.0 && view.position().is_finite());
    }
}
