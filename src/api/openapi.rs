//! The OpenAPI document: what `utoipa` derives from the handlers (`#[utoipa::path]`) and the
//! types (`ToSchema`), with the request body of `POST /v1/runs` described by the JSON Schema
//! the server validates it with (`schemas/RunRequest.schema.json`, embedded under
//! `components/schemas`). `GET /openapi.json` serves this document and `orca openapi` prints
//! it (the repository's `openapi.yaml`).

use serde_json::{Value, json};
use utoipa::PartialSchema;

use super::registry::RegistryReference;
use super::workflows::WORKFLOW_NOTE;
use crate::domain::EventKind;

/// The shipped JSON Schemas embedded whole, by the component name they get in the document
/// (in place of what the derive says of the type of that name). The plan and workflow schemas
/// are not: they describe a graph whose rules (known step ids, no cycles, references, CEL,
/// tool arguments) no JSON Schema can state, and they are large enough to slow a fuzzer's
/// generation to a crawl. The document names them instead.
const SCHEMAS: [(&str, &str); 1] = [(
    "RunRequest",
    include_str!("../../schemas/RunRequest.schema.json"),
)];

/// What a plan is, for the document.
const PLAN_NOTE: &str = "An AgentPlan (schemas/AgentPlan.schema.json in the repository), \
    validated in full: any problem is a 422 listing every one with a JSON Pointer. Steps of \
    kind `agent` (a turn, or a hub with `spokes`), `handoff`, `group_chat` and `workflow` run \
    teams; the plan's `agents` (name -> Agent), `workflows` (name -> FixedWorkflow) and \
    run-wide `middleware` define them, and registered agents and workflows the steps name are \
    copied in when the run is created.";

/// The document as JSON.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(<super::ApiDoc as utoipa::OpenApi>::openapi())
        .expect("the derived OpenAPI document serialises");
    for (name, text) in SCHEMAS {
        embed(&mut doc, name, text);
    }
    name_plan_and_workflow(&mut doc);
    type_events(&mut doc);
    open_optional_flattened(&mut doc["components"]["schemas"]);
    doc
}

/// The document as YAML (the repository's `openapi.yaml`).
pub fn yaml() -> String {
    yaml_serde::to_string(&document()).expect("a JSON value serialises as YAML")
}

/// Puts a shipped schema under `components/schemas/NAME`, its `$defs` beside it as
/// `NAME_DEF`, with every `$ref` rewritten to point inside the document. Keywords only orca's
/// validator reads (`errorMessage`) and the standalone-file ones (`$schema`, `$id`) go.
fn embed(doc: &mut Value, name: &str, text: &str) {
    let mut schema: Value = serde_json::from_str(text).expect("shipped schema is JSON");
    let defs = schema
        .as_object_mut()
        .and_then(|o| o.remove("$defs"))
        .and_then(|d| match d {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default();
    let components = &mut doc["components"]["schemas"];
    for (def, mut value) in defs {
        clean(&mut value, name);
        components[format!("{name}_{def}")] = value;
    }
    clean(&mut schema, name);
    if let Some(o) = schema.as_object_mut() {
        o.remove("$schema");
        o.remove("$id");
    }
    components[name] = schema;
}

/// Rewrites references of a schema of component `owner` and drops orca-only keywords.
fn clean(value: &mut Value, owner: &str) {
    match value {
        Value::Object(map) => {
            map.remove("errorMessage");
            if let Some(Value::String(r)) = map.get_mut("$ref") {
                *r = rewrite_ref(r, owner);
            }
            for v in map.values_mut() {
                clean(v, owner);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| clean(v, owner)),
        _ => {}
    }
}

/// `#/$defs/step` of AgentPlan → `#/components/schemas/AgentPlan_step`;
/// `AgentPlan.schema.json#/properties/id` → `#/components/schemas/AgentPlan/properties/id`.
fn rewrite_ref(r: &str, owner: &str) -> String {
    let (file, pointer) = r.split_once('#').unwrap_or((r, ""));
    let target = match file.strip_suffix(".schema.json") {
        Some(other) if !other.is_empty() => other,
        _ => owner,
    };
    match pointer
        .strip_prefix("/$defs/")
        .map(|rest| rest.split_once('/').unwrap_or((rest, "")))
    {
        Some((def, rest)) => {
            let sep = if rest.is_empty() { "" } else { "/" };
            format!("#/components/schemas/{target}_{def}{sep}{rest}")
        }
        None => format!("#/components/schemas/{target}{pointer}"),
    }
}

/// The embedded `RunRequest` says what `plan` and `workflow` are. The shipped schema leaves
/// them loose (`object`, `string | object`): the engine checks them and locates every problem,
/// and no derive reaches into an embedded schema.
fn name_plan_and_workflow(doc: &mut Value) {
    let name = serde_json::to_value(RegistryReference::schema()).expect("a schema serialises");
    let properties = &mut doc["components"]["schemas"]["RunRequest"]["properties"];
    properties["plan"] = json!({ "type": "object", "description": PLAN_NOTE });
    properties["workflow"] = json!({
        "description": "A registered workflow's name (`name`, `name@3`, `name@production`), or an inline workflow (`fixed` or `auto`).",
        "anyOf": [name, { "type": "object", "description": WORKFLOW_NOTE }]
    });
}

/// The component that describes the `data` of an event of `kind`.
fn data_schema(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Status => "StatusData",
        EventKind::Plan => "PlanData",
        EventKind::Step => "StepData",
        EventKind::Token | EventKind::JsonPartial => "TextData",
        EventKind::ToolCall => "ToolCallData",
        EventKind::ToolResult => "ToolResultData",
        EventKind::InputRequired => "InputRequiredData",
        EventKind::Handoff => "HandoffData",
        EventKind::Speaker => "SpeakerData",
        EventKind::Usage => "UsageData",
        EventKind::Error => "ErrorData",
        EventKind::Final => "FinalData",
    }
}

/// The component of the events of `kind`: `token` → `TokenEvent`.
fn event_schema(kind: EventKind) -> String {
    let words = kind.as_str().split('_');
    let camel: String = words.map(|w| w[..1].to_uppercase() + &w[1..]).collect();
    format!("{camel}Event")
}

/// `Event` as a union discriminated by `kind`: one component per kind (`TokenEvent`, …), the
/// derived event's fields with `kind` fixed to one value and `data` typed by it, so clients
/// generated from the document read an event's data by its kind.
fn type_events(doc: &mut Value) {
    let components = &mut doc["components"]["schemas"];
    let derived = components["Event"].take();
    let mut variants = Vec::new();
    let mut mapping = serde_json::Map::new();
    for kind in EventKind::ALL {
        let mut variant = derived.clone();
        variant["description"] = json!(format!("A `{}` event.", kind.as_str()));
        variant["properties"]["kind"] = json!({ "type": "string", "enum": [kind.as_str()] });
        let data = format!("#/components/schemas/{}", data_schema(kind));
        variant["properties"]["data"] = json!({ "$ref": data });
        let name = event_schema(kind);
        let reference = format!("#/components/schemas/{name}");
        components[&name] = variant;
        variants.push(json!({ "$ref": reference }));
        mapping.insert(kind.as_str().to_owned(), json!(reference));
    }
    components["Event"] = json!({
        "description": derived["description"],
        "oneOf": variants,
        "discriminator": { "propertyName": "kind", "mapping": mapping },
    });
}

/// A struct's flattened `Option<T>` field derives as `allOf: [oneOf: [T, null], ...]`, which no
/// object matches when the field is absent (an object is never `null`, nor a `T` without its
/// required members). The honest schema, put in place in every component: `T`'s properties,
/// none required.
fn open_optional_flattened(components: &mut Value) {
    let targets = components.clone();
    let Some(components) = components.as_object_mut() else {
        return;
    };
    let parts = components
        .values_mut()
        .filter_map(|schema| schema.get_mut("allOf").and_then(Value::as_array_mut))
        .flatten();
    for part in parts {
        let Some(flattened) = optional_reference(part).and_then(|r| targets.get(r)) else {
            continue;
        };
        *part = json!({
            "description": part["oneOf"][0]["description"],
            "properties": flattened["properties"],
            "type": "object",
        });
    }
}

/// The component `part` names when it is `oneOf: [{$ref: T}, {type: null}]`.
fn optional_reference(part: &Value) -> Option<&str> {
    let [some, none] = part["oneOf"].as_array()?.as_slice() else {
        return None;
    };
    if *none != json!({ "type": "null" }) {
        return None;
    }
    some["$ref"].as_str()?.strip_prefix("#/components/schemas/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_point_inside_the_document() {
        fn refs(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        out.push(r.clone());
                    }
                    m.values().for_each(|v| refs(v, out));
                }
                Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
                _ => {}
            }
        }
        let doc = document();
        let mut all = Vec::new();
        refs(&doc, &mut all);
        assert!(!all.is_empty());
        for r in all {
            let pointer = r.strip_prefix('#').expect("local reference");
            assert!(doc.pointer(pointer).is_some(), "dangling {r}");
        }
    }

    #[test]
    fn every_event_kind_has_a_variant_with_typed_data() {
        let doc = document();
        let schemas = &doc["components"]["schemas"];
        let variants = schemas["Event"]["oneOf"].as_array().unwrap();
        assert_eq!(variants.len(), EventKind::ALL.len());
        for kind in EventKind::ALL {
            let variant = &schemas[event_schema(kind)];
            assert_eq!(
                variant["properties"]["kind"]["enum"],
                json!([kind.as_str()])
            );
            let data = variant["properties"]["data"]["$ref"].as_str().unwrap();
            let pointer = data.strip_prefix('#').unwrap();
            assert!(doc.pointer(pointer).is_some(), "{kind:?}: {data}");
        }
        assert_eq!(event_schema(EventKind::JsonPartial), "JsonPartialEvent");
    }

    /// A `plan` event's data: a first version (no `change`) or a later one.
    fn plan_payload(change: Option<crate::domain::replan::PlanChange>) -> crate::domain::Payload {
        crate::domain::event::PlanData {
            version: 1,
            reason: "initial".into(),
            plan: std::sync::Arc::new(json!({ "steps": [] })),
            critical_path: vec!["a".into()],
            critical_path_ms: 3,
            change,
        }
        .into()
    }

    /// How a re-planned version came to be.
    fn replanned() -> crate::domain::replan::PlanChange {
        use crate::domain::error::{ErrorCode, RunError};
        use crate::domain::replan::{PlanChange, PlanDiff, Strategy, Trigger, TriggerKind};
        PlanChange {
            trigger: Trigger {
                kind: TriggerKind::StepFailed,
                step_id: Some("a".into()),
                error: Some(RunError::new(ErrorCode::ToolTimeout, "slow")),
                message: None,
                request: None,
            },
            strategy: Strategy::Partial,
            explanation: "another way".into(),
            diff: PlanDiff::default(),
            restored_version: None,
            completes_task: true,
        }
    }

    /// One event of every kind (and both shapes of the kinds that have two), serialised as
    /// the server sends them, each valid against the document's `Event` and no other variant.
    fn sample_events() -> Vec<crate::domain::Event> {
        use crate::domain::error::{ErrorCode, RunError};
        use crate::domain::event::*;
        use crate::domain::plan::{StepKind, StepStatus};
        use crate::domain::run::{Completion, Orchestration, RunStatus, SelectedBy, Selection};
        let failed = RunError::new(ErrorCode::ToolTimeout, "slow");
        let mut running = Payload::status(RunStatus::Running);
        if let Payload::Status(data) = &mut running {
            data.selected = Some(Selection {
                orchestration: Orchestration::Fixed,
                by: SelectedBy::Request,
                rule: None,
                reason: "asked".into(),
            });
        }
        let mut done = StepData::new("a", "a", StepKind::Tool, StepStatus::Completed, 1);
        done.output = Some(json!({ "result": 2 }));
        done.duration_ms = Some(4);
        let result = |outcome| ToolResultData {
            call_id: "c1".into(),
            tool: "math.calculate".into(),
            result: outcome,
            task: None,
        };
        let payloads: Vec<Payload> = vec![
            running,
            Payload::status(RunStatus::WaitingInput),
            plan_payload(None),
            plan_payload(Some(replanned())),
            done.into(),
            Payload::token("hi"),
            Payload::json_partial("{"),
            ToolCallData {
                call_id: "c1".into(),
                tool: "t".into(),
                arguments: json!("{bad"),
            }
            .into(),
            result(ToolOutcome::Output(json!(2))).into(),
            result(ToolOutcome::Error(failed.clone())).into(),
            InputRequiredData {
                step_id: "ask".into(),
                prompt: "go on?".into(),
                schema: Some(json!({ "type": "boolean" })),
                kind: None,
                plan_version: None,
                plan: None,
            }
            .into(),
            HandoffData {
                from: "a".into(),
                to: "b".into(),
                reason: None,
            }
            .into(),
            SpeakerData {
                agent: "a".into(),
                round: 1,
            }
            .into(),
            UsageData {
                prompt_tokens: 3,
                completion_tokens: 4,
            }
            .into(),
            ErrorData {
                error: failed.clone(),
                step_id: Some("a".into()),
            }
            .into(),
            FinalData {
                status: RunStatus::Failed,
                completion: Completion::Error,
                completion_reason: Some("a step failed".into()),
                step_counts: Some(Default::default()),
                output: None,
                usage: Default::default(),
                error: Some(failed),
            }
            .into(),
        ];
        let events = payloads.into_iter().enumerate();
        let events = events.map(|(i, data)| crate::domain::Event {
            seq: i as u64 + 1,
            run_id: crate::domain::RunId::new(),
            kind: data.kind(),
            ts: chrono::Utc::now(),
            step_id: None,
            path: None,
            data,
        });
        events.collect()
    }

    #[test]
    fn every_kind_of_event_the_server_sends_matches_exactly_one_variant() {
        let doc = document();
        let against = |name: &str| {
            let mut root = doc.clone();
            root["$ref"] = json!(format!("#/components/schemas/{name}"));
            jsonschema::validator_for(&root).unwrap()
        };
        let union = against("Event");
        let variants: Vec<_> = EventKind::ALL
            .iter()
            .map(|kind| (*kind, against(&event_schema(*kind))))
            .collect();
        let events = sample_events();
        let kinds: std::collections::HashSet<_> = events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds.len(), EventKind::ALL.len(), "a sample of every kind");
        for event in events {
            let value = serde_json::to_value(&event).unwrap();
            let problems: Vec<_> = union.iter_errors(&value).map(|e| e.to_string()).collect();
            assert!(problems.is_empty(), "{value}: {problems:?}");
            let matching: Vec<_> = variants
                .iter()
                .filter(|(_, v)| v.is_valid(&value))
                .map(|(kind, _)| *kind)
                .collect();
            assert_eq!(matching, [event.kind], "{value}");
        }
    }

    #[test]
    fn a_workflow_reference_is_described_as_the_server_reads_it() {
        use crate::domain::definition::Reference;
        let doc = document();
        let workflow = &doc["components"]["schemas"]["RunRequest"]["properties"]["workflow"];
        let name = jsonschema::validator_for(&workflow["anyOf"][0]).unwrap();
        let samples = [
            "clock",
            "clock@latest",
            "clock@2",
            "clock@production",
            "a.b-c_d@v1.0",
            "clock@0",
            "clock@",
            "@2",
            "Clock",
            "clock@2@3",
            "clock@Prod",
            "clock@1x",
            "clock@-x",
        ];
        for text in samples {
            let read = Reference::parse(text).is_ok();
            assert_eq!(
                name.is_valid(&json!(text)),
                read,
                "{text}: the server reads it: {read}"
            );
        }
    }

    #[test]
    fn no_flattened_option_is_left_as_one_of_t_or_null() {
        let doc = document();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for (name, schema) in schemas {
            for part in schema["allOf"].as_array().into_iter().flatten() {
                assert_eq!(optional_reference(part), None, "{name}: {part}");
            }
        }
        let plan = &schemas["PlanData"]["allOf"][0];
        assert!(plan["properties"]["trigger"].is_object(), "{plan}");
        assert!(plan.get("required").is_none(), "{plan}");
    }

    #[test]
    fn refs_are_rewritten() {
        assert_eq!(
            rewrite_ref("#/$defs/step", "AgentPlan"),
            "#/components/schemas/AgentPlan_step"
        );
        assert_eq!(
            rewrite_ref("AgentPlan.schema.json#/properties/id", "FixedWorkflow"),
            "#/components/schemas/AgentPlan/properties/id"
        );
        assert_eq!(
            rewrite_ref("AgentPlan.schema.json#/$defs/settings", "FixedWorkflow"),
            "#/components/schemas/AgentPlan_settings"
        );
    }
}
