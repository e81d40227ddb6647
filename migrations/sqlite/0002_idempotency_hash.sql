-- The fingerprint (SHA-256 of the canonical request) of a run created under an Idempotency-Key,
-- so a later request with the same key but a different body is refused instead of being
-- answered with a run it did not ask for. NULL for runs without a key, and for keyed runs
-- stored before this column existed (their stored spec answers instead).
ALTER TABLE runs ADD COLUMN idempotency_hash TEXT;
