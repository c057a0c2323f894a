//! Every PLY in ../shared/data that should load loads with the counts its README gives; every
//! one that should fail fails with a message that says why.

use splat_formats::ply::{self, PlyKind};
use splat_formats::{Loaded, SplatFormat, load_file};
use splat_test_support::data;

fn splats(rel: &str) -> (SplatFormat, splat_formats::Splats) {
    match load_file(&data(rel)).unwrap_or_else(|e| panic!("{e}")) {
        Loaded::Splats { format, splats } => (format, splats),
        Loaded::Points(_) => panic!("{rel} read as points"),
    }
}

fn points(rel: &str) -> splat_formats::PointCloud {
    match load_file(&data(rel)).unwrap_or_else(|e| panic!("{e}")) {
        Loaded::Points(p) => p,
        Loaded::Splats { .. } => panic!("{rel} read as splats"),
    }
}

#[test]
fn trained_3dgs_scenes_load() {
    for (file, count, degree) in [
        ("splats/inria-ply/rtgs-16.ply", 16, 3),
        ("splats/inria-ply/lod4-tile-489.ply", 489, 3),
        ("splats/inria-ply/lod2-tile-6831.ply", 6831, 3),
        ("splats/inria-ply/fruit-drops-extra-prop.ply", 4721, 3),
        ("splats/inria-ply/donut-sh0-no-normals.ply", 45_624, 0),
    ] {
        let (format, s) = splats(file);
        assert_eq!(format, SplatFormat::Ply, "{file}");
        assert_eq!((s.len(), s.sh_degree), (count, degree), "{file}");
        assert_eq!(s.sh_rest.len(), count * s.rest_per_splat(), "{file}");
    }
}

#[test]
fn raw_values_are_kept_as_stored() {
    // The README: opacity logits up to 16.7 and log-scales down to -23 in the LOD tiles;
    // rtgs-16 has unnormalised quaternions. None of that may be clamped or normalised.
    let (_, s) = splats("splats/inria-ply/lod2-tile-6831.ply");
    let max_opacity = s.opacity_logits.iter().copied().fold(f32::MIN, f32::max);
    let min_scale = s.log_scales.iter().flatten().copied().fold(f32::MAX, f32::min);
    assert!(max_opacity > 16.0, "{max_opacity}");
    assert!(min_scale < -20.0, "{min_scale}");
    let (_, s) = splats("splats/inria-ply/rtgs-16.ply");
    let unnormalised = s
        .rotations
        .iter()
        .filter(|q| (q.iter().map(|v| v * v).sum::<f32>() - 1.0).abs() > 1e-3)
        .count();
    assert!(unnormalised > 0);
}

#[test]
fn real_scene_round_trips_bit_identically() {
    for file in ["splats/inria-ply/lod4-tile-489.ply", "splats/inria-ply/donut-sh0-no-normals.ply"]
    {
        let (_, scene) = splats(file);
        let mut bytes = Vec::new();
        ply::write_splats(&scene, &mut bytes).unwrap();
        let back = ply::read_splats(&bytes).unwrap();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(back.means.as_flattened()), bits(scene.means.as_flattened()), "{file}");
        assert_eq!(bits(&back.sh_rest), bits(&scene.sh_rest), "{file}");
        assert_eq!(back, scene, "{file}");
    }
}

#[test]
#[expect(clippy::float_cmp, reason = "grey is the exact constant 0.5")]
fn point_clouds_load() {
    for (file, count, has_color) in [
        ("pointclouds/donut-xyz-rgb-45624.ply", 45_624, true),
        ("pointclouds/trimesh/fuze.ply", 502, true),
        ("pointclouds/trimesh/fuze_ascii.ply", 502, true),
        ("pointclouds/trimesh/bunny.ply", 8171, false),
        ("pointclouds/trimesh/points_ascii.ply", 5, false),
        ("pointclouds/trimesh/points_ascii_with_lists.ply", 5, false),
        ("pointclouds/trimesh/points_bin.ply", 5, false),
        ("pointclouds/trimesh/points_emptyface.ply", 1024, false),
        ("pointclouds/trimesh/emptyIO_ply_points_ascii.ply", 8, false),
        ("pointclouds/trimesh/emptyIO_ply_points_bin.ply", 8, false),
        ("pointclouds/pyntcloud/diamond.ply", 6, true),
        ("pointclouds/pyntcloud/diamond_ascii.ply", 6, true),
        ("pointclouds/plyfile/tet.ply", 4, false),
        ("pointclouds/ply-rs/example_plys/greg_turk_example1_ok_ascii.ply", 8, false),
        ("pointclouds/ply-rs/example_plys/greg_turk_example2_ok_ascii.ply", 8, true),
        ("pointclouds/ply-rs/example_plys/house_ok_ascii.ply", 5, false),
        ("pointclouds/ply-rs/example_plys/house_2_ok_ascii.ply", 5, false),
        ("pointclouds/ply-rs/example_plys/house_2_ok_little_endian.ply", 5, false),
        ("pointclouds/ply-rs/example_plys/empty_ok_ascii.ply", 0, false),
        ("pointclouds/ply-rs/example_plys/empty_2_ok_ascii.ply", 0, false),
        ("pointclouds/ply-rs/example_plys/empty_2_ok_little_endian.ply", 0, false),
    ] {
        let p = points(file);
        assert_eq!((p.len(), p.has_color), (count, has_color), "{file}");
        if !has_color {
            assert!(
                p.colors.iter().all(|c| *c == [0.5; 3]),
                "{file}: no colour means neutral grey"
            );
        }
    }
}

#[test]
fn binary_and_ascii_with_different_property_orders_agree() {
    for (a, b) in [
        ("pointclouds/pyntcloud/diamond.ply", "pointclouds/pyntcloud/diamond_ascii.ply"),
        ("pointclouds/trimesh/fuze.ply", "pointclouds/trimesh/fuze_ascii.ply"),
        (
            "pointclouds/ply-rs/example_plys/house_2_ok_ascii.ply",
            "pointclouds/ply-rs/example_plys/house_2_ok_little_endian.ply",
        ),
    ] {
        let (pa, pb) = (points(a), points(b));
        assert_eq!(pa.len(), pb.len());
        for (x, y) in pa.positions.iter().flatten().zip(pb.positions.iter().flatten()) {
            // ASCII holds the decimal text of the float; parsing it back is within 1 ulp-ish.
            assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "{a} vs {b}: {x} vs {y}");
        }
        assert_eq!(pa.colors, pb.colors, "{a} vs {b}");
    }
}

#[test]
fn parser_edge_cases_parse_and_err_files_are_rejected() {
    for (file, elements) in [
        ("all_atomic_types_ok_ascii.ply", vec![("point", 1)]),
        ("exponent_values_ok_ascii.ply", vec![("point", 1)]),
        ("leading_spaces_ok_ascii.ply", vec![("point", 4)]),
        ("single_elements_ok_ascii.ply", vec![("point", 1)]),
        ("header_min_ok_ascii.ply", vec![]),
        ("greg_turk_example2_ok_ascii.ply", vec![("vertex", 8), ("face", 7), ("edge", 5)]),
    ] {
        let bytes = std::fs::read(data("pointclouds/ply-rs/example_plys").join(file)).unwrap();
        let got = ply::read_elements(&bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
        let want: Vec<(String, usize)> =
            elements.into_iter().map(|(n, c)| (n.to_string(), c)).collect();
        assert_eq!(got, want, "{file}");
    }
    let err = load_file(&data("pointclouds/ply-rs/example_plys/single_elements_err_ascii.ply"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("single_elements_err_ascii.ply") && err.contains("truncated"), "{err}");
}

#[test]
fn files_that_are_no_cloud_say_why() {
    for (file, words) in [
        ("pointclouds/ply-rs/example_plys/header_min_ok_ascii.ply", "no 'vertex' element"),
        ("pointclouds/ply-rs/example_plys/exponent_values_ok_ascii.ply", "no 'vertex' element"),
    ] {
        let err = load_file(&data(file)).unwrap_err().to_string();
        assert!(err.contains(words) && err.contains(file.rsplit('/').next().unwrap()), "{err}");
    }
}

#[test]
fn classify_tells_kinds_apart() {
    let kind = |rel: &str| ply::classify(&std::fs::read(data(rel)).unwrap()).unwrap();
    assert_eq!(kind("splats/inria-ply/rtgs-16.ply"), PlyKind::Splats);
    assert_eq!(kind("splats/compressed-ply/test-64-with-sh.compressed.ply"), PlyKind::Compressed);
    assert_eq!(kind("pointclouds/donut-xyz-rgb-45624.ply"), PlyKind::Points);
}

#[test]
fn a_splat_scene_also_reads_as_an_init_cloud() {
    let bytes = std::fs::read(data("splats/inria-ply/lod4-tile-489.ply")).unwrap();
    let cloud = ply::read_points(&bytes).unwrap();
    assert_eq!(cloud.len(), 489);
    assert!(cloud.has_color);
}
