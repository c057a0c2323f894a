//! Smoke test of the real binary in a real (virtual) X server: `splatforge --start` opens the
//! window with the sample scene, trains it to the end, and a screenshot of the screen shows
//! the window with rendered splats in its viewport.
//!
//! Needs `Xvfb` (package `xvfb`) and `ImageMagick`'s `import` (package `imagemagick`); `.ci/run`
//! installs both. Rendering goes through lavapipe, as everywhere in the tests.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SCREEN: (u32, u32) = (1600, 1000);

/// Kills the child when the test ends, however it ends.
struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_xvfb() -> (Reaper, String) {
    // A display number unlikely to be taken; try a few.
    for attempt in 0..20 {
        let number = 90 + (std::process::id() % 500) + attempt;
        if Path::new(&format!("/tmp/.X11-unix/X{number}")).exists() {
            continue;
        }
        let display = format!(":{number}");
        let child = Command::new("Xvfb")
            .args([
                display.as_str(),
                "-screen",
                "0",
                &format!("{}x{}x24", SCREEN.0, SCREEN.1),
                "-nolisten",
                "tcp",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Xvfb (apt-get install xvfb; .ci/run installs it)");
        let mut xvfb = Reaper(child);
        let socket = PathBuf::from(format!("/tmp/.X11-unix/X{number}"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() && Instant::now() < deadline {
            if xvfb.0.try_wait().ok().flatten().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if socket.exists() {
            return (xvfb, display);
        }
        drop(xvfb.0.kill());
    }
    panic!("could not start Xvfb");
}

#[test]
#[ignore = "slow, about 10 s: the real window in Xvfb trains the sample scene and draws it"]
fn the_binary_opens_trains_the_sample_scene_and_draws_it() {
    let (_xvfb, display) = start_xvfb();
    let home = std::env::temp_dir().join(format!("splatforge-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).expect("temp home");
    let child = Command::new(env!("CARGO_BIN_EXE_splatforge"))
        .args(["--start", "--steps", "30", "--out"])
        .arg(home.join("exports"))
        .env("DISPLAY", &display)
        .env_remove("WAYLAND_DISPLAY")
        // The sample scene is written into the data folder: keep it inside the test's folder.
        .env("XDG_DATA_HOME", &home)
        .env("RUST_LOG", "splatforge=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut app = Reaper(child);
    let stderr = app.0.stderr.take().expect("stderr");
    let (lines_tx, lines) = mpsc::sync_channel(1024);
    std::thread::Builder::new()
        .name("app-stderr".into())
        .spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        })
        .expect("a reader thread");

    // The app logs what it shows in its log panel; wait for the run to finish.
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut log = Vec::new();
    loop {
        match lines.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let done = line.contains("Finished 30 steps");
                log.push(line);
                if done {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("the app exited early:\n{}", log.join("\n"))
            }
        }
        assert!(Instant::now() < deadline, "no finished run in time:\n{}", log.join("\n"));
    }
    assert!(log.iter().any(|l| l.contains("sample-scene.zip")), "{}", log.join("\n"));
    assert!(!log.iter().any(|l| l.contains("ERROR")), "{}", log.join("\n"));
    // A moment for the viewer's last frame to reach the screen.
    std::thread::sleep(Duration::from_secs(3));

    let shot = home.join("screenshot.png");
    let status = Command::new("import")
        .args(["-display", &display, "-window", "root"])
        .arg(&shot)
        .status()
        .expect("ImageMagick's import (apt-get install imagemagick; .ci/run installs it)");
    assert!(status.success(), "import failed");
    assert!(app.0.try_wait().expect("wait").is_none(), "the app is still running");

    let image = image::open(&shot).expect("the screenshot").to_rgb8();
    assert_eq!(image.dimensions(), SCREEN);
    // The window is drawn: egui's panels are not a flat colour.
    let distinct: std::collections::HashSet<[u8; 3]> = image.pixels().map(|p| p.0).collect();
    assert!(distinct.len() > 50, "only {} colours on screen", distinct.len());
    // The viewport (centre of the 1400 × 900 window at the top left) shows splats: coloured
    // pixels, not just its black background and grey hint text.
    let mut coloured = 0;
    for y in 250..650 {
        for x in 450..950 {
            let [r, g, b] = image.get_pixel(x, y).0;
            let (max, min) = (r.max(g).max(b), r.min(g).min(b));
            if max > 40 && max - min > 30 {
                coloured += 1;
            }
        }
    }
    assert!(coloured > 2000, "the viewport shows no splats ({coloured} coloured pixels)");
    // Kept for a person to look at when the test fails; removed when it passes.
    let _ = std::fs::remove_dir_all(&home);
}
