//! Python tools the tests read our outputs with (DuckDB and pyarrow for the exports,
//! kubernetes-validate for the manifests), each installed into a cached virtual environment.
//!
//! The environment lives outside the repository, in `$TOKENTRACE_TEST_CACHE`, else
//! `$XDG_CACHE_HOME/tokentrace-tests`, else `~/.cache/tokentrace-tests`, under a name that
//! carries the pinned versions (changing a pin makes a new one). The first test that needs it
//! creates it with `python3 -m venv` and `pip install` (about a minute); later tests and runs
//! reuse it. Tests run in parallel, so creation happens under an exclusive lock on a file
//! beside it, and every step is bounded in time. When the install fails the test fails, with
//! pip's output: a reader that is missing must never look like an export that passed.

use std::ffi::OsStr;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// DuckDB from PyPI: reads the Parquet files as users will query them.
pub const DUCKDB: &str = "1.4.4";
/// pyarrow from PyPI: reads the Parquet schema (physical types, nullability).
pub const PYARROW: &str = "21.0.0";

/// How long creating the environment may take, waiting for another test's install included.
const INSTALL_LIMIT: Duration = Duration::from_secs(900);
/// How long one script may run.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// The environment's interpreter, with DuckDB and pyarrow importable.
pub struct Python {
    /// `bin/python` of the virtual environment.
    pub exe: PathBuf,
}

/// The cached environment with DuckDB and pyarrow, created on first use. Panics (failing
/// the test) with the reason when it cannot be had.
pub fn python() -> Python {
    environment(
        &format!("py-duckdb-{DUCKDB}-pyarrow-{PYARROW}"),
        &[format!("duckdb=={DUCKDB}"), format!("pyarrow=={PYARROW}")],
        "import duckdb, pyarrow.parquet",
    )
}

/// The cached virtual environment `name` with `pins` installed, whose interpreter runs `check`
/// (a line of imports): created on first use under an exclusive lock of its own, reused while
/// its marker stands and `check` passes. Panics (failing the test) with pip's output when it
/// cannot be had.
fn environment(name: &str, pins: &[String], check: &str) -> Python {
    let root = cache_root();
    std::fs::create_dir_all(&root)
        .unwrap_or_else(|e| panic!("cannot create the test cache {}: {e}", root.display()));
    let env = root.join(name);
    let deadline = Instant::now() + INSTALL_LIMIT;
    let _lock = Lock::acquire(&root.join(format!("{name}.lock")), deadline);
    let python = Python {
        exe: env.join("bin/python"),
    };
    // The marker is written last, so an install that was cut short is redone from scratch.
    let marker = env.join(".installed");
    if marker.exists() && imports(&python.exe, check) {
        return python;
    }
    let _ = std::fs::remove_dir_all(&env);
    let log = root.join(format!("{name}-install.log"));
    let interpreter = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    run_logged(
        Command::new(&interpreter).arg("-m").arg("venv").arg(&env),
        &log,
        deadline,
        "creating the Python virtual environment (python3 -m venv)",
    );
    run_logged(
        Command::new(env.join("bin/pip"))
            .args(["install", "--disable-pip-version-check", "--no-input"])
            .args(["--timeout", "60"])
            .args(pins),
        &log,
        deadline,
        &format!("pip install {}", pins.join(" ")),
    );
    assert!(
        imports(&python.exe, check),
        "{} were installed into {} but `{check}` fails",
        pins.join(", "),
        env.display()
    );
    std::fs::write(&marker, b"ok\n").unwrap();
    python
}

impl Python {
    /// Runs `script` with `args`, asserting it succeeded; returns its standard output.
    #[track_caller]
    pub fn run(&self, script: &str, args: &[&OsStr]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
        let mut child = Command::new(&self.exe)
            .arg("-c")
            .arg(script)
            .args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.exe.display()));
        let status = super::recording::wait_bounded(&mut child, RUN_LIMIT);
        let stdout = std::fs::read_to_string(&out).unwrap();
        assert!(
            status.success(),
            "the Python check failed ({status}):\n{}\n{stdout}",
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        stdout
    }
}

/// Where the environment is kept.
fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("TOKENTRACE_TEST_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .expect("neither XDG_CACHE_HOME nor HOME is set: nowhere to keep the Python readers");
    base.join("tokentrace-tests")
}

/// Runs an install step with its output appended to `log`, failing the test with the log's
/// end when it fails or outlives `deadline`.
fn run_logged(command: &mut Command, log: &Path, deadline: Instant, what: &str) {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = command
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let tail = || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(
                status.success(),
                "{what} failed ({status}); the test needs it. Log {}:\n{}",
                log.display(),
                tail()
            );
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} did not finish within {INSTALL_LIMIT:?}. Log {}:\n{}",
                log.display(),
                tail()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An exclusive flock(2) on a file, released when dropped (or when the process dies, so a
/// killed test never leaves the cache locked).
struct Lock(std::fs::File);

impl Lock {
    fn acquire(path: &Path, deadline: Instant) -> Lock {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .unwrap();
        loop {
            // SAFETY: flock on a descriptor this process owns for the life of `file`.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Lock(file);
            }
            assert!(
                Instant::now() < deadline,
                "another test held {} for longer than {INSTALL_LIMIT:?}",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // SAFETY: as above; closing the file would release it too.
        unsafe {
            libc::flock(self.0.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

/// kubernetes-validate from PyPI: the JSON schemas of every Kubernetes minor from 1.25 on,
/// shipped in the package (no network needed to validate), with a strict variant that
/// refuses unknown fields.
pub const KUBERNETES_VALIDATE: &str = "1.37.0";
/// PyYAML, which kubernetes-validate reads manifests with and the manifest tests parse them
/// with (YAML 1.1, as Kubernetes reads it: an unquoted `off` is a boolean).
pub const PYYAML: &str = "6.0.4";
/// jsonschema, which applies the schemas.
pub const JSONSCHEMA: &str = "4.26.0";

/// The cached environment with kubernetes-validate, PyYAML and jsonschema, created on first
/// use. Panics (failing the test) with pip's output when it cannot be had.
pub fn kubernetes_validate() -> Python {
    environment(
        &format!(
            "py-kubernetes-validate-{KUBERNETES_VALIDATE}-pyyaml-{PYYAML}-jsonschema-{JSONSCHEMA}"
        ),
        &[
            format!("kubernetes-validate=={KUBERNETES_VALIDATE}"),
            format!("PyYAML=={PYYAML}"),
            format!("jsonschema=={JSONSCHEMA}"),
        ],
        "import jsonschema, kubernetes_validate, yaml",
    )
}

/// Whether `script` (a line of imports) runs to success under `exe`, within [`RUN_LIMIT`].
fn imports(exe: &Path, script: &str) -> bool {
    let Ok(mut child) = Command::new(exe)
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    super::recording::wait_bounded(&mut child, RUN_LIMIT).success()
}
