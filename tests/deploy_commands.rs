//! The command lines of the Kubernetes Jobs (deploy/kubernetes/), checked without a cluster:
//! they use only options the `tokentrace` binary lists in its `--help`, the record Job writes
//! one trace per shard into the run's directory, and the merge reads what the shards write.
//! Last, the Jobs' own command lines record a small run against the simulator, one process per
//! index, and the merge Job's script merges and analyzes it, whole and with a shard missing.
//! The manifests' schemas and structure are checked in `deploy_manifests.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::manifests::{
    assignments, at, container, documents_of, env_of, help, list, merge_script, misuse, object,
    options_of, record_args, references, run_bounded, shards, shell_variables, strings,
    tokentrace_lines, value_of, Ended, MERGE_JOB, RECORD_JOB, RUN_CONFIGMAP,
};
use common::recording::wait_bounded;
use common::BUILTIN_PROTOCOLS;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The sharded options (`--shards`, `--start-at`, `--run-id`) are checked like every other:
/// this fails until `tokentrace record --help` lists them.
#[test]
fn the_record_job_passes_only_options_that_record_lists() {
    let args = record_args();
    let options = options_of(&help("record"));
    assert!(
        options.contains_key("--url"),
        "no options parsed from the help"
    );
    let problems = misuse(&args[1..], &options, false);
    assert!(
        problems.is_empty(),
        "deploy/kubernetes/record-job.yaml passes `tokentrace record`:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_record_job_writes_one_trace_per_shard_into_the_run_directory() {
    let args = record_args();
    assert_eq!(value_of(&args, "--shards"), shards().to_string());
    assert_eq!(value_of(&args, "--start-at"), "$(START_AT)");
    assert_eq!(value_of(&args, "--run-id"), "$(RUN_ID)");
    assert!(
        !args.iter().any(|a| a == "--api-key-env"),
        "--api-key-env refuses to start without the variable, and the Secret is optional"
    );
    let output = value_of(&args, "-o");
    assert_eq!(
        output,
        "/traces/$(RUN_ID)/shard-$(JOB_COMPLETION_INDEX).ttrace"
    );
    // The run's directory is made before the recorder starts (it does not make it).
    let job = object("Job", RECORD_JOB);
    let init = container(at(job, "/spec/template/spec"), "run-dir");
    let mkdir = strings(&init["command"]);
    let parent = Path::new(output).parent().unwrap().to_str().unwrap();
    assert_eq!(mkdir, ["mkdir", "-p", parent]);
}

#[test]
fn the_merge_job_merges_what_the_shards_wrote() {
    let job = object("Job", MERGE_JOB);
    assert_eq!(
        job["spec"]["suspend"], true,
        "the merge must wait to be resumed"
    );
    assert!(
        job["spec"]["completionMode"].is_null() || job["spec"]["completionMode"] == "NonIndexed"
    );
    let script = merge_script();
    assert!(
        references(&script).is_empty() && !script.contains("$("),
        "Kubernetes would expand $(...) in the script before the shell sees it"
    );
    let syntax = run_bounded(
        Command::new("sh").args(["-n", "-c", &script]),
        Duration::from_secs(30),
    );
    assert_eq!(
        syntax.code,
        Some(0),
        "the merge script is not valid sh:\n{}",
        syntax.stderr
    );
    assert!(
        script.contains("set -eu"),
        "the script must stop at the first failure"
    );

    // Every variable it reads is its own or the container's.
    let merge = &list(at(job, "/spec/template/spec/containers"))[0];
    let env = env_of(merge);
    let own: BTreeSet<String> = assignments(&script).into_iter().map(|(n, _)| n).collect();
    for name in shell_variables(&script) {
        assert!(
            own.contains(&name) || env.contains_key(&name),
            "the merge script reads ${name}, which nothing sets"
        );
    }
    let run_id = &env["RUN_ID"]["valueFrom"]["configMapKeyRef"];
    assert_eq!(run_id["name"], RUN_CONFIGMAP);
    assert_eq!(run_id["key"], "RUN_ID");

    let lines = tokentrace_lines(&script);
    let [merge_line, analyze_line] = &lines[..] else {
        panic!("expected `tokentrace merge` then `tokentrace analyze`: {lines:?}")
    };
    assert_eq!(merge_line[1], "merge");
    assert_eq!(analyze_line[1], "analyze");
    assert_eq!(
        value_of(merge_line, "--expect-shards"),
        shards().to_string(),
        "--expect-shards must be the record Job's completions"
    );
    // The shards' glob is the record Job's output with the index as `*`.
    let record_output = record_args();
    let record_output = value_of(&record_output, "-o")
        .replace("$(RUN_ID)", "$RUN_ID")
        .replace("$(JOB_COMPLETION_INDEX)", "*");
    assert_eq!(merge_line[2], record_output);
    let merged = value_of(merge_line, "-o");
    assert_eq!(merged, "/traces/$RUN_ID/run.ttrace");
    assert_eq!(analyze_line[2], merged, "analyze reads the merged run");
    let protocol = value_of(analyze_line, "--protocol");
    assert!(BUILTIN_PROTOCOLS.contains(&protocol), "{protocol}");
    assert_eq!(value_of(analyze_line, "--format"), "json");
    assert_eq!(value_of(analyze_line, "-o"), "/traces/$RUN_ID/report.json");
    let claim = list(at(job, "/spec/template/spec/volumes"))
        .iter()
        .find(|v| v["name"] == "traces")
        .expect("a volume named traces");
    assert_eq!(
        claim["persistentVolumeClaim"]["claimName"],
        documents_of("traces-pvc.yaml")[0]["metadata"]["name"]
    );
}

/// `tokentrace merge` is being added: this fails until `tokentrace merge --help` exists and
/// lists what the merge Job passes.
#[test]
fn the_merge_job_passes_only_options_that_merge_and_analyze_list() {
    let lines = tokentrace_lines(&merge_script());
    let mut problems = Vec::new();
    for line in &lines {
        let subcommand = &line[1];
        let options = options_of(&help(subcommand));
        assert!(
            options.contains_key("--help"),
            "no options parsed from {subcommand} --help"
        );
        problems.extend(
            misuse(&line[2..], &options, true)
                .into_iter()
                .map(|p| format!("tokentrace {subcommand}: {p}")),
        );
    }
    assert!(
        problems.is_empty(),
        "deploy/kubernetes/merge-job.yaml passes:\n  {}",
        problems.join("\n  ")
    );
}

/// Unix seconds as the RFC 3339 UTC text `--start-at` takes (the format crate's formatter).
fn rfc3339_utc(unix_s: u64) -> String {
    tokentrace_format::clock::utc_iso8601(unix_s * 1_000_000_000)
}

/// `$(NAME)` replaced by the variable's value, as Kubernetes does.
fn expand(word: &str, env: &BTreeMap<&str, String>) -> String {
    let mut word = word.to_owned();
    for (name, value) in env {
        word = word.replace(&format!("$({name})"), value);
    }
    word
}

/// The Jobs' own command lines, run as the pods would run them with the traces volume in a
/// temporary directory: the record Job's init and record containers once per index (only
/// the target and the load's size changed, to a simulator and a small run), then the merge
/// Job's script with the real binary on PATH, for a whole run and for one with a shard gone.
#[test]
fn the_jobs_command_lines_record_and_merge_a_run() {
    assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339_utc(951_827_696), "2000-02-29T12:34:56Z");
    assert_eq!(rfc3339_utc(1_764_590_400), "2025-12-01T12:00:00Z");

    let server = common::recording::sim(common::recording::fast_sim());
    let volume = tempfile::tempdir().unwrap();
    let traces = format!("{}/", volume.path().display());
    let on_volume = |path: &str| path.replacen("/traces/", &traces, 1);

    let mut args = record_args();
    let scaled = [
        ("--url", server.base_url()),
        ("--requests", "16".to_owned()),
        ("--concurrency", "8".to_owned()),
        ("--input-tokens", "32".to_owned()),
        ("--max-tokens", "8".to_owned()),
    ];
    for (flag, value) in scaled {
        let i = args
            .iter()
            .position(|a| a == flag)
            .unwrap_or_else(|| panic!("the record Job passes no {flag}"));
        args[i + 1] = value;
    }
    let job = object("Job", RECORD_JOB);
    let pod = at(job, "/spec/template/spec");
    let mkdir = strings(&container(pod, "run-dir")["command"]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let n = shards();
    let mut env = BTreeMap::from([
        ("START_AT", rfc3339_utc(now + 4)),
        ("RUN_ID", "deploy-test".to_owned()),
    ]);
    let bin = assert_cmd::cargo::cargo_bin("tokentrace");
    let mut children = Vec::new();
    for i in 0..n {
        env.insert("JOB_COMPLETION_INDEX", i.to_string());
        let init = run_bounded(
            Command::new(&mkdir[0]).args(mkdir[1..].iter().map(|w| on_volume(&expand(w, &env)))),
            Duration::from_secs(30),
        );
        assert_eq!(init.code, Some(0), "{}", init.stderr);
        let argv: Vec<String> = args.iter().map(|w| on_volume(&expand(w, &env))).collect();
        let dir = tempfile::tempdir().unwrap();
        let err = dir.path().join("stderr");
        let child = Command::new(&bin)
            .args(&argv)
            .env_remove("OPENAI_API_KEY")
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        children.push((child, dir, err, argv));
    }
    for (mut child, _dir, err, argv) in children {
        let status = wait_bounded(&mut child, Duration::from_secs(120));
        assert!(
            status.success(),
            "tokentrace {argv:?} failed ({status}):\n{}",
            std::fs::read_to_string(&err).unwrap()
        );
    }
    let run_dir = volume.path().join("deploy-test");
    for i in 0..n {
        assert!(run_dir.join(format!("shard-{i}.ttrace")).is_file());
    }

    let script = merge_script().replace("/traces/", &traces);
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let merge = || {
        run_bounded(
            Command::new("sh")
                .args(["-c", &script])
                .env("PATH", &path)
                .env("RUN_ID", "deploy-test"),
            Duration::from_secs(120),
        )
    };
    let report = |ended: &Ended| {
        let text = std::fs::read_to_string(run_dir.join("report.json")).unwrap_or_else(|e| {
            panic!("no report.json ({e}):\n{}\n{}", ended.stdout, ended.stderr)
        });
        serde_json::from_str::<Value>(&text).unwrap()
    };

    let whole = merge();
    assert_eq!(whole.code, Some(0), "{}\n{}", whole.stdout, whole.stderr);
    assert!(!whole.stdout.contains("PARTIAL"), "{}", whole.stdout);
    assert!(run_dir.join("run.ttrace").is_file());
    let whole_report = report(&whole);

    // A shard lost: the merge names it, the run is analyzed as partial, the Job completes.
    std::fs::remove_file(run_dir.join(format!("shard-{}.ttrace", n - 1))).unwrap();
    let partial = merge();
    assert_eq!(
        partial.code,
        Some(0),
        "{}\n{}",
        partial.stdout,
        partial.stderr
    );
    assert!(partial.stdout.contains("PARTIAL RUN"), "{}", partial.stdout);
    assert!(
        partial.stderr.contains(&format!("missing shard {}", n - 1)),
        "{}",
        partial.stderr
    );
    assert_ne!(
        report(&partial),
        whole_report,
        "the report of the partial run replaced the whole one"
    );

    // With no shard at all there is no run: the Job fails.
    for i in 0..n - 1 {
        std::fs::remove_file(run_dir.join(format!("shard-{i}.ttrace"))).unwrap();
    }
    let none = merge();
    assert_eq!(none.code, Some(2), "{}\n{}", none.stdout, none.stderr);
    assert!(
        !run_dir.join("report.json").exists(),
        "a stale report outlived a failed merge"
    );
}
