"""Every operationId of openapi.yaml and the SDK method that calls it (a dotted path from the
client). The test suite fails when openapi.yaml gains an operation missing here."""

#: operationId -> method path on `Client` / `AsyncClient`.
OPERATIONS: dict[str, str] = {
    "healthz": "health",
    "readyz": "ready",
    "metrics": "metrics",
    # runs
    "create_run": "runs.create",
    "list_runs": "runs.list",
    "get_run": "runs.get",
    "delete_run": "runs.delete",
    "cancel_run": "runs.cancel",
    "submit_input": "runs.input",
    "request_replan": "runs.replan",
    "fork_run": "runs.fork",
    "pause_run": "runs.pause",
    "resume_run": "runs.resume",
    "run_events": "runs.events",  # also runs.join / runs.stream (the SSE form)
    "run_steps": "runs.steps",
    "run_plans": "runs.plans",
    "run_checkpoints": "runs.checkpoints",
    "run_timeline": "runs.timeline",
    "run_webhook": "runs.webhook",
    # registries (the versioned kinds have the same methods)
    "list_workflows": "workflows.list",
    "get_workflow": "workflows.get",
    "put_workflow": "workflows.put",
    "delete_workflow": "workflows.delete",
    "list_agents": "agents.list",
    "get_agent": "agents.get",
    "put_agent": "agents.put",
    "delete_agent": "agents.delete",
    "list_tools": "tools.list",
    "get_tool": "tools.get",
    "put_tool": "tools.put",
    "delete_tool": "tools.delete",
    "list_functions": "functions.list",
    "get_function": "functions.get",
    "put_function": "functions.put",
    "delete_function": "functions.delete",
    # versions, labels, diffs: /v1/{kind}/... under each of workflows, agents, tools, functions
    "list_versions": "workflows.versions.list",
    "get_version": "workflows.versions.get",
    "delete_version": "workflows.versions.delete",
    "put_label": "workflows.labels.set",
    "delete_label": "workflows.labels.delete",
    "diff": "workflows.diff",
    "apply": "definitions.apply",
    "export": "definitions.export",
    # schedules, sessions, usage, models
    "list_schedules": "schedules.list",
    "create_schedule": "schedules.create",
    "get_schedule": "schedules.get",
    "update_schedule": "schedules.update",
    "delete_schedule": "schedules.delete",
    "schedule_fires": "schedules.fires",
    "list_sessions": "sessions.list",
    "get_session": "sessions.get",
    "update_session": "sessions.update",
    "delete_session": "sessions.delete",
    "session_history": "sessions.history",
    "tenant_usage": "usage.get",
    # memory and users
    "put_item": "memory.put",
    "get_item": "memory.get",
    "delete_item": "memory.delete",
    "list_items": "memory.list",
    "search": "memory.search",
    "export_user": "users.export",
    "erase_user": "users.erase",
    # tool workers
    "poll_tasks": "workers.poll",
    "list_workers": "workers.list",
    "list_tasks": "tasks.list",
    "get_task": "tasks.get",
    "heartbeat_task": "tasks.heartbeat",
    "complete_task": "tasks.complete",
    "fail_task": "tasks.fail",
    "list_models": "models.list",
}

#: Operations the SDK leaves to their own protocol's clients.
NOT_COVERED: dict[str, str] = {
    "run_agent": "POST /v1/agui speaks AG-UI; use an AG-UI client",
}
