//! docs/PROTOCOLS.md carries every built-in protocol's generated methodology verbatim.
//! `UPDATE_PROTOCOLS_DOC=1 cargo test -p tokentrace-analyzer --test protocols_doc` rewrites the
//! generated blocks from the definitions.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use tokentrace_analyzer::methodology;
use tokentrace_analyzer::protocol::builtin;

fn doc_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/PROTOCOLS.md")
}

/// The generated block of one protocol, markers included.
fn block(name: &str) -> String {
    let protocol = builtin::find(name).unwrap();
    let mut s = format!("<!-- generated:{name} -->\n```text\n");
    for (key, text) in methodology::timing_methodology(&protocol) {
        s.push_str(&format!("{key}: {text}\n"));
    }
    s.push_str("```\n<!-- /generated -->");
    s
}

#[test]
fn every_protocol_methodology_is_in_the_doc() {
    let path = doc_path();
    let mut doc = std::fs::read_to_string(&path).unwrap();
    let names: Vec<String> = builtin::all()
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    if std::env::var_os("UPDATE_PROTOCOLS_DOC").is_some() {
        for name in &names {
            let start_marker = format!("<!-- generated:{name} -->");
            let start = doc
                .find(&start_marker)
                .unwrap_or_else(|| panic!("no marker for {name}"));
            let end = start
                + doc[start..].find("<!-- /generated -->").unwrap()
                + "<!-- /generated -->".len();
            doc.replace_range(start..end, &block(name));
        }
        std::fs::write(&path, &doc).unwrap();
    }
    for name in &names {
        assert!(
            doc.contains(&block(name)),
            "docs/PROTOCOLS.md is missing or has a stale methodology block for `{name}`; \
             regenerate with UPDATE_PROTOCOLS_DOC=1 cargo test -p tokentrace-analyzer --test protocols_doc"
        );
        assert!(
            doc.contains(&format!("\n## {name}\n")),
            "no section for {name}"
        );
    }
}
