-- A container's health (health.ts): Docker's State.Health as JSON (Status,
-- FailingStreak, Log), NULL until it first runs with a health check. Written
-- when the status changes and when the checks stop, as dockerd checkpoints it;
-- the results in between live in memory.
ALTER TABLE containers ADD COLUMN health TEXT;
