//! Headless Chromium for the page tests: render a URL to its DOM after the page's scripts ran,
//! or to a PNG screenshot, and read the screenshot's pixels back (a small PNG decoder, for
//! 8-bit RGB and RGBA, which is what Chromium writes).
//!
//! Chromium is found as `$TOLLGATE_CHROMIUM`, else `chromium`, `chromium-browser` or
//! `google-chrome` on the PATH. Every run has its own profile directory, background
//! networking off, and a time bound after which it is killed and the test fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one Chromium run may take before it is killed.
const RUN_BOUND: Duration = Duration::from_secs(30);

/// The Chromium binary; panics (failing the test, never passing it) when there is none.
pub(crate) fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("TOLLGATE_CHROMIUM") {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "no chromium on the PATH (nor $TOLLGATE_CHROMIUM): install it \
         (`apt-get install -y chromium`) to run the page tests"
    );
}

/// Runs headless Chromium on `url` with `extra` flags, in a fresh profile under `scratch`,
/// letting the page's timers run for `virtual_ms` of virtual time (Chromium advances it
/// while the page waits for nothing but timers, and holds it while a fetch is answered);
/// its standard output. Panics if it fails or outlives [`RUN_BOUND`].
fn run(scratch: &Path, url: &str, virtual_ms: u32, extra: &[String]) -> Vec<u8> {
    let profile = scratch.join("profile");
    let _ = std::fs::remove_dir_all(&profile);
    std::fs::create_dir_all(&profile).expect("a profile dir");
    let mut child = Command::new(chromium())
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--no-pings",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--window-size=1200,900",
        ])
        .arg(format!("--virtual-time-budget={virtual_ms}"))
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    // Read the pipes on threads so a chatty Chromium never blocks on a full pipe.
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut bytes);
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut bytes);
        bytes
    });
    let deadline = Instant::now() + RUN_BOUND;
    let status = loop {
        if let Some(status) = child.try_wait().expect("chromium's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium ran for more than {RUN_BOUND:?} on {url}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = out.join().expect("stdout read");
    let err = err.join().expect("stderr read");
    assert!(
        status.success(),
        "chromium failed on {url}: {status}\n{}",
        String::from_utf8_lossy(&err)
    );
    let _ = std::fs::remove_dir_all(&profile);
    out
}

/// The DOM of `url` after its scripts ran for `virtual_ms` (`--dump-dom`).
pub(crate) fn dom(scratch: &Path, url: &str, virtual_ms: u32) -> String {
    String::from_utf8(run(scratch, url, virtual_ms, &["--dump-dom".to_owned()])).expect("UTF-8 DOM")
}

/// A 1200x900 screenshot of `url` after its scripts ran for `virtual_ms`, written to `png`;
/// its bytes.
pub(crate) fn screenshot(scratch: &Path, url: &str, virtual_ms: u32, png: &Path) -> Vec<u8> {
    let _ = std::fs::remove_file(png);
    run(
        scratch,
        url,
        virtual_ms,
        &[format!("--screenshot={}", png.display())],
    );
    std::fs::read(png).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", png.display()))
}

/// A decoded picture: its size and its pixels as RGB.
#[derive(Debug)]
pub(crate) struct Picture {
    /// Width in pixels.
    pub(crate) width: usize,
    /// Height in pixels.
    pub(crate) height: usize,
    /// Row after row, three bytes a pixel.
    pub(crate) rgb: Vec<u8>,
}

impl Picture {
    /// Decodes an 8-bit, non-interlaced RGB or RGBA PNG; panics on anything else.
    pub(crate) fn from_png(png: &[u8]) -> Picture {
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
        let mut at = 8;
        let (mut width, mut height, mut channels) = (0, 0, 0);
        let mut compressed = Vec::new();
        while at + 8 <= png.len() {
            let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
            let kind = &png[at + 4..at + 8];
            let data = &png[at + 8..at + 8 + len];
            match kind {
                b"IHDR" => {
                    width = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
                    height = u32::from_be_bytes(data[4..8].try_into().unwrap()) as usize;
                    assert_eq!(data[8], 8, "bit depth");
                    channels = match data[9] {
                        2 => 3,
                        6 => 4,
                        other => panic!("colour type {other}"),
                    };
                    assert_eq!(data[12], 0, "interlaced");
                }
                b"IDAT" => compressed.extend_from_slice(data),
                b"IEND" => break,
                _ => {}
            }
            at += 12 + len;
        }
        let raw = miniz_oxide::inflate::decompress_to_vec_zlib(&compressed).expect("inflates");
        let stride = width * channels;
        assert_eq!(raw.len(), height * (stride + 1), "image data size");
        let mut pixels = vec![0u8; height * stride];
        for y in 0..height {
            let filter = raw[y * (stride + 1)];
            let line = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
            for x in 0..stride {
                let a = if x >= channels {
                    pixels[y * stride + x - channels]
                } else {
                    0
                };
                let b = if y > 0 {
                    pixels[(y - 1) * stride + x]
                } else {
                    0
                };
                let c = if x >= channels && y > 0 {
                    pixels[(y - 1) * stride + x - channels]
                } else {
                    0
                };
                let predicted = match filter {
                    0 => 0,
                    1 => a,
                    2 => b,
                    3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                    4 => paeth(a, b, c),
                    other => panic!("PNG filter {other}"),
                };
                pixels[y * stride + x] = line[x].wrapping_add(predicted);
            }
        }
        let rgb = pixels
            .chunks_exact(channels)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect();
        Picture { width, height, rgb }
    }

    /// How many pixels are within 24 per channel of `colour`.
    pub(crate) fn count_near(&self, colour: [u8; 3]) -> usize {
        self.rgb
            .chunks_exact(3)
            .filter(|p| (0..3).all(|i| p[i].abs_diff(colour[i]) <= 24))
            .count()
    }

    /// How many distinct colours it holds.
    pub(crate) fn colours(&self) -> usize {
        let mut seen: Vec<[u8; 3]> = self
            .rgb
            .chunks_exact(3)
            .map(|p| [p[0], p[1], p[2]])
            .collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    }
}

fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let p = i16::from(a) + i16::from(b) - i16::from(c);
    let (pa, pb, pc) = (
        (p - i16::from(a)).abs(),
        (p - i16::from(b)).abs(),
        (p - i16::from(c)).abs(),
    );
    if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }
}

/// A picture is a rendered page, not a blank: 1200x900, many colours, and at least `least`
/// pixels of each of `colours` (the chart's).
pub(crate) fn assert_rendered(png: &[u8], colours: &[(&str, [u8; 3])], least: usize) {
    assert!(png.len() > 10_000, "a {} byte screenshot", png.len());
    let picture = Picture::from_png(png);
    assert_eq!((picture.width, picture.height), (1200, 900));
    assert!(
        picture.colours() > 50,
        "{} colours: a blank page",
        picture.colours()
    );
    for (name, colour) in colours {
        let n = picture.count_near(*colour);
        assert!(
            n >= least,
            "{n} pixels of {name} {colour:?}, expected {least} or more"
        );
    }
}
