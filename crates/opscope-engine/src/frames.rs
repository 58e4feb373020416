//! Reports as Arrow record batches, for DataFrames: each [`Frame`] a command declares
//! is the rows at a path of its result, nested objects flattened into columns, typed
//! by what they hold (integers stay integers, so the figures are the CLI's exactly).

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, NullArray, RecordBatch, StringArray,
};
use arrow_schema::{ArrowError, Field, Schema};
use serde_json::{Map, Value};

use crate::reports::{Frame, Output, ReportCommand};

/// The frames of `output`, which `command` made, by name, in the command's order.
pub fn frames(
    command: &dyn ReportCommand,
    output: &dyn Output,
) -> Result<Vec<(&'static str, RecordBatch)>, ArrowError> {
    let value = output.value();
    command
        .frames()
        .iter()
        .map(|frame| Ok((frame.name, batch(frame, &rows(frame, &value))?)))
        .collect()
}

/// The rows of `frame` in a result: objects, flattened, with their parents' keys.
fn rows(frame: &Frame, value: &Value) -> Vec<Map<String, Value>> {
    let mut out = Vec::new();
    collect(frame, value, frame.path, None, &mut out);
    out
}

fn collect<'v>(
    frame: &Frame,
    value: &'v Value,
    path: &[&str],
    parent: Option<&'v Map<String, Value>>,
    out: &mut Vec<Map<String, Value>>,
) {
    match (path.first(), value) {
        (None, Value::Array(items)) => {
            for item in items {
                if let Value::Object(fields) = item {
                    let mut row = Map::new();
                    for key in frame.parent {
                        // `found_by.kind`: a field of an object of the parent's, named
                        // by its first part.
                        let mut parts = key.split('.');
                        let name = parts.next().unwrap_or(key);
                        let mut found = parent.and_then(|p| p.get(name));
                        for part in parts {
                            found = found.and_then(|v| v.get(part));
                        }
                        row.insert(name.to_string(), found.cloned().unwrap_or(Value::Null));
                    }
                    flatten(frame, "", fields, &mut row);
                    out.push(row);
                }
            }
        }
        (Some(&"[]"), Value::Array(items)) => {
            for item in items {
                let holder = item.as_object().or(parent);
                collect(frame, item, &path[1..], holder, out);
            }
        }
        (Some(key), Value::Object(fields)) => {
            if let Some(inner) = fields.get(*key) {
                collect(frame, inner, &path[1..], Some(fields), out);
            }
        }
        _ => {}
    }
}

/// A row's fields as columns: nested objects' fields prefixed with their key (none for
/// the keys the frame names unprefixed), lists of objects left out (other frames).
fn flatten(frame: &Frame, prefix: &str, fields: &Map<String, Value>, row: &mut Map<String, Value>) {
    for (key, value) in fields {
        match value {
            Value::Object(inner) => {
                let inner_prefix = if prefix.is_empty() && frame.unprefixed.contains(&key.as_str())
                {
                    String::new()
                } else {
                    format!("{prefix}{key}_")
                };
                flatten(frame, &inner_prefix, inner, row);
            }
            Value::Array(items) if items.iter().any(Value::is_object) => {}
            _ => {
                row.insert(format!("{prefix}{key}"), value.clone());
            }
        }
    }
}

/// The column names in order: the frame's own list first (those present, or all of
/// them without rows), then the others by name.
fn column_names(frame: &Frame, rows: &[Map<String, Value>]) -> Vec<String> {
    if rows.is_empty() {
        return frame.columns.iter().map(|c| c.to_string()).collect();
    }
    let mut names: Vec<String> = frame
        .columns
        .iter()
        .filter(|c| rows.iter().any(|r| r.contains_key(**c)))
        .map(|c| c.to_string())
        .collect();
    let mut others: Vec<String> = rows
        .iter()
        .flat_map(|r| r.keys())
        .filter(|k| !frame.columns.contains(&k.as_str()))
        .cloned()
        .collect();
    others.sort();
    others.dedup();
    names.extend(others);
    names
}

fn batch(frame: &Frame, rows: &[Map<String, Value>]) -> Result<RecordBatch, ArrowError> {
    let names = column_names(frame, rows);
    let mut fields = Vec::with_capacity(names.len());
    let mut columns = Vec::with_capacity(names.len());
    for name in names {
        let values: Vec<&Value> = rows
            .iter()
            .map(|r| r.get(&name).unwrap_or(&Value::Null))
            .collect();
        let column = column(&values);
        fields.push(Field::new(name, column.data_type().clone(), true));
        columns.push(column);
    }
    let schema = Arc::new(Schema::new(fields));
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows.len()));
    RecordBatch::try_new_with_options(schema, columns, &options)
}

/// One column, typed by its values: integers, numbers, booleans, text, lists of text;
/// anything else as its JSON text.
fn column(values: &[&Value]) -> ArrayRef {
    let present = || values.iter().copied().filter(|v| !v.is_null());
    if present().next().is_none() {
        return Arc::new(NullArray::new(values.len()));
    }
    if present().all(|v| v.is_i64()) {
        return Arc::new(Int64Array::from_iter(values.iter().map(|v| v.as_i64())));
    }
    if present().all(Value::is_number) {
        return Arc::new(Float64Array::from_iter(values.iter().map(|v| v.as_f64())));
    }
    if present().all(Value::is_boolean) {
        return Arc::new(BooleanArray::from_iter(values.iter().map(|v| v.as_bool())));
    }
    if present().all(Value::is_string) {
        return Arc::new(StringArray::from_iter(values.iter().map(|v| v.as_str())));
    }
    let all_text = |v: &Value| {
        v.as_array()
            .is_some_and(|items| items.iter().all(Value::is_string))
    };
    if present().all(all_text) {
        let mut list = ListBuilder::new(StringBuilder::new());
        for v in values {
            match v.as_array() {
                Some(items) => {
                    for item in items {
                        list.values().append_option(item.as_str());
                    }
                    list.append(true);
                }
                None => list.append(false),
            }
        }
        return Arc::new(list.finish());
    }
    Arc::new(StringArray::from_iter(values.iter().map(|v| match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;

    const STREAMS: Frame = Frame {
        name: "streams",
        path: &["ranks", "[]", "streams"],
        parent: &["rank", "found_by.kind"],
        unprefixed: &[],
        columns: &["rank", "stream", "busy_ns"],
    };

    /// Rows under a list of parents carry the parents' keys; nested objects become
    /// prefixed columns, lists of objects are left out, types follow the values.
    #[test]
    fn rows_at_a_path_flatten_and_carry_their_parents() {
        let value = serde_json::json!({"ranks": [
            {"rank": 0, "found_by": {"kind": "markers"}, "streams": [
                {"stream": "7", "busy_ns": 10, "idle": {"host_ns": 1.5}, "steps": [{"a": 1}]},
                {"stream": "8", "busy_ns": 20, "idle": {"host_ns": 2}}]},
            {"rank": null, "streams": [{"stream": "9", "busy_ns": 30, "classes": ["a", "b"]}]}
        ]});
        let rows = rows(&STREAMS, &value);
        assert_eq!(rows.len(), 3);
        let batch = batch(&STREAMS, &rows).unwrap();
        let names: Vec<&str> = batch
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(
            names,
            [
                "rank",
                "stream",
                "busy_ns",
                "classes",
                "found_by",
                "idle_host_ns"
            ]
        );
        let rank = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!((rank.value(1), rank.is_null(2)), (0, true));
        let idle = batch
            .column(5)
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap();
        assert_eq!(idle.value(1), 2.0);
        assert_eq!(batch.column(3).data_type().to_string(), "List(Utf8)");
        let found = batch
            .column(4)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!((found.value(0), found.is_null(2)), ("markers", true));
    }

    /// A result without rows gives the frame's columns, no rows.
    #[test]
    fn no_rows_keep_the_columns() {
        let batch = batch(&STREAMS, &rows(&STREAMS, &serde_json::json!({"ranks": []}))).unwrap();
        assert_eq!(batch.num_rows(), 0);
        assert_eq!(batch.num_columns(), 3);
    }
}
