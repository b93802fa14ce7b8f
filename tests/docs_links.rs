//! The documentation's cross-references resolve: every relative Markdown link in README.md and
//! docs/ names a file that exists (and, for a page, a heading it has), and every citation of a
//! section in the sources and docs (`docs/PAGE.md, *Title*` or `"Title"`) names a heading, or a
//! bold lead-in, of that page. The performance log is split over several pages and sections are
//! cited from code comments; a moved or renamed section must not leave a reference behind.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::manifests::root;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Files under `dir` (relative to the repository) whose names end in one of `exts`, build
/// output and version control left out.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "node_modules") {
                files(&path, exts, out);
            }
        } else if exts.iter().any(|ext| name.ends_with(ext)) {
            out.push(path);
        }
    }
}

/// GitHub's anchor of a heading: lower case, only letters, digits, `-`, `_` and blanks kept, each
/// blank a `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A page's headings and bold lead-ins (`**Title.**` at the start of a line or list item),
/// outside code blocks.
struct Page {
    headings: Vec<String>,
    anchors: HashSet<String>,
    lead_ins: Vec<String>,
}

/// The lines of a Markdown text outside its fenced code blocks (a closing fence comes through:
/// it holds no heading and no link).
fn prose_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut fence = false;
    text.lines().filter(move |line| {
        if line.starts_with("```") {
            fence = !fence;
        }
        !fence
    })
}

fn page(path: &Path) -> Page {
    let text = std::fs::read_to_string(path).unwrap();
    let mut page = Page {
        headings: Vec::new(),
        anchors: HashSet::new(),
        lead_ins: Vec::new(),
    };
    for line in prose_lines(&text) {
        // An ATX heading: one to six `#` and a blank (`#5` is no heading).
        let level = line.bytes().take_while(|&b| b == b'#').count();
        let heading = (1..=6)
            .contains(&level)
            .then(|| line[level..].strip_prefix(' '))
            .flatten();
        if let Some(heading) = heading {
            let heading = heading.trim().to_string();
            let base = slug(&heading);
            let mut anchor = base.clone();
            let mut n = 0;
            while page.anchors.contains(&anchor) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
            page.anchors.insert(anchor);
            page.headings.push(heading);
        }
        let item = line
            .trim_start()
            .trim_start_matches("- ")
            .trim_start_matches("* ");
        if let Some(rest) = item.strip_prefix("**") {
            if let Some(end) = rest.find("**") {
                page.lead_ins.push(rest[..end].to_string());
            }
        }
    }
    page
}

/// Relative link targets in `text` (outside code blocks and code spans).
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        // Code spans hold no links: drop them before looking.
        let plain: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if !target.contains("://") && !target.starts_with("mailto:") && !target.contains(' ') {
                out.push(target.to_string());
            }
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn relative_links_in_the_docs_name_files_and_headings_that_exist() {
    let root = root();
    let mut pages = vec![root.join("README.md")];
    files(&root.join("docs"), &[".md"], &mut pages);
    let mut broken = Vec::new();
    let mut checked = 0;
    for from in &pages {
        let text = std::fs::read_to_string(from).unwrap();
        for target in links(&text) {
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                from.clone()
            } else {
                from.parent().unwrap().join(file)
            };
            checked += 1;
            if !path.exists() {
                broken.push(format!("{}: {target}: no such file", from.display()));
                continue;
            }
            if let Some(anchor) = anchor.filter(|_| file.is_empty() || file.ends_with(".md")) {
                if !page(&path).anchors.contains(anchor) {
                    broken.push(format!("{}: {target}: no such heading", from.display()));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: the scan is broken"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The text of `source` with line comments' markers taken out where a sentence runs on to the
/// next line, and all whitespace runs one blank, so that a citation split over lines reads whole.
fn flattened(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    for line in source.lines() {
        let line = line.trim_start();
        let line = ["//!", "///", "//", "#"]
            .iter()
            .find_map(|marker| line.strip_prefix(marker))
            .unwrap_or(line);
        out.push_str(line.trim());
        out.push(' ');
    }
    out
}

/// (page, title) of each citation `docs/PAGE.md, *Title*` or `docs/PAGE.md, "Title"` (also
/// with ` (` instead of `, `) in `text`, titles that begin with a capital or a code span.
fn citations(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("docs/") {
        rest = &rest[at..];
        let Some(md) = rest.find(".md") else { break };
        let page = &rest[..md + 3];
        let after = &rest[md + 3..];
        rest = &rest[5..];
        if page.contains(|c: char| c.is_whitespace() || c == '`' || c == '(') {
            continue;
        }
        let after = after.trim_start_matches(')');
        let Some(after) = after
            .strip_prefix(", ")
            .or_else(|| after.strip_prefix(" ("))
        else {
            continue;
        };
        let (open, close) = match after.chars().next() {
            Some('*') => ('*', '*'),
            Some('"') => ('"', '"'),
            _ => continue,
        };
        let body = &after[open.len_utf8()..];
        let Some(end) = body.find(close) else {
            continue;
        };
        let title = body[..end].trim().trim_end_matches('.');
        if title.starts_with(|c: char| c.is_ascii_uppercase() || c == '`') && title.len() < 200 {
            out.push((page.to_string(), title.to_string()));
        }
    }
    out
}

#[test]
fn cited_sections_exist_on_the_cited_pages() {
    let root = root();
    let mut sources = Vec::new();
    files(&root, &[".rs", ".md", ".sh", ".py", ".toml"], &mut sources);
    sources.push(root.join(".ci/run"));
    let mut broken = Vec::new();
    let mut checked = 0;
    // This file's own examples are not citations.
    sources.retain(|source| !source.ends_with("tests/docs_links.rs"));
    for source in &sources {
        let Ok(text) = std::fs::read_to_string(source) else {
            continue;
        };
        for (cited, title) in citations(&flattened(&text)) {
            let path = root.join(&cited);
            if !path.exists() {
                broken.push(format!("{}: {cited}: no such page", source.display()));
                continue;
            }
            checked += 1;
            let page = page(&path);
            // A numbered section ("9. Embedding the writer") is cited by its name.
            let found = page
                .headings
                .iter()
                .chain(&page.lead_ins)
                .map(|heading| heading.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.'))
                .any(|heading| heading.trim_start().starts_with(&title));
            if !found {
                broken.push(format!("{}: {cited}, \"{title}\"", source.display()));
            }
        }
    }
    assert!(
        checked > 30,
        "only {checked} citations found: the scan is broken"
    );
    assert!(
        broken.is_empty(),
        "sections cited but not found:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_performance_log_lists_every_page_and_section() {
    let root = root();
    let index = std::fs::read_to_string(root.join("docs/PERFORMANCE.md")).unwrap();
    let log = index
        .split("\n### Log\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/PERFORMANCE.md has a Log");
    let mut pages = Vec::new();
    files(&root.join("docs/performance"), &[".md"], &mut pages);
    assert!(!pages.is_empty(), "no log pages");
    let mut missing = Vec::new();
    for path in &pages {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !log.contains(&format!("](performance/{name})")) {
            missing.push(format!("the page {name}"));
        }
        // The first heading is the page's title.
        for heading in page(path).headings.iter().skip(1) {
            if !log.contains(&format!("  - {heading}\n")) {
                missing.push(format!("{name}: {heading}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in the Log:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_scanners_find_what_they_are_meant_to() {
    assert_eq!(
        slug("Tried, not kept: a pause (2026-12-07)"),
        "tried-not-kept-a-pause-2026-12-07"
    );
    assert_eq!(
        slug("Seven ladders with `--repeat`"),
        "seven-ladders-with---repeat"
    );
    assert_eq!(
        links("see [*A*](performance/x.md#a-b) and `[x](not.md)` and [w](https://e.org)"),
        vec!["performance/x.md#a-b".to_string()]
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("page.md");
    let text = "# A page\n#5 is no heading\n## A page\n- **Lead in.** text\n```\n# in code\n```\n";
    std::fs::write(&file, text).unwrap();
    let read = page(&file);
    assert_eq!(read.headings, ["A page", "A page"]);
    assert_eq!(
        read.anchors,
        HashSet::from(["a-page".to_string(), "a-page-1".to_string()])
    );
    assert_eq!(read.lead_ins, ["Lead in."]);
    let text = flattened(
        "/// figures (docs/PERFORMANCE.md, *The lag\n/// probe's ticker*). And docs/FORMAT.md, \"Times\".\n/// docs/X.md, *lower case* is no citation",
    );
    assert_eq!(
        citations(&text),
        vec![
            (
                "docs/PERFORMANCE.md".to_string(),
                "The lag probe's ticker".to_string()
            ),
            ("docs/FORMAT.md".to_string(), "Times".to_string()),
        ]
    );
}
