//! Laying out text tables for a terminal of a given width, through comfy-table, in one style
//! shared by every command that prints a table (`analyze`, `capacity`, `diff`, `inspect`).
//!
//! The style has no borders: columns are two spaces apart and a rule runs under the header,
//! so a line still starts with its row's name (easy to grep) and copies cleanly.

use comfy_table::{
    CellAlignment, ColumnConstraint, ContentArrangement, ContentLineStyle, LineStyle, Table,
    TableStyle, Width,
};

/// The width assumed when standard output is not a terminal and `COLUMNS` is not set.
pub const DEFAULT_WIDTH: usize = 100;

/// Narrower than this, nothing useful fits; a smaller `COLUMNS` is read as this.
const MIN_WIDTH: usize = 20;

/// Columns two spaces apart (one padding space, one junction space) and a rule under the
/// header; nothing else.
const STYLE: TableStyle = TableStyle::new()
    .header_lines(ContentLineStyle::none().junction(' '))
    .content_lines(ContentLineStyle::none().junction(' '))
    .header_separator(LineStyle::none().fill('─').junction('─'));

/// The width tables are laid out for: `COLUMNS` when set to a number, else the terminal's
/// when standard output is one, else [`DEFAULT_WIDTH`] (a pipe or a file has no width, and
/// a fixed one keeps saved output the same from one machine to the next).
pub fn terminal_width() -> usize {
    let from_env = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0);
    if let Some(columns) = from_env {
        return columns.max(MIN_WIDTH);
    }
    let probe = Table::new();
    match probe.width() {
        Some(w) if probe.is_tty() => usize::from(w).max(MIN_WIDTH),
        _ => DEFAULT_WIDTH,
    }
}

/// How a column's cells sit in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Flush left: names and text.
    Left,
    /// Flush right: numbers, so their digits line up.
    Right,
}

/// A table of text cells: a header, then rows. Cells are formatted before they are added
/// (see [`super::number`]), so every cell of a column follows its column's rule.
#[derive(Debug, Clone, Default)]
pub struct Grid {
    /// Whether the header row (and the rule under it) is shown.
    headed: bool,
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Grid {
    /// An empty table with these columns.
    pub fn new(columns: &[(&str, Align)]) -> Grid {
        Grid {
            headed: true,
            header: columns.iter().map(|(h, _)| h.to_string()).collect(),
            align: columns.iter().map(|&(_, a)| a).collect(),
            rows: Vec::new(),
        }
    }

    /// An empty table whose columns are aligned so, shown without a header: a list of
    /// facts whose first column names each row.
    pub fn headless(aligns: &[Align]) -> Grid {
        Grid {
            headed: false,
            header: vec![String::new(); aligns.len()],
            align: aligns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are left empty, extra ones dropped).
    pub fn push(&mut self, mut row: Vec<String>) {
        row.resize(self.header.len(), String::new());
        self.rows.push(row);
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table in at most `width` columns: as it is when it fits, else with the widest
    /// cells wrapped.
    pub fn render(&self, width: usize) -> String {
        let all: Vec<usize> = (0..self.header.len()).collect();
        let natural = self.table(&all, None).trim_fmt();
        if widest(&natural) <= width {
            natural
        } else {
            self.table(&all, Some(width)).trim_fmt()
        }
    }

    /// The table in at most `width` columns, the columns after the first `keep` split over
    /// as few stacked tables as fit (each repeating the first `keep`, sizes as even as
    /// possible), so a wide table stays readable on a narrow terminal without wrapping.
    pub fn render_split(&self, keep: usize, width: usize) -> String {
        let keep = keep.min(self.header.len());
        let rest = self.header.len() - keep;
        for parts in 1..=rest.max(1) {
            let tables: Vec<String> = split_even(rest, parts)
                .into_iter()
                .map(|range| {
                    let columns: Vec<usize> = (0..keep).chain(range.map(|c| c + keep)).collect();
                    self.table(&columns, None).trim_fmt()
                })
                .collect();
            if tables.iter().all(|t| widest(t) <= width) {
                return tables.join("\n\n");
            }
        }
        // Not even one column beside the kept ones fits: wrap cells instead.
        (0..rest.max(1))
            .map(|c| {
                let columns: Vec<usize> = (0..keep).chain([c + keep]).collect();
                self.table(&columns, Some(width)).trim_fmt()
            })
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    /// The comfy-table of `columns` (indices into the header), wrapped to `width` if given.
    fn table(&self, columns: &[usize], width: Option<usize>) -> Table {
        let mut table = Table::new();
        // No terminal lookups or colours: the width is decided here, the output is text.
        table.force_no_tty().load_style(STYLE);
        if self.headed {
            table.set_header(columns.iter().map(|&c| self.header[c].clone()));
        }
        for row in &self.rows {
            table.add_row(columns.iter().map(|&c| row[c].clone()));
        }
        match width {
            Some(w) => {
                table
                    .set_width(u16::try_from(w).unwrap_or(u16::MAX))
                    .set_content_arrangement(ContentArrangement::Dynamic);
            }
            None => {
                table.set_content_arrangement(ContentArrangement::Disabled);
            }
        }
        let last = columns.len().saturating_sub(1);
        for (i, &c) in columns.iter().enumerate() {
            if let Some(column) = table.column_mut(i) {
                // One space after every column but the last, plus the junction's one.
                column.set_padding((0, u16::from(i < last)));
                column.set_cell_alignment(match self.align[c] {
                    Align::Left => CellAlignment::Left,
                    Align::Right => CellAlignment::Right,
                });
                // Numbers and the row names must never wrap; only the other text columns
                // give way to a narrow width.
                if (i == 0 || self.align[c] == Align::Right) && width.is_some() {
                    // The fixed width includes the padding.
                    let padded = self.content_width(c).saturating_add(u16::from(i < last));
                    column.set_constraint(ColumnConstraint::Absolute(Width::Fixed(padded)));
                }
            }
        }
        table
    }

    /// The widest cell of column `c`, header included, in characters.
    fn content_width(&self, c: usize) -> u16 {
        let widest = std::iter::once(&self.header[c])
            .chain(self.rows.iter().map(|r| &r[c]))
            .map(|s| s.chars().count())
            .max()
            .unwrap_or(0);
        u16::try_from(widest).unwrap_or(u16::MAX)
    }
}

/// `n` items in `parts` contiguous ranges whose sizes differ by at most one.
fn split_even(n: usize, parts: usize) -> Vec<std::ops::Range<usize>> {
    let parts = parts.clamp(1, n.max(1));
    let (size, extra) = (n / parts, n % parts);
    let mut start = 0;
    (0..parts)
        .map(|p| {
            let len = size + usize::from(p < extra);
            let range = start..start + len;
            start += len;
            range
        })
        .collect()
}

/// The longest line of `text`, in characters (every character tables use is one column).
pub fn widest(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

/// `text` wrapped at spaces into lines of at most `width` characters, continuation lines
/// indented by `indent` spaces (a word longer than a line is left whole).
pub fn wrap(text: &str, width: usize, indent: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
            line = " ".repeat(indent);
        }
        if !line.trim().is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines.join("\n")
}

/// `parts` joined by ` · `, breaking lines only between parts (a part stays whole), so a
/// heading such as `protocol … · run.tt · started …` wraps where it reads well.
pub fn join_wrapped(parts: &[String], width: usize, indent: usize) -> String {
    let mut out = String::new();
    let mut line_len = 0;
    for (i, part) in parts.iter().enumerate() {
        let len = part.chars().count();
        if i > 0 {
            if line_len + 3 + len > width {
                out.push('\n');
                out.push_str(&" ".repeat(indent));
                line_len = indent;
            } else {
                out.push_str(" · ");
                line_len += 3;
            }
        }
        out.push_str(part);
        line_len += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> Grid {
        let mut g = Grid::new(&[
            ("metric", Align::Left),
            ("a", Align::Right),
            ("b", Align::Right),
            ("c", Align::Right),
        ]);
        g.push(vec![
            "ttft_ms".into(),
            "1.000".into(),
            "22.00".into(),
            "333.0".into(),
        ]);
        g.push(vec![
            "e2e_ms".into(),
            "10.00".into(),
            "2.000".into(),
            "3".into(),
        ]);
        g
    }

    #[test]
    fn columns_line_up_with_numbers_flush_right() {
        assert_eq!(
            grid().render(100),
            "metric       a      b      c\n\
             ────────────────────────────\n\
             ttft_ms  1.000  22.00  333.0\n\
             e2e_ms   10.00  2.000      3"
        );
    }

    #[test]
    fn a_narrow_width_stacks_the_columns_in_even_parts() {
        let split = grid().render_split(1, 21);
        assert!(widest(&split) <= 21, "{split}");
        assert_eq!(
            split,
            "metric       a      b\n\
             ─────────────────────\n\
             ttft_ms  1.000  22.00\n\
             e2e_ms   10.00  2.000\n\
             \n\
             metric       c\n\
             ──────────────\n\
             ttft_ms  333.0\n\
             e2e_ms       3"
        );
        // Narrower still, one statistic per table.
        assert_eq!(grid().render_split(1, 20).matches("metric").count(), 3);
        assert_eq!(grid().render_split(1, 100), grid().render(100));
    }

    #[test]
    fn a_headless_grid_is_rows_only() {
        let mut g = Grid::headless(&[Align::Left, Align::Right, Align::Left]);
        g.push(vec!["blocks:".into(), "3".into()]);
        g.push(vec!["chunks:".into(), "44".into(), "in all".into()]);
        assert_eq!(g.render(80), "blocks:   3\nchunks:  44  in all");
    }

    #[test]
    fn too_narrow_a_table_wraps_its_text_but_never_names_or_numbers() {
        let mut g = Grid::new(&[
            ("metric", Align::Left),
            ("value", Align::Right),
            ("note", Align::Left),
        ]);
        g.push(vec![
            "itl_request_mean_ms".into(),
            "123.4".into(),
            "a long remark that cannot fit beside the rest".into(),
        ]);
        let text = g.render(50);
        assert!(widest(&text) <= 50, "{text}");
        assert!(
            text.contains("itl_request_mean_ms  123.4  a long"),
            "{text}"
        );
    }

    #[test]
    fn text_wraps_with_an_indent() {
        assert_eq!(wrap("one two three four", 9, 2), "one two\n  three\n  four");
        assert_eq!(wrap("short", 80, 4), "short");
        let parts = [
            "protocol x v1".to_string(),
            "a.tt".into(),
            "started 2026".into(),
        ];
        assert_eq!(
            join_wrapped(&parts, 22, 2),
            "protocol x v1 · a.tt\n  started 2026"
        );
        assert_eq!(
            join_wrapped(&parts, 80, 2),
            "protocol x v1 · a.tt · started 2026"
        );
    }

    #[test]
    fn even_splits() {
        assert_eq!(split_even(5, 2), vec![0..3, 3..5]);
        assert_eq!(split_even(3, 5), vec![0..1, 1..2, 2..3]);
        assert_eq!(split_even(0, 1), vec![0..0]);
    }
}
