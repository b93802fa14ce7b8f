//! The page around the panels: head, navigation, inlined style and script, escaping.

use std::fmt::Write;

const STYLE: &str = include_str!("../assets/report.css");
const SCRIPT: &str = include_str!("../assets/timeline.js");

/// A report page being assembled, panel by panel.
pub struct Page {
    title: String,
    subtitle: String,
    nav: Vec<(String, String)>,
    body: String,
    data: Vec<(String, String)>,
}

impl Page {
    /// An empty page.
    pub fn new(title: &str) -> Page {
        Page {
            title: title.to_string(),
            subtitle: String::new(),
            nav: Vec::new(),
            body: String::new(),
            data: Vec::new(),
        }
    }

    /// The line under the title.
    pub fn subtitle(&mut self, text: &str) {
        self.subtitle = text.to_string();
    }

    /// Adds a panel: `<section data-panel=NAME id=NAME>` with a heading and `html` inside.
    pub fn section(&mut self, name: &str, heading: &str, html: &str) {
        self.nav.push((name.to_string(), heading.to_string()));
        let _ = write!(
            self.body,
            "<section class=\"panel\" id=\"{name}\" data-panel=\"{name}\">\n<h2>{}</h2>\n{html}\n</section>\n",
            esc(heading)
        );
    }

    /// Embeds JSON for the script under `id` (`</` escaped so it cannot end the element).
    pub fn data(&mut self, id: &str, json: &str) {
        self.data.push((id.to_string(), json.replace("</", "<\\/")));
    }

    /// The whole document.
    pub fn finish(self) -> String {
        let mut out = String::with_capacity(self.body.len() + 16_384);
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <meta name=\"generator\" content=\"tokentrace {}\">\n<title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n",
            env!("CARGO_PKG_VERSION"),
            esc(&self.title)
        );
        let _ = write!(
            out,
            "<header><h1>{}</h1><p class=\"sub\">{}</p>\n<nav>",
            esc(&self.title),
            esc(&self.subtitle)
        );
        for (id, heading) in &self.nav {
            let _ = write!(out, "<a href=\"#{id}\">{}</a>", esc(heading));
        }
        out.push_str("</nav></header>\n<main>\n<div id=\"report-errors\" hidden></div>\n");
        out.push_str(&self.body);
        out.push_str("</main>\n");
        for (id, json) in &self.data {
            let _ = writeln!(
                out,
                "<script type=\"application/json\" id=\"{id}\">{json}</script>"
            );
        }
        let _ = write!(out, "<script>\n{SCRIPT}</script>\n</body>\n</html>\n");
        out
    }
}

/// Text escaped for HTML element content and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An HTML table from a header and rows of already-escaped cells; `numeric` columns align
/// right.
pub fn table(header: &[&str], rows: &[Vec<String>], numeric: &[bool]) -> String {
    let mut out = String::from("<table>\n<thead><tr>");
    for (i, h) in header.iter().enumerate() {
        let class = if numeric.get(i).copied().unwrap_or(false) {
            " class=\"num\""
        } else {
            ""
        };
        let _ = write!(out, "<th{class}>{}</th>", esc(h));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let class = if numeric.get(i).copied().unwrap_or(false) {
                " class=\"num\""
            } else {
                ""
            };
            let _ = write!(out, "<td{class}>{cell}</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_cannot_break_out_of_the_markup() {
        assert_eq!(esc("<b a=\"x\">&'"), "&lt;b a=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn embedded_json_cannot_end_its_script_element() {
        let mut page = Page::new("t");
        page.data("d", r#"{"e":"</script><script>alert(1)</script>"}"#);
        let html = page.finish();
        assert!(!html.contains("\"</script><script>alert"));
        assert!(html.contains(r#"<\/script>"#));
    }

    #[test]
    fn every_panel_is_named_in_the_navigation() {
        let mut page = Page::new("run");
        page.section("summary", "Summary", "<p>x</p>");
        let html = page.finish();
        assert!(html.contains("<a href=\"#summary\">Summary</a>"));
        assert!(html.contains("data-panel=\"summary\""));
    }
}
