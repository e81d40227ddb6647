-- Resumes that hold (issue 42): the breakpoint places a run is paused at, and those a resume
-- let it past, kept with its row (each place followed by a newline). `POST .../resume` moves
-- the held places to the released ones in the statement it answers 202 after, so a kill or a
-- takeover right after it does not stop the run at that breakpoint again.
ALTER TABLE runs ADD COLUMN breakpoints_held TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN breakpoints_released TEXT NOT NULL DEFAULT '';
