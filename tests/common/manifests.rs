//! The `deploy_manifests` and `deploy_commands` tests' side of the shared code:
//! deploy/kubernetes/ parsed and validated once per test binary (kubernetes-validate from
//! PyPI, strict mode), readings of its objects, containers and variables, the options a
//! `tokentrace SUBCOMMAND --help` lists, the Jobs' command lines and the merge Job's shell
//! script, and a command run to its end within a bound.

use super::python_tools::{self, Python};
use super::recording::wait_bounded;
use super::tokentrace;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The Kubernetes minor the manifests are validated against.
pub const KUBERNETES: &str = "1.30";

/// The record Job's name (an Indexed Job, pod I of N recording shard I); the manifests name
/// each other by these.
pub const RECORD_JOB: &str = "tokentrace-record";
/// The merge Job's name (started suspended, resumed once the shards are done).
pub const MERGE_JOB: &str = "tokentrace-merge";
/// The name of the run's ConfigMap (`START_AT`, `RUN_ID`), which both Jobs read.
pub const RUN_CONFIGMAP: &str = "tokentrace-run";

/// Validates every file named on the command line (after the Kubernetes version) with
/// kubernetes-validate in strict mode and prints each document with its verdict as JSON.
/// Kustomization documents are not Kubernetes API objects and have no schema: they are
/// passed through for the Rust checks.
pub const VALIDATE: &str = r#"
import json, sys
import yaml
import kubernetes_validate as kv
version = sys.argv[1]
out = {"validator": kv.__version__, "documents": [], "errors": []}
for path in sys.argv[2:]:
    with open(path) as f:
        docs = list(yaml.safe_load_all(f))
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            out["errors"].append(f"{path}: document {i} is not a mapping: {doc!r}")
            continue
        entry = {"file": path, "doc": doc, "schema": None}
        if str(doc.get("apiVersion", "")).startswith("kustomize.config.k8s.io/"):
            entry["schema"] = "kustomize"
        else:
            try:
                entry["schema"] = kv.validate(doc, version, strict=True)
            except kv.ValidationError as e:
                where = ".".join(str(p) for p in e.path)
                out["errors"].append(f"{path} ({doc.get('kind')}): {where}: {e.message}")
            except kv.SchemaNotFoundError as e:
                out["errors"].append(f"{path}: {e.message}")
        out["documents"].append(entry)
print(json.dumps(out, default=str))
"#;

/// One YAML document of deploy/kubernetes/.
pub struct Document {
    /// The file's name, e.g. `record-job.yaml`.
    pub file: String,
    /// The document itself.
    pub doc: Value,
    /// The Kubernetes minor it was validated against, or `kustomize`.
    pub schema: Option<String>,
}

/// deploy/kubernetes/ parsed and validated once per test binary.
pub struct Manifests {
    /// The version of kubernetes-validate that validated them.
    pub validator: String,
    /// Every document of every file, in file order.
    pub documents: Vec<Document>,
    /// What the validator refused, one line per error.
    pub errors: Vec<String>,
}

/// The repository root, where deploy/ and docs/ are.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// deploy/kubernetes/, the manifests' directory.
pub fn kubernetes_dir() -> PathBuf {
    root().join("deploy/kubernetes")
}

/// The validator's environment, installed on first use.
pub fn validator() -> &'static Python {
    static PYTHON: OnceLock<Python> = OnceLock::new();
    PYTHON.get_or_init(python_tools::kubernetes_validate)
}

/// deploy/kubernetes/ (every `.yaml`/`.yml` file), parsed and validated on first use.
pub fn manifests() -> &'static Manifests {
    static MANIFESTS: OnceLock<Manifests> = OnceLock::new();
    MANIFESTS.get_or_init(|| {
        let dir = kubernetes_dir();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
            .collect();
        files.sort();
        let mut args = vec![OsStr::new(KUBERNETES)];
        args.extend(files.iter().map(|p| p.as_os_str()));
        let out: Value = serde_json::from_str(&validator().run(VALIDATE, &args)).unwrap();
        let documents = out["documents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| Document {
                file: Path::new(d["file"].as_str().unwrap())
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
                doc: d["doc"].clone(),
                schema: d["schema"].as_str().map(str::to_owned),
            })
            .collect();
        Manifests {
            validator: out["validator"].as_str().unwrap().to_owned(),
            documents,
            errors: out["errors"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e.as_str().unwrap().to_owned())
                .collect(),
        }
    })
}

/// The documents of one file.
pub fn documents_of(file: &str) -> Vec<&'static Value> {
    let docs: Vec<&Value> = manifests()
        .documents
        .iter()
        .filter(|d| d.file == file)
        .map(|d| &d.doc)
        .collect();
    assert!(!docs.is_empty(), "deploy/kubernetes/{file} has no document");
    docs
}

/// The one object of `kind` named `name`.
pub fn object(kind: &str, name: &str) -> &'static Value {
    let found: Vec<&Value> = manifests()
        .documents
        .iter()
        .map(|d| &d.doc)
        .filter(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "expected one {kind} named {name}");
    found[0]
}

/// The value at a JSON pointer, which must be there.
#[track_caller]
pub fn at<'a>(value: &'a Value, pointer: &str) -> &'a Value {
    value
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{pointer} is missing in {value:#}"))
}

/// The string at a JSON pointer, which must be there.
#[track_caller]
pub fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    at(value, pointer)
        .as_str()
        .unwrap_or_else(|| panic!("{pointer} is not a string"))
}

/// The elements of a value that must be a list.
#[track_caller]
pub fn list(value: &Value) -> &Vec<Value> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
}

/// Strings of a list of strings (a container's command or args).
#[track_caller]
pub fn strings(value: &Value) -> Vec<String> {
    list(value)
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("not a string: {v} (Kubernetes wants strings here)"))
                .to_owned()
        })
        .collect()
}

/// Every container of a pod spec, init containers first.
pub fn containers(pod_spec: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for key in ["initContainers", "containers"] {
        if let Some(list) = pod_spec[key].as_array() {
            all.extend(list.iter());
        }
    }
    all
}

/// The container named `name` of a pod spec.
#[track_caller]
pub fn container<'a>(pod_spec: &'a Value, name: &str) -> &'a Value {
    containers(pod_spec)
        .into_iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// A container's variables by name.
pub fn env_of(container: &Value) -> BTreeMap<String, &Value> {
    container["env"]
        .as_array()
        .map(|env| {
            env.iter()
                .map(|v| (v["name"].as_str().unwrap().to_owned(), v))
                .collect()
        })
        .unwrap_or_default()
}

/// The `$(NAME)` references in `text` (`$$(` is an escaped, literal `$(`).
pub fn references(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("$(") {
        let escaped = rest[..at].ends_with('$');
        rest = &rest[at + 2..];
        if let (false, Some(end)) = (escaped, rest.find(')')) {
            found.push(rest[..end].to_owned());
        }
    }
    found
}

/// The shard count N of the record Job.
pub fn shards() -> u64 {
    let job = object("Job", RECORD_JOB);
    at(job, "/spec/completions").as_u64().unwrap()
}

/// `tokentrace SUBCOMMAND --help`, which must succeed.
pub fn help(subcommand: &str) -> String {
    let out = tokentrace()
        .args([subcommand, "--help"])
        .env("COLUMNS", "200")
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`tokentrace {subcommand} --help` failed ({}), so its options cannot be checked:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The options a clap `--help` text lists, each with whether it takes a value. An option's
/// line is indented by at most 6 spaces and starts with `-`; its names and `<VALUE>` come
/// before the first double space (what follows is its description).
pub fn options_of(help: &str) -> BTreeMap<String, bool> {
    let mut options = BTreeMap::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let named = trimmed.starts_with("--")
            || (trimmed.starts_with('-') && trimmed[1..].starts_with(char::is_alphanumeric));
        if indent == 0 || indent > 6 || !named {
            continue;
        }
        let spec = trimmed.split("  ").next().unwrap();
        let takes_value = spec.contains('<');
        for name in spec.split([',', ' ']) {
            if name.starts_with('-') && name.len() > 1 {
                options.insert(name.to_owned(), takes_value);
            }
        }
    }
    options
}

/// What is wrong with `args` as the arguments of a subcommand with `options`: options it
/// does not list, values missing or given to a flag, positional arguments where it takes
/// none.
pub fn misuse(args: &[String], options: &BTreeMap<String, bool>, positionals: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if !arg.starts_with('-') || arg == "-" {
            if !positionals {
                problems.push(format!(
                    "positional argument {arg:?}, which it does not take"
                ));
            }
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((name, _)) => (name, true),
            None => (arg.as_str(), false),
        };
        match options.get(name) {
            None => problems.push(format!("{name}, which it does not list")),
            Some(true) if !inline => match args.get(i) {
                Some(value) if !value.starts_with("--") => i += 1,
                _ => problems.push(format!("{name} without its value")),
            },
            Some(false) if inline => problems.push(format!("{name} with a value it takes none")),
            Some(_) => {}
        }
    }
    problems
}

/// The value after `flag` in `args`.
#[track_caller]
pub fn value_of<'a>(args: &'a [String], flag: &str) -> &'a str {
    let i = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("{flag} is not passed: {args:?}"));
    args.get(i + 1)
        .unwrap_or_else(|| panic!("{flag} has no value"))
}

/// The record Job's `record` container arguments.
pub fn record_args() -> Vec<String> {
    let job = object("Job", RECORD_JOB);
    let record = container(at(job, "/spec/template/spec"), "record");
    assert!(
        record.get("command").is_none(),
        "the record container must run the image's entrypoint (tokentrace)"
    );
    let args = strings(&record["args"]);
    assert_eq!(args.first().map(String::as_str), Some("record"), "{args:?}");
    args
}

/// The merge Job's shell script: the container runs `sh -c SCRIPT`.
pub fn merge_script() -> String {
    let job = object("Job", MERGE_JOB);
    let merge = &list(at(job, "/spec/template/spec/containers"))[0];
    let mut line = strings(&merge["command"]);
    if let Some(args) = merge.get("args") {
        line.extend(strings(args));
    }
    assert_eq!(
        &line[..2],
        ["sh", "-c"],
        "the merge runs through `sh -c` (for the glob): {line:?}"
    );
    assert_eq!(line.len(), 3, "one script after `sh -c`: {line:?}");
    line[2].clone()
}

/// The `NAME=value` assignments at the start of a line of `script`, quotes removed.
pub fn assignments(script: &str) -> Vec<(String, String)> {
    script
        .lines()
        .filter_map(|line| line.trim().split_once('='))
        .filter(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .map(|(name, value)| (name.to_owned(), value.trim_matches('"').to_owned()))
        .collect()
}

/// The script's `tokentrace` command lines (continuations joined, up to the first `||`,
/// `&&`, `|` or `;`), split into words with the script's own assignments substituted and
/// quotes removed.
pub fn tokentrace_lines(script: &str) -> Vec<Vec<String>> {
    let assigned = assignments(script);
    let mut lines = Vec::new();
    for line in script.replace("\\\n", " ").lines().map(str::trim) {
        if line.starts_with("tokentrace ") {
            let words = line
                .split_whitespace()
                .take_while(|word| !["||", "&&", "|", ";"].contains(word))
                .map(|word| {
                    let mut word = word.replace('"', "");
                    for (name, value) in &assigned {
                        word = word.replace(&format!("${name}"), value);
                    }
                    word
                })
                .collect();
            lines.push(words);
        }
    }
    lines
}

/// The shell variables a script reads (`$NAME` or `${NAME}`).
pub fn shell_variables(script: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, _) in script.match_indices('$') {
        let rest = script[i + 1..].trim_start_matches('{');
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            names.insert(name);
        }
    }
    names
}

/// How a command ended: its exit code, stdout and stderr.
pub struct Ended {
    /// The exit code, `None` when a signal ended it.
    pub code: Option<i32>,
    /// What it wrote to stdout.
    pub stdout: String,
    /// What it wrote to stderr.
    pub stderr: String,
}

/// Runs a command to its end within `limit`.
pub fn run_bounded(command: &mut Command, limit: Duration) -> Ended {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = command
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let status = wait_bounded(&mut child, limit);
    Ended {
        code: status.code(),
        stdout: std::fs::read_to_string(&out).unwrap(),
        stderr: std::fs::read_to_string(&err).unwrap(),
    }
}
