//! The OpenAPI 3.1 description of the API, served at `/api/v1/openapi.json`.
//!
//! Generated from the handlers (aide, `http/routes.rs`): the router and the
//! document come from the same calls, so a route cannot be served and not
//! described, or described and not served; parameters and bodies come
//! from the handlers' extractors (`http/extract.rs`, `http/params.rs`),
//! answers from their return types, the schemas of every body from the
//! wire types in `gpool-api` (`schemars`, which follows their serde
//! attributes). Tests check that every `$ref` resolves and every operation
//! has an id and a tag, `openapi-spec-validator` and schemathesis check the
//! document against a live daemon (`gpool-cli/tests/openapi.rs`).

use std::sync::OnceLock;

use serde_json::Value;

/// The document, as served (built once).
pub fn document_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| serde_json::to_string_pretty(&document()).unwrap_or_default())
}

/// The document, as JSON.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(super::routes::document()).unwrap_or(Value::Null);
    bound_integers(&mut doc);
    doc
}

/// Gives every integer schema the range of the Rust type it was made from
/// (schemars names it in `format` only, and aide copies query parameters'
/// schemas before any transform sees them): a client must not send a
/// number the server cannot hold.
fn bound_integers(v: &mut Value) {
    match v {
        Value::Object(o) => {
            let range: Option<(Value, Value)> = match o.get("format").and_then(Value::as_str) {
                Some("uint8") => Some((0.into(), u8::MAX.into())),
                Some("uint16") => Some((0.into(), u16::MAX.into())),
                Some("uint32") => Some((0.into(), u32::MAX.into())),
                Some("uint64" | "uint") => Some((0.into(), u64::MAX.into())),
                Some("int8") => Some((i8::MIN.into(), i8::MAX.into())),
                Some("int16") => Some((i16::MIN.into(), i16::MAX.into())),
                Some("int32") => Some((i32::MIN.into(), i32::MAX.into())),
                Some("int64" | "int") => Some((i64::MIN.into(), i64::MAX.into())),
                _ => None,
            };
            if let Some((min, max)) = range {
                o.entry("minimum").or_insert(min);
                o.entry("maximum").or_insert(max);
            }
            o.values_mut().for_each(bound_integers);
        }
        Value::Array(items) => items.iter_mut().for_each(bound_integers),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` names a schema the document has; the bodies are generated.
    #[test]
    fn every_reference_resolves_to_a_generated_schema() {
        let doc = document();
        let text = doc.to_string();
        let mut refs: Vec<&str> = text.split("\"$ref\":\"").skip(1).filter_map(|r| r.split('"').next()).collect();
        refs.sort_unstable();
        refs.dedup();
        assert!(refs.len() > 20, "{refs:?}");
        for r in refs {
            let pointer = r.strip_prefix('#').unwrap_or(r);
            assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
        }
        let job = &doc["components"]["schemas"]["JobView"];
        assert!(job["properties"]["spec"].is_object() && job["required"].is_array(), "{job}");
        assert_eq!(doc["openapi"], "3.1.0");
        // Integers carry their Rust type's range, query parameters included.
        let rank = doc["paths"]["/api/v1/jobs/{id}/logs"]["get"]["parameters"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == "rank"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(rank["schema"]["maximum"], u32::MAX, "{rank}");
    }

    /// Client generators name methods by `operationId` and group them by tag:
    /// every operation has both, ids are unique, and every tag is declared.
    #[test]
    fn every_operation_has_a_unique_id_and_a_declared_tag() {
        let doc = document();
        let declared: Vec<&str> =
            doc["tags"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
        let mut ids = std::collections::BTreeSet::new();
        let mut count = 0;
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            for (method, op) in item.as_object().into_iter().flatten() {
                count += 1;
                let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
                assert!(ids.insert(id.to_string()), "operationId {id} twice");
                let tags = op["tags"].as_array().map(Vec::len).unwrap_or(0);
                assert!(tags > 0, "{method} {path} has no tag");
                for t in op["tags"].as_array().into_iter().flatten() {
                    assert!(declared.contains(&t.as_str().unwrap_or("")), "{method} {path}: tag {t} not declared");
                }
                assert!(op["responses"].as_object().is_some_and(|r| !r.is_empty()), "{method} {path} answers nothing");
            }
        }
        assert!(count >= 60, "{count} operations");
    }

    /// A path's `{parameters}` are each described by the operation.
    #[test]
    fn every_path_parameter_is_described() {
        let doc = document();
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            let wanted: Vec<&str> =
                path.split('/').filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}'))).collect();
            for (method, op) in item.as_object().into_iter().flatten() {
                for w in &wanted {
                    let found = op["parameters"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|p| p["in"] == "path" && p["name"] == *w && p["required"] == true);
                    assert!(found, "{method} {path}: path parameter {w} not described");
                }
            }
        }
    }
}
