//! The `schedules/` files of a bundle `POST /v1/apply` takes (issue 45), and those
//! `GET /v1/export` writes. A file is the body of `POST /v1/schedules`, keyed by its name:
//! the file's stem, which a `name` in it must repeat. Apply manages the tenant's schedules
//! whose name could be a file's (the rule of definition names); a schedule made through
//! `/v1/schedules` without a name, or with another kind of name, is never touched. A file is
//! checked as `POST /v1/schedules` checks a body, its run body with the bundle in front of the
//! registries; the plan compares the declarative members (timing, run, enabled, missed) with
//! the stored schedule's, and the writes join the apply's transaction. Schedules keep no
//! versions.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::AppState;
use super::apply::{Action, BundleFile, Change, ChangeKind, problem};
use super::error::{ApiError, FieldError};
use super::extract::deserialize_located;
use super::schedules::{CreateSchedule, check_over};
use crate::agents::Overlay;
use crate::domain::Tenant;
use crate::domain::ids::check_name;
use crate::store::{ScheduleChanges, ScheduleRecord};

/// A `schedules/` file of a bundle, read as an object.
pub(super) struct ScheduleFile {
    pub index: usize,
    pub path: String,
    pub stem: String,
    pub content: Value,
}

/// The bundle's schedules: their lines of the plan, and the writes.
pub(super) struct Scheduled {
    pub plan: Vec<Change>,
    pub changes: ScheduleChanges,
}

/// The declarative members of a schedule: what its file holds, and what an apply compares.
fn form(s: &ScheduleRecord) -> Value {
    let mut members = Map::new();
    if let Some(cron) = &s.cron {
        members.insert("cron".into(), Value::String(cron.clone()));
        members.insert("timezone".into(), Value::String(s.timezone.clone()));
    }
    if let Some(ms) = s.interval_ms {
        members.insert("interval_ms".into(), Value::from(ms));
    }
    members.insert("run".into(), s.run.clone());
    members.insert("enabled".into(), Value::Bool(s.enabled));
    members.insert("missed".into(), Value::String(s.missed.as_str().into()));
    Value::Object(members)
}

/// The tenant's schedules an apply manages (those named like files), by name, oldest first;
/// and how many schedules the tenant has in all.
async fn managed(
    state: &AppState,
    tenant: &Tenant,
) -> Result<(BTreeMap<String, Vec<ScheduleRecord>>, usize), ApiError> {
    let all = state.schedules.list_schedules(tenant).await?;
    let count = all.len();
    let mut named: BTreeMap<String, Vec<ScheduleRecord>> = BTreeMap::new();
    for s in all {
        if let Some(name) = s.name.clone().filter(|n| check_name(n).is_ok()) {
            named.entry(name).or_default().push(s);
        }
    }
    Ok((named, count))
}

/// A file's schedule as it would be stored (not yet checked), or its problems.
fn read(
    tenant: &Tenant,
    file: &ScheduleFile,
    now: chrono::DateTime<chrono::Utc>,
    problems: &mut Vec<FieldError>,
) -> Option<ScheduleRecord> {
    let at = |pointer: &str, message: String| {
        problem(
            file.index,
            &file.path,
            &format!("/content{pointer}"),
            message,
        )
    };
    if let Err(message) = check_name(&file.stem) {
        problems.push(problem(file.index, &file.path, "/path", message));
        return None;
    }
    let body: CreateSchedule = match deserialize_located(file.content.clone()) {
        Ok(body) => body,
        Err(ApiError::Validation { errors, .. }) => {
            problems.extend(errors.into_iter().map(|e| at(&e.pointer, e.message)));
            return None;
        }
        Err(other) => {
            problems.push(at("", other.to_string()));
            return None;
        }
    };
    if let Some(name) = body.name.as_ref().filter(|n| **n != file.stem) {
        let message = format!(
            "`{name}` is not the file's name `{}`: a schedule's file is named after it",
            file.stem
        );
        problems.push(at("/name", message));
        return None;
    }
    Some(ScheduleRecord {
        id: uuid::Uuid::now_v7().to_string(),
        tenant: tenant.clone(),
        name: Some(file.stem.clone()),
        cron: body.cron,
        timezone: body.timezone.unwrap_or_else(|| "UTC".into()),
        interval_ms: body.interval_ms,
        anchor_at: now,
        run: body.run,
        enabled: body.enabled.unwrap_or(true),
        missed: body.missed.unwrap_or_default(),
        next_fire_at: None,
        last_fire_at: None,
        last_run_id: None,
        fire_count: 0,
        created_at: now,
        updated_at: now,
        retry_at: None,
        retries: 0,
        retry_reason: None,
    })
}

/// A line of the plan for schedule `name`.
fn line(name: &str, path: Option<&str>, action: Action, changes: Option<Value>) -> Change {
    Change {
        kind: ChangeKind::Schedule,
        name: name.to_owned(),
        path: path.map(str::to_owned),
        action,
        version: None,
        previous_version: None,
        changes,
    }
}

/// Checks every schedule file (as `POST /v1/schedules` would, the run body with `overlay` in
/// front of the registries) and plans it against the tenant's schedule of its name: created,
/// changed (its timing counting from now when it changed, as `PATCH` does), unchanged (not
/// written: it keeps its next tick), and with `prune` the managed schedules no file names
/// deleted. Problems go to `problems`.
pub(super) async fn check(
    state: &AppState,
    tenant: &Tenant,
    files: &[ScheduleFile],
    overlay: Arc<Overlay>,
    prune: bool,
    problems: &mut Vec<FieldError>,
) -> Result<Scheduled, ApiError> {
    let now = crate::domain::now();
    let (existing, count) = managed(state, tenant).await?;
    let mut plan = Vec::new();
    let mut changes = ScheduleChanges::default();
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    for file in files {
        let Some(mut s) = read(tenant, file, now, problems) else {
            continue;
        };
        let at = |message: String| problem(file.index, &file.path, "/content", message);
        if let Some(first) = seen.insert(file.stem.clone(), &file.path) {
            let message = format!(
                "schedule `{}` is defined twice: here and in {first}",
                file.stem
            );
            problems.push(problem(file.index, &file.path, "/path", message));
            continue;
        }
        let current = existing
            .get(&file.stem)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if current.len() > 1 {
            problems.push(at(format!(
                "the tenant has {} schedules named `{}`, so apply cannot tell which this file \
                 is: rename or delete all but one (PATCH or DELETE /v1/schedules/{{id}})",
                current.len(),
                file.stem
            )));
            continue;
        }
        let current = current.first();
        let mut restart = true;
        if let Some(c) = current {
            let retimed =
                (&c.cron, &c.timezone, c.interval_ms) != (&s.cron, &s.timezone, s.interval_ms);
            restart = retimed || (s.enabled && !c.enabled);
            s.id = c.id.clone();
            s.created_at = c.created_at;
            if !restart {
                s.anchor_at = c.anchor_at;
            }
        }
        match check_over(state, tenant, &mut s, now, Some(overlay.clone())).await {
            Ok(()) => {}
            Err(ApiError::Validation { errors, .. }) => {
                problems.extend(errors.into_iter().map(|e| {
                    problem(
                        file.index,
                        &file.path,
                        &format!("/content{}", e.pointer),
                        e.message,
                    )
                }));
                continue;
            }
            Err(other) => return Err(other),
        }
        let path = Some(file.path.as_str());
        match current {
            None => {
                plan.push(line(&file.stem, path, Action::Created, None));
                changes.created.push(s);
            }
            Some(c) if form(c) == form(&s) => {
                plan.push(line(&file.stem, path, Action::Unchanged, None));
            }
            Some(c) => {
                let diff = serde_json::to_value(json_patch::diff(&form(c), &form(&s)))
                    .map_err(ApiError::internal)?;
                plan.push(line(&file.stem, path, Action::Changed, Some(diff)));
                changes.changed.push((s, restart));
            }
        }
    }
    if prune {
        for (name, stored) in existing.iter().filter(|(n, _)| !seen.contains_key(*n)) {
            plan.push(line(name, None, Action::Deleted, None));
            changes.deleted.extend(stored.iter().map(|s| s.id.clone()));
        }
    }
    problems.extend(past_quota(state, tenant, count, &changes));
    Ok(Scheduled { plan, changes })
}

/// The problem of an apply that would take the tenant (with `count` schedules) past its
/// quota `schedules`.
fn past_quota(
    state: &AppState,
    tenant: &Tenant,
    count: usize,
    changes: &ScheduleChanges,
) -> Option<FieldError> {
    let cap = state.config.quotas.of(&tenant.0).schedules;
    let after = count + changes.created.len() - changes.deleted.len();
    (cap > 0 && after as u64 > cap && !changes.created.is_empty()).then(|| {
        FieldError::new(
            "/files",
            format!(
                "the tenant would have {after} schedules, more than its quota `schedules` \
                 ({cap}) allows"
            ),
        )
    })
}

/// The tenant's managed schedules as `schedules/NAME.json` files, by name (of two sharing a
/// name, the oldest: an apply asks for one of them to go).
pub(super) async fn export(state: &AppState, tenant: &Tenant) -> Result<Vec<BundleFile>, ApiError> {
    let (named, _) = managed(state, tenant).await?;
    let mut files = Vec::new();
    for (name, schedules) in named {
        let Some(s) = schedules.first() else {
            continue;
        };
        let mut content = serde_json::to_string_pretty(&form(s)).map_err(ApiError::internal)?;
        content.push('\n');
        files.push(BundleFile {
            path: format!("schedules/{name}.json"),
            content,
        });
    }
    Ok(files)
}
