-- How a run's orchestration was chosen (`Run::selected`): `{orchestration, by, rule, reason}`
-- as JSON. NULL while an `auto` run waits to ask the model, and for runs stored before
-- selections were recorded. Stored once decided, so a resumed run runs what was chosen.
ALTER TABLE runs ADD COLUMN selection TEXT;
