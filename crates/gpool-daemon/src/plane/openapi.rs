//! The OpenAPI 3.1 description of `/api/v1`, served at `/api/v1/openapi.json`.
//!
//! The paths (routes, parameters, which body each answer carries) are
//! written by hand in `openapi_paths.json`; the schemas of every body are
//! generated from the wire types in `gpool-api` (`schemars`, which follows
//! their serde attributes), so a field added to a view is in the document
//! without anyone remembering to add it. Tests check that every route of
//! the router is described, that every `$ref` resolves, and (the e2e suite)
//! that live responses validate against the schemas.

use std::sync::OnceLock;

use gpool_api as api;
use schemars::generate::SchemaSettings;
use serde_json::Value;

/// Routes, parameters and responses; `components.schemas` is filled in by [`document`].
const PATHS: &str = include_str!("openapi_paths.json");

/// The document, as served (built once).
pub fn document_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| serde_json::to_string_pretty(&document()).unwrap_or_default())
}

/// The hand-written paths with the generated schemas of the wire types.
pub fn document() -> Value {
    let mut doc: Value = serde_json::from_str(PATHS).unwrap_or_else(|_| Value::Object(Default::default()));
    let mut generator =
        SchemaSettings::draft2020_12().with(|s| s.definitions_path = "/components/schemas".into()).into_generator();
    // Every body the paths name; what they contain comes along.
    generator.subschema_for::<api::JobSpec>();
    generator.subschema_for::<api::spec::Batch>();
    generator.subschema_for::<api::Submitted>();
    generator.subschema_for::<api::JobView>();
    generator.subschema_for::<api::JobList>();
    generator.subschema_for::<api::NodeView>();
    generator.subschema_for::<api::QuarantineView>();
    generator.subschema_for::<api::QueueView>();
    generator.subschema_for::<api::PoolView>();
    generator.subschema_for::<api::CostReport>();
    generator.subschema_for::<api::EventView>();
    generator.subschema_for::<api::ErrorBody>();
    generator.subschema_for::<api::TokenRequest>();
    generator.subschema_for::<api::TokenCreated>();
    generator.subschema_for::<api::TokenView>();
    generator.subschema_for::<api::WhoAmI>();
    generator.subschema_for::<api::pipeline::PipelineSpec>();
    generator.subschema_for::<api::pipeline::PipelineCreated>();
    generator.subschema_for::<api::pipeline::PipelineView>();
    generator.subschema_for::<api::pipeline::PipelineList>();
    generator.subschema_for::<api::PowerSet>();
    generator.subschema_for::<api::PowerView>();
    generator.subschema_for::<api::BudgetView>();
    generator.subschema_for::<api::schedule::ScheduleSpec>();
    generator.subschema_for::<api::schedule::ScheduleView>();
    generator.subschema_for::<api::ServiceView>();
    generator.subschema_for::<api::ServiceApplied>();
    generator.subschema_for::<api::RegistryView>();
    generator.subschema_for::<api::reservation::ReservationRequest>();
    generator.subschema_for::<api::reservation::ReservationView>();
    generator.subschema_for::<api::RegistryLogin>();
    generator.subschema_for::<api::telemetry::JobUsageView>();
    generator.subschema_for::<api::telemetry::AdviceView>();
    generator.subschema_for::<api::ProfileView>();
    generator.subschema_for::<api::terminal::AttachView>();
    generator.subschema_for::<api::telemetry::AlertView>();
    generator.subschema_for::<api::Overview>();
    let schemas: serde_json::Map<String, Value> = generator.take_definitions(true);
    if let Some(components) = doc.get_mut("components").and_then(Value::as_object_mut) {
        components.insert("schemas".into(), Value::Object(schemas));
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` names a schema the document has, and the bodies that
    /// were hand-written before are generated now.
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
    }
}
