//! A flat Parquet table written row group by row group with the low-level column writers:
//! rows are buffered column-wise and flushed every `row_group_rows` rows, so memory stays
//! bounded however large the input.

use crate::error::ExportError;
use parquet::basic::{Compression, LogicalType, Repetition, Type as Physical, ZstdLevel};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The type of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// INT64.
    Int64,
    /// INT32.
    Int32,
    /// DOUBLE.
    Double,
    /// BOOLEAN.
    Bool,
    /// BYTE_ARRAY annotated as a UTF-8 string.
    Str,
}

/// A column of the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDef {
    /// Its name.
    pub name: String,
    /// Its type.
    pub kind: Kind,
    /// Whether it may hold nulls (OPTIONAL) or not (REQUIRED).
    pub nullable: bool,
}

impl ColumnDef {
    /// A column that is never null.
    pub fn required(name: &str, kind: Kind) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            kind,
            nullable: false,
        }
    }

    /// A column that may be null.
    pub fn nullable(name: &str, kind: Kind) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            kind,
            nullable: true,
        }
    }
}

/// One value of a row, None for null.
#[derive(Debug, Clone)]
pub enum Cell {
    /// For an INT64 column.
    I64(Option<i64>),
    /// For an INT32 column.
    I32(Option<i32>),
    /// For a DOUBLE column.
    F64(Option<f64>),
    /// For a BOOLEAN column.
    Bool(Option<bool>),
    /// For a string column.
    Str(Option<ByteArray>),
}

impl Cell {
    /// An unsigned count or time in an INT64 column (`column` names it in the error when it
    /// does not fit).
    pub fn u64(column: &str, value: Option<u64>) -> Result<Cell, ExportError> {
        value
            .map(|v| {
                i64::try_from(v).map_err(|_| ExportError::OutOfRange {
                    column: column.into(),
                    value: v,
                })
            })
            .transpose()
            .map(Cell::I64)
    }

    /// A string cell.
    pub fn text(value: Option<&str>) -> Cell {
        Cell::Str(value.map(ByteArray::from))
    }
}

/// The buffered values of one column and its definition levels (nullable columns only).
#[derive(Debug)]
enum Values {
    I64(Vec<i64>),
    I32(Vec<i32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    Str(Vec<ByteArray>),
}

/// A Parquet file being written (under its partial name until [`Table::finish`]).
pub struct Table {
    path: PathBuf,
    defs: Vec<ColumnDef>,
    values: Vec<Values>,
    levels: Vec<Vec<i16>>,
    rows: usize,
    total_rows: u64,
    row_group_rows: usize,
    /// Set by a row that did not fit: its earlier cells are buffered already, so the columns
    /// no longer line up and nothing more may be written.
    broken: bool,
    writer: SerializedFileWriter<BufWriter<File>>,
}

impl Table {
    /// Creates `file` (the partial name of the output) with columns `defs`, file metadata
    /// `metadata`, and a row group every `row_group_rows` rows. `path` names the output in
    /// errors.
    pub fn create(
        file: &Path,
        path: &Path,
        defs: Vec<ColumnDef>,
        metadata: Vec<KeyValue>,
        row_group_rows: usize,
    ) -> Result<Table, ExportError> {
        let err = parquet_error(path);
        let fields = defs
            .iter()
            .map(|d| field(d).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(&err)?;
        let schema = Type::group_type_builder("schema")
            .with_fields(fields)
            .build()
            .map_err(&err)?;
        let zstd = ZstdLevel::try_new(3).map_err(&err)?;
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(zstd))
            .set_created_by(format!("tokentrace {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(metadata))
            .build();
        let out = File::create(file).map_err(|e| ExportError::io(file, e))?;
        let writer =
            SerializedFileWriter::new(BufWriter::new(out), Arc::new(schema), Arc::new(properties))
                .map_err(&err)?;
        let values = defs.iter().map(|d| empty(d.kind)).collect();
        Ok(Table {
            path: path.to_path_buf(),
            levels: vec![Vec::new(); defs.len()],
            defs,
            values,
            rows: 0,
            total_rows: 0,
            row_group_rows: row_group_rows.max(1),
            broken: false,
            writer,
        })
    }

    /// Appends one row: exactly one cell per column, in schema order, each of its column's
    /// type, None only where the column is nullable. After an error the table takes no more
    /// rows.
    pub fn push_row(&mut self, cells: impl IntoIterator<Item = Cell>) -> Result<(), ExportError> {
        if self.broken {
            return Err(self.shape("an earlier row did not fit"));
        }
        let pushed = self.push_cells(cells);
        self.broken = pushed.is_err();
        pushed?;
        self.rows += 1;
        if self.rows >= self.row_group_rows {
            self.flush()?;
        }
        Ok(())
    }

    fn push_cells(&mut self, cells: impl IntoIterator<Item = Cell>) -> Result<(), ExportError> {
        let mut n = 0;
        for (i, cell) in cells.into_iter().enumerate() {
            let def = self
                .defs
                .get(i)
                .ok_or_else(|| self.shape("more cells than columns"))?;
            let present = match (&mut self.values[i], cell) {
                (Values::I64(v), Cell::I64(x)) => push(v, x),
                (Values::I32(v), Cell::I32(x)) => push(v, x),
                (Values::F64(v), Cell::F64(x)) => push(v, x),
                (Values::Bool(v), Cell::Bool(x)) => push(v, x),
                (Values::Str(v), Cell::Str(x)) => push(v, x),
                _ => {
                    return Err(
                        self.shape(&format!("column {} got a value of another type", def.name))
                    )
                }
            };
            if def.nullable {
                self.levels[i].push(i16::from(present));
            } else if !present {
                return Err(self.shape(&format!("column {} is not nullable", def.name)));
            }
            n += 1;
        }
        if n != self.defs.len() {
            return Err(self.shape("fewer cells than columns"));
        }
        Ok(())
    }

    /// Writes the buffered rows as one row group.
    fn flush(&mut self) -> Result<(), ExportError> {
        if self.rows == 0 {
            return Ok(());
        }
        let err = parquet_error(&self.path);
        let mut group = self.writer.next_row_group().map_err(&err)?;
        for (i, def) in self.defs.iter().enumerate() {
            let mut column = group.next_column().map_err(&err)?.ok_or_else(|| {
                ExportError::Schema(format!("{}: no column {}", self.path.display(), def.name))
            })?;
            let levels = def.nullable.then_some(self.levels[i].as_slice());
            let written = match &self.values[i] {
                Values::I64(v) => column.typed::<Int64Type>().write_batch(v, levels, None),
                Values::I32(v) => column.typed::<Int32Type>().write_batch(v, levels, None),
                Values::F64(v) => column.typed::<DoubleType>().write_batch(v, levels, None),
                Values::Bool(v) => column.typed::<BoolType>().write_batch(v, levels, None),
                Values::Str(v) => column.typed::<ByteArrayType>().write_batch(v, levels, None),
            };
            written.map_err(&err)?;
            column.close().map_err(&err)?;
        }
        group.close().map_err(&err)?;
        for v in &mut self.values {
            clear(v);
        }
        for l in &mut self.levels {
            l.clear();
        }
        self.total_rows += self.rows as u64;
        self.rows = 0;
        Ok(())
    }

    /// Writes the last row group and the footer; returns the rows written.
    pub fn finish(mut self) -> Result<u64, ExportError> {
        if self.broken {
            return Err(self.shape("an earlier row did not fit"));
        }
        self.flush()?;
        let err = parquet_error(&self.path);
        let out = self.writer.into_inner().map_err(&err)?;
        let file = out
            .into_inner()
            .map_err(|e| ExportError::io(&self.path, e.into_error()))?;
        file.sync_all()
            .map_err(|e| ExportError::io(&self.path, e))?;
        Ok(self.total_rows)
    }

    fn shape(&self, what: &str) -> ExportError {
        ExportError::Schema(format!(
            "{}: row does not fit the schema: {what}",
            self.path.display()
        ))
    }
}

/// Pushes a present value; tells whether there was one.
fn push<T>(values: &mut Vec<T>, value: Option<T>) -> bool {
    match value {
        Some(v) => {
            values.push(v);
            true
        }
        None => false,
    }
}

fn empty(kind: Kind) -> Values {
    match kind {
        Kind::Int64 => Values::I64(Vec::new()),
        Kind::Int32 => Values::I32(Vec::new()),
        Kind::Double => Values::F64(Vec::new()),
        Kind::Bool => Values::Bool(Vec::new()),
        Kind::Str => Values::Str(Vec::new()),
    }
}

fn clear(values: &mut Values) {
    match values {
        Values::I64(v) => v.clear(),
        Values::I32(v) => v.clear(),
        Values::F64(v) => v.clear(),
        Values::Bool(v) => v.clear(),
        Values::Str(v) => v.clear(),
    }
}

/// The Parquet type of a column.
fn field(def: &ColumnDef) -> parquet::errors::Result<Type> {
    let (physical, logical) = match def.kind {
        Kind::Int64 => (Physical::INT64, None),
        Kind::Int32 => (Physical::INT32, None),
        Kind::Double => (Physical::DOUBLE, None),
        Kind::Bool => (Physical::BOOLEAN, None),
        Kind::Str => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
    };
    let repetition = if def.nullable {
        Repetition::OPTIONAL
    } else {
        Repetition::REQUIRED
    };
    Type::primitive_type_builder(&def.name, physical)
        .with_repetition(repetition)
        .with_logical_type(logical)
        .build()
}

fn parquet_error(path: &Path) -> impl Fn(parquet::errors::ParquetError) -> ExportError + '_ {
    move |source| ExportError::Parquet {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;

    fn defs() -> Vec<ColumnDef> {
        vec![
            ColumnDef::required("id", Kind::Int64),
            ColumnDef::nullable("ms", Kind::Double),
            ColumnDef::nullable("name", Kind::Str),
        ]
    }

    #[test]
    fn rows_round_trip_across_row_groups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let mut table = Table::create(&path, &path, defs(), Vec::new(), 2).unwrap();
        for i in 0..5i64 {
            let ms = (i % 2 == 0).then_some(i as f64 / 3.0);
            let name = (i != 3).then(|| format!("r{i}"));
            table
                .push_row([
                    Cell::I64(Some(i)),
                    Cell::F64(ms),
                    Cell::text(name.as_deref()),
                ])
                .unwrap();
        }
        assert_eq!(table.finish().unwrap(), 5);
        let reader = SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
        assert_eq!(reader.metadata().num_row_groups(), 3);
        let rows: Vec<_> = reader
            .get_row_iter(None)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows.len(), 5);
        let cells: Vec<&Field> = rows[2].get_column_iter().map(|(_, f)| f).collect();
        assert_eq!(cells[0], &Field::Long(2));
        assert_eq!(cells[1], &Field::Double(2.0 / 3.0));
        assert_eq!(cells[2], &Field::Str("r2".into()));
        let cells: Vec<&Field> = rows[3].get_column_iter().map(|(_, f)| f).collect();
        assert_eq!((cells[1], cells[2]), (&Field::Null, &Field::Null));
    }

    #[test]
    fn rows_that_do_not_fit_the_schema_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let fresh = || Table::create(&path, &path, defs(), Vec::new(), 10).unwrap();
        let mut table = fresh();
        let short = table.push_row([Cell::I64(Some(1))]);
        assert!(short.unwrap_err().to_string().contains("fewer cells"));
        let good = [Cell::I64(Some(1)), Cell::F64(None), Cell::text(None)];
        let after = table.push_row(good.clone());
        assert!(after.unwrap_err().to_string().contains("earlier row"));
        assert!(table.finish().is_err());
        let null = fresh().push_row([Cell::I64(None), Cell::F64(None), Cell::text(None)]);
        assert!(null.unwrap_err().to_string().contains("not nullable"));
        let typed = fresh().push_row([Cell::F64(Some(1.0)), Cell::F64(None), Cell::text(None)]);
        assert!(typed.unwrap_err().to_string().contains("another type"));
    }

    #[test]
    fn unsigned_values_above_the_signed_range_are_refused() {
        assert!(matches!(
            Cell::u64("id", Some(7)).unwrap(),
            Cell::I64(Some(7))
        ));
        assert!(matches!(Cell::u64("id", None).unwrap(), Cell::I64(None)));
        let err = Cell::u64("id", Some(u64::MAX)).unwrap_err();
        assert!(err.to_string().contains("id"), "{err}");
    }
}
