//! Headless Chromium for the report tests: Debian's `chromium` package, installed with apt when
//! the machine lacks it (the test fails, never skips, when it cannot be installed), started as
//! a fresh profile with no network of its own, bounded in time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// Where Debian puts it.
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long one page load may take.
const PAGE_LIMIT: Duration = Duration::from_secs(90);

/// The browser's path, installing it on first use.
pub fn chromium() -> PathBuf {
    static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match INSTALLED.get_or_init(install) {
        Ok(path) => path.clone(),
        Err(why) => panic!("headless Chromium is needed for this test: {why}"),
    }
}

/// `apt-get install chromium` (as root, or through sudo), under a lock: test binaries run in
/// parallel and apt allows one at a time.
fn install() -> Result<PathBuf, String> {
    let path = PathBuf::from(CHROMIUM);
    if path.exists() {
        return Ok(path);
    }
    let sudo = if unsafe { libc::geteuid() } == 0 {
        ""
    } else {
        "sudo -n "
    };
    let script = format!(
        "exec 9>/tmp/tokentrace-chromium-install.lock && flock -w 900 9 && \
         ( test -x {CHROMIUM} || {{ export DEBIAN_FRONTEND=noninteractive; \
           {sudo}apt-get install -y -q chromium >/dev/null 2>&1 || \
           {{ {sudo}apt-get update -q >/dev/null && {sudo}apt-get install -y -q chromium; }}; }} )"
    );
    let status = Command::new("timeout")
        .args(["1200", "sh", "-c", &script])
        .status()
        .map_err(|e| format!("running apt-get: {e}"))?;
    if status.success() && path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "`apt-get install chromium` failed ({status}); install Debian's chromium package"
        ))
    }
}

/// A page as the browser left it after loading: its serialized DOM and every console message.
pub struct Loaded {
    /// `document.documentElement.outerHTML` after the scripts ran.
    pub dom: String,
    /// Console messages (`CONSOLE` lines of Chromium's log), errors included.
    pub console: Vec<String>,
}

/// The flags that keep Chromium from reaching out to the network or a profile of the user's.
fn headless(profile: &Path) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.arg(PAGE_LIMIT.as_secs().to_string())
        .arg(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()));
    cmd
}

fn url(page: &Path) -> String {
    format!("file://{}", page.display())
}

/// Loads `page` (a file) and returns its DOM and console output.
pub fn load(page: &Path) -> Loaded {
    let profile = tempfile::tempdir().unwrap();
    let out = headless(profile.path())
        .arg("--dump-dom")
        .arg(url(page))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed: {log}");
    Loaded {
        dom: String::from_utf8_lossy(&out.stdout).into_owned(),
        console: log
            .lines()
            .filter(|l| l.contains(":CONSOLE"))
            .map(str::to_string)
            .collect(),
    }
}

/// Saves a PNG of `page` at `width` x `height` CSS pixels to `png`.
pub fn screenshot(page: &Path, png: &Path, width: u32, height: u32) {
    let profile = tempfile::tempdir().unwrap();
    let out = headless(profile.path())
        .arg(format!("--window-size={width},{height}"))
        .arg("--hide-scrollbars")
        .arg(format!("--screenshot={}", png.display()))
        .arg(url(page))
        .output()
        .unwrap();
    assert!(
        out.status.success() && png.exists(),
        "chromium screenshot failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where the tests keep what a person may want to look at after a run (screenshots):
/// `target/tmp/artifacts`.
pub fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
