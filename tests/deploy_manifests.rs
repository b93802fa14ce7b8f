//! The Kubernetes deployment (deploy/kubernetes/) and its image (deploy/Dockerfile), checked
//! without a cluster or Docker. Every YAML document is validated against the schemas of
//! Kubernetes 1.30 in strict mode, where an unknown field is an error (kubernetes-validate
//! from PyPI, which ships the schemas). Then what no schema says: the record Job is an Indexed
//! Job that never runs a shard twice, every `$(VAR)` it passes is defined, the kustomization
//! cannot start the merge while the shards run, the image runs as the user the pods expect,
//! and the guide names the objects the manifests define. The Jobs' command lines are checked,
//! and run against the simulator, in `deploy_commands.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::manifests::{
    at, container, containers, documents_of, env_of, kubernetes_dir, list, manifests, object,
    references, root, shards, str_at, strings, validator, KUBERNETES, MERGE_JOB, RECORD_JOB,
    RUN_CONFIGMAP,
};
use common::python_tools;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::ffi::OsStr;

/// The files of deploy/kubernetes/, each of which must be there.
const FILES: [&str; 7] = [
    "fetch-pod.yaml",
    "kustomization.yaml",
    "merge-job.yaml",
    "namespace.yaml",
    "record-job.yaml",
    "run-configmap.yaml",
    "traces-pvc.yaml",
];

/// The files kustomization.yaml leaves out on purpose, applied on their own: the run's
/// ConfigMap (created anew before each run) and the pod that copies the results off.
const APPLIED_SEPARATELY: [&str; 2] = ["run-configmap.yaml", "fetch-pod.yaml"];

/// Where the downward API finds an Indexed Job pod's index.
const INDEX_FIELD: &str = "metadata.annotations['batch.kubernetes.io/job-completion-index']";

/// Validates each document of a JSON list (file in argv[2]) in strict mode; prints, per
/// document, null when it passed or the error.
const VALIDATE_JSON: &str = r#"
import json, sys
import kubernetes_validate as kv
verdicts = []
for doc in json.load(open(sys.argv[2])):
    try:
        kv.validate(doc, sys.argv[1], strict=True)
        verdicts.append(None)
    except kv.ValidationError as e:
        verdicts.append(".".join(str(p) for p in e.path) + ": " + e.message)
print(json.dumps(verdicts))
"#;

#[test]
fn every_manifest_is_valid_kubernetes_1_30_in_strict_mode() {
    let dir = kubernetes_dir();
    for file in FILES {
        assert!(
            dir.join(file).is_file(),
            "deploy/kubernetes/{file} is missing"
        );
    }
    let manifests = manifests();
    assert_eq!(manifests.validator, python_tools::KUBERNETES_VALIDATE);
    assert!(
        manifests.errors.is_empty(),
        "deploy/kubernetes/ is not valid Kubernetes {KUBERNETES} (strict):\n{}",
        manifests.errors.join("\n")
    );
    for document in &manifests.documents {
        let expected = if document.doc["kind"] == "Kustomization" {
            "kustomize"
        } else {
            KUBERNETES
        };
        assert_eq!(
            document.schema.as_deref(),
            Some(expected),
            "{} ({}) was not validated",
            document.file,
            document.doc["kind"]
        );
    }
    let kinds: BTreeSet<(&str, &str)> = manifests
        .documents
        .iter()
        .map(|d| (d.doc["kind"].as_str().unwrap(), d.file.as_str()))
        .collect();
    for expected in [
        ("Namespace", "namespace.yaml"),
        ("PersistentVolumeClaim", "traces-pvc.yaml"),
        ("Job", "record-job.yaml"),
        ("Job", "merge-job.yaml"),
        ("ConfigMap", "run-configmap.yaml"),
        ("Pod", "fetch-pod.yaml"),
        ("Kustomization", "kustomization.yaml"),
    ] {
        assert!(
            kinds.contains(&expected),
            "{expected:?} not found in {kinds:?}"
        );
    }
}

/// The validation above means something only if the validator refuses what Kubernetes
/// would: an unknown field, a number where a string must be, and the boolean an unquoted
/// YAML `off` becomes.
#[test]
fn the_validator_refuses_what_kubernetes_would() {
    let job = object("Job", RECORD_JOB).clone();
    let mut unknown = job.clone();
    unknown["spec"]["template"]["spec"]["containers"][0]["argz"] = json!(["record"]);
    let mut typo = job.clone();
    typo["spec"]["completionsMode"] = json!("Indexed");
    let mut number = job.clone();
    number["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["record", "--shards", 4]);
    let mut boolean = job.clone();
    boolean["spec"]["template"]["spec"]["containers"][0]["args"] =
        json!(["record", "--progress", false]);
    let documents = json!([job, unknown, typo, number, boolean]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("documents.json");
    std::fs::write(&path, documents.to_string()).unwrap();
    let verdicts: Value = serde_json::from_str(
        &validator().run(VALIDATE_JSON, &[OsStr::new(KUBERNETES), path.as_os_str()]),
    )
    .unwrap();
    let verdicts = list(&verdicts);
    assert!(
        verdicts[0].is_null(),
        "the record Job itself: {}",
        verdicts[0]
    );
    for (i, what) in [
        (1, "an unknown container field"),
        (2, "an unknown Job field"),
        (3, "a number in args"),
        (4, "a boolean in args"),
    ] {
        assert!(verdicts[i].is_string(), "{what} passed validation");
    }
}

#[test]
fn the_record_job_is_indexed_and_never_runs_a_shard_twice() {
    let job = object("Job", RECORD_JOB);
    let spec = at(job, "/spec");
    assert_eq!(spec["completionMode"], "Indexed");
    let n = shards();
    assert!(n >= 1);
    assert_eq!(spec["parallelism"], n, "every shard must run at once");
    // A failed shard stays failed: either per index (the other shards go on) or, on clusters
    // without it, for the whole Job.
    match spec.get("backoffLimitPerIndex") {
        Some(limit) => {
            assert_eq!(limit, 0, "a failed shard must not be run again");
            assert!(
                spec.get("maxFailedIndexes").is_none(),
                "every shard must run even when one failed"
            );
        }
        None => assert_eq!(
            spec["backoffLimit"], 0,
            "a failed shard must not be run again"
        ),
    }
    if let Some(policy) = spec.get("podFailurePolicy") {
        assert!(
            list(&policy["rules"])
                .iter()
                .all(|r| r["action"] != "Ignore"),
            "an Ignore rule re-creates the pod, which would then start late"
        );
    }
    assert!(
        spec["activeDeadlineSeconds"].as_u64().is_some(),
        "the Job must be bounded in time"
    );
    let pod = at(job, "/spec/template/spec");
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);

    // Anti-affinity: preferred (never leaving a shard Pending), one shard per node, on the
    // shards' own labels.
    let labels = at(job, "/spec/template/metadata/labels")
        .as_object()
        .unwrap();
    let preferred = list(at(
        pod,
        "/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution",
    ));
    assert!(pod["affinity"]["podAntiAffinity"]
        .get("requiredDuringSchedulingIgnoredDuringExecution")
        .is_none());
    assert!(
        preferred.iter().any(|term| {
            let term = &term["podAffinityTerm"];
            term["topologyKey"] == "kubernetes.io/hostname"
                && term["labelSelector"]["matchLabels"]
                    .as_object()
                    .is_some_and(|m| {
                        !m.is_empty() && m.iter().all(|(k, v)| labels.get(k) == Some(v))
                    })
        }),
        "no anti-affinity term spreads the shards over nodes: {preferred:#?}"
    );

    let record = container(pod, "record");
    for kind in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                record["resources"][kind][resource].is_string(),
                "the record container has no {kind}.{resource}"
            );
        }
    }
    assert_eq!(
        record["resources"]["requests"], record["resources"]["limits"],
        "requests = limits (Guaranteed QoS), as the comment sizing them says"
    );

    let env = env_of(record);
    for key in ["START_AT", "RUN_ID"] {
        let source = &env
            .get(key)
            .unwrap_or_else(|| panic!("{key} is not in the record container's env"))["valueFrom"]
            ["configMapKeyRef"];
        assert_eq!(source["name"], RUN_CONFIGMAP, "{key}");
        assert_eq!(source["key"], key);
        assert!(
            source.get("optional").is_none_or(|o| o == false),
            "{key} must be required"
        );
    }
    if let Some(index) = env.get("JOB_COMPLETION_INDEX") {
        assert_eq!(index["valueFrom"]["fieldRef"]["fieldPath"], INDEX_FIELD);
    }
    let secrets: Vec<&Value> = env
        .values()
        .map(|v| &v["valueFrom"]["secretKeyRef"])
        .filter(|s| s.is_object())
        .collect();
    assert_eq!(secrets.len(), 1, "one API key from a Secret");
    assert_eq!(secrets[0]["optional"], true);

    // The traces volume: the claim of traces-pvc.yaml, shared by every node's pods.
    let pvc = &documents_of("traces-pvc.yaml")[0];
    assert!(list(at(pvc, "/spec/accessModes")).contains(&json!("ReadWriteMany")));
    let claim = list(at(pod, "/volumes"))
        .iter()
        .find(|v| v["name"] == "traces")
        .expect("a volume named traces");
    assert_eq!(
        claim["persistentVolumeClaim"]["claimName"],
        pvc["metadata"]["name"]
    );
    for c in containers(pod) {
        assert!(
            list(&c["volumeMounts"])
                .iter()
                .any(|m| m["name"] == "traces" && m["mountPath"] == "/traces"),
            "{} does not mount the traces at /traces",
            c["name"]
        );
    }
}

/// Kubernetes expands `$(NAME)` in command and args from the container's variables and
/// leaves an undefined one as it is, silently: a typo would become a literal argument.
#[test]
fn every_variable_the_pods_pass_is_defined() {
    for document in &manifests().documents {
        let doc = &document.doc;
        let pod = match doc["kind"].as_str() {
            Some("Job") => at(doc, "/spec/template/spec"),
            Some("Pod") => &doc["spec"],
            _ => continue,
        };
        let indexed = doc["spec"]["completionMode"] == "Indexed";
        for c in containers(pod) {
            let env = env_of(c);
            for key in ["command", "args"] {
                let Some(words) = c.get(key) else { continue };
                for word in strings(words) {
                    for name in references(&word) {
                        assert!(
                            env.contains_key(&name) || (indexed && name == "JOB_COMPLETION_INDEX"),
                            "{}: container {} passes $({name}), which it does not define",
                            document.file,
                            c["name"]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn the_kustomization_applies_the_jobs_without_a_race() {
    let kustomization = documents_of("kustomization.yaml")[0];
    let resources = strings(at(kustomization, "/resources"));
    let dir = kubernetes_dir();
    for resource in &resources {
        assert!(
            dir.join(resource).is_file(),
            "kustomization.yaml lists {resource}, not a file here"
        );
    }
    let files: BTreeSet<&str> = manifests()
        .documents
        .iter()
        .map(|d| d.file.as_str())
        .chain(FILES)
        .collect();
    for file in files {
        let listed = resources.iter().any(|r| r == file);
        let separate = APPLIED_SEPARATELY.contains(&file) || file == "kustomization.yaml";
        assert!(
            listed != separate,
            "{file}: kustomization.yaml must list it unless it is applied on its own \
             (APPLIED_SEPARATELY), and then must not"
        );
    }
    // Namespace: the kustomization's, the Namespace object's and every object's own.
    let namespace = str_at(kustomization, "/namespace");
    assert_eq!(
        documents_of("namespace.yaml")[0]["metadata"]["name"],
        namespace
    );
    for document in &manifests().documents {
        let kind = document.doc["kind"].as_str().unwrap();
        if kind == "Namespace" || kind == "Kustomization" {
            continue;
        }
        assert_eq!(
            document.doc["metadata"]["namespace"], namespace,
            "{} ({kind}) must name the namespace, so that it also works with `kubectl apply -f`",
            document.file
        );
    }
    // Of the Jobs it starts, only the record Job may run at once; the merge waits.
    let mut images = BTreeSet::new();
    for resource in &resources {
        for doc in documents_of(resource) {
            if doc["kind"] == "Job" {
                let suspended = doc["spec"]["suspend"] == true;
                let record = doc["metadata"]["name"] == RECORD_JOB;
                assert!(
                    record != suspended,
                    "{resource}: a Job applied with the record Job must start suspended, the record Job not"
                );
                for c in containers(at(doc, "/spec/template/spec")) {
                    let image = c["image"].as_str().unwrap();
                    images.insert(
                        image
                            .rsplit_once(':')
                            .map_or(image, |(name, _)| name)
                            .to_owned(),
                    );
                }
            }
        }
    }
    let set: BTreeSet<String> = list(at(kustomization, "/images"))
        .iter()
        .map(|i| str_at(i, "/name").to_owned())
        .collect();
    assert_eq!(
        images, set,
        "the kustomization's images are those of its Jobs"
    );
    assert!(set.contains("ghcr.io/OWNER/tokentrace"));

    // The run's ConfigMap carries what both Jobs read.
    let run = object("ConfigMap", RUN_CONFIGMAP);
    let start = str_at(run, "/data/START_AT");
    let shape: String = start
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    assert_eq!(
        shape, "9999-99-99T99:99:99Z",
        "START_AT {start:?} is not RFC 3339 UTC"
    );
    let run_id = str_at(run, "/data/RUN_ID");
    assert!(
        !run_id.is_empty()
            && run_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
        "RUN_ID {run_id:?} names a directory"
    );
}

#[test]
fn the_dockerfile_builds_the_binary_and_runs_it_as_the_pods_user() {
    let dockerfile = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let instructions: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let froms: Vec<&str> = instructions
        .iter()
        .copied()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert_eq!(
        froms.len(),
        2,
        "a build stage and a runtime stage: {froms:?}"
    );
    let build_stage = froms[0]
        .strip_prefix("FROM rust:1-bookworm AS ")
        .unwrap_or_else(|| panic!("builder is not rust:1-bookworm: {}", froms[0]));
    assert_eq!(froms[1], "FROM debian:bookworm-slim");
    assert!(dockerfile.contains("cargo build --release --locked --bin tokentrace"));
    assert!(dockerfile.contains("--no-install-recommends ca-certificates"));
    assert!(
        instructions
            .iter()
            .any(|l| l.starts_with(&format!("COPY --from={build_stage} "))
                && l.ends_with("/usr/local/bin/tokentrace")),
        "the runtime stage copies the built binary"
    );
    assert_eq!(
        instructions
            .iter()
            .rev()
            .find(|l| l.starts_with("ENTRYPOINT")),
        Some(&r#"ENTRYPOINT ["tokentrace"]"#)
    );
    // The last USER is numeric and not root, and is the pods' runAsUser.
    let user = instructions
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("the image sets a USER");
    let (uid, gid) = user.split_once(':').unwrap_or((user, user));
    let uid: u64 = uid
        .parse()
        .expect("a numeric uid, so runAsNonRoot can check it");
    assert_ne!(uid, 0);
    for name in [RECORD_JOB, MERGE_JOB] {
        let context = at(object("Job", name), "/spec/template/spec/securityContext");
        assert_eq!(context["runAsUser"], uid, "{name}");
        assert_eq!(context["runAsGroup"].to_string(), gid, "{name}");
        assert_eq!(context["fsGroup"].to_string(), gid, "{name}");
    }
    // The build context (the repository root) leaves the build output and history out.
    let ignore = std::fs::read_to_string(root().join("deploy/Dockerfile.dockerignore")).unwrap();
    let ignored: BTreeSet<&str> = ignore.lines().map(str::trim).collect();
    assert!(
        ignored.contains("target") && ignored.contains(".git"),
        "{ignore}"
    );
}

/// The guide's commands, in docs/SCALE.md, name the objects the manifests define.
#[test]
fn the_guide_names_the_objects_the_manifests_define() {
    let guide = std::fs::read_to_string(root().join("docs/SCALE.md"))
        .unwrap_or_else(|e| panic!("docs/SCALE.md, the guide to deploy/kubernetes: {e}"));
    for needle in [
        format!("kubectl -n tokentrace create configmap {RUN_CONFIGMAP}"),
        "--from-literal=START_AT=".to_owned(),
        "--from-literal=RUN_ID=".to_owned(),
        "kubectl apply -k deploy/kubernetes".to_owned(),
        format!("job/{RECORD_JOB}"),
        format!("kubectl -n tokentrace patch job {MERGE_JOB}"),
        format!("job/{MERGE_JOB}"),
        "deploy/kubernetes/fetch-pod.yaml".to_owned(),
    ] {
        assert!(guide.contains(&needle), "the guide does not say `{needle}`");
    }
}
