-- dockerd's HasBeenManuallyStopped, beside stopped_by_user (its restart manager's
-- "exit on next"): a kill with any signal marks the container manually stopped,
-- which ends an unless-stopped policy, while only the stop signal (or SIGKILL)
-- ends the others (restart.ts). Only a start by the user clears it. Every
-- container stopped so far was stopped both ways.
ALTER TABLE containers ADD COLUMN manually_stopped INTEGER NOT NULL DEFAULT 0;
UPDATE containers SET manually_stopped = stopped_by_user;
