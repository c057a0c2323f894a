#!/usr/bin/env bash
# What the tests need on a Debian or Ubuntu machine, installed where missing (with sudo when
# not root): software Vulkan (lavapipe) for the GPU tests; an X server (Xvfb), the X libraries
# winit loads at run time, and ImageMagick's `import` for the test that opens the real window
# and takes a screenshot (tests/it/gui_smoke.rs); COLMAP and ffmpeg, the engines `splatforge
# poses` drives (tests/it/cli_poses.rs, tests/it/gui.rs). Then photos from real cameras for the
# EXIF exposure reader's test, named in SPLATFORGE_EXIF_PHOTOS: source it, as `.ci/run` does
# (`source scripts/test-setup.sh`), so that the variable reaches the test command. It sets no
# shell options: a failure returns 1 and leaves an interactive shell open.
splatforge_test_setup() {
    local need=() pkg as_root exif_photos
    for pkg in libvulkan1 mesa-vulkan-drivers xvfb imagemagick \
        libx11-6 libx11-xcb1 libxcursor1 libxi6 libxrandr2 libxkbcommon-x11-0 colmap ffmpeg; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
    done
    if [ ${#need[@]} -gt 0 ]; then
        # sudo resets the environment: the variable goes through env.
        as_root=(env DEBIAN_FRONTEND=noninteractive)
        [ "$(id -u)" = 0 ] || as_root=(sudo "${as_root[@]}")
        "${as_root[@]}" apt-get update -qq || return 1
        "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" || return 1
    fi

    # Photos from real cameras, each with the EXIF block its camera wrote, for the exposure
    # reader's test (trainer/src/dataset/exposure.rs): Pillow 11.0.0's test images, from its
    # source package on PyPI (pip checks the package's hash). Where PyPI cannot be reached the
    # test says it did not check them, and this says why.
    exif_photos="${TMPDIR:-/tmp}/splatforge-exif-photos"
    if [ ! -f "$exif_photos/fujifilm.mpo" ]; then
        mkdir -p "$exif_photos"
        if python3 -m pip download --quiet --no-binary :all: --no-deps pillow==11.0.0 -d "$exif_photos"; then
            tar -xzf "$exif_photos/pillow-11.0.0.tar.gz" -C "$exif_photos" --strip-components=3 \
                pillow-11.0.0/Tests/images/{flower.jpg,xmp_test.jpg,broken_exif_dpi.jpg,iptc.jpg,empty_gps_ifd.jpg,ultrahdr.jpg,fujifilm.mpo}
            rm "$exif_photos/pillow-11.0.0.tar.gz"
        else
            echo "warning: Pillow's source package could not be fetched: real cameras' EXIF not checked" >&2
        fi
    fi
    if [ -f "$exif_photos/fujifilm.mpo" ]; then
        export SPLATFORGE_EXIF_PHOTOS="$exif_photos"
    fi
}

splatforge_test_setup
