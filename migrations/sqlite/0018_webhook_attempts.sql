-- Webhooks among many tenants (issue 42). An attempt is recorded (`outcome = 'sending'`)
-- before it is sent and settled after, so one that a crash cut off still shows: the next
-- claim marks it `interrupted`. A delivery names its destination (`host:port`), so that each
-- replica caps the attempts in flight to one destination; rows queued before have none.
ALTER TABLE webhook_attempts ADD COLUMN outcome TEXT NOT NULL DEFAULT 'failed';
UPDATE webhook_attempts SET outcome = 'delivered' WHERE status_code >= 200 AND status_code < 300;
UPDATE webhook_attempts SET outcome = 'refused' WHERE error LIKE 'destination refused%';
ALTER TABLE webhook_deliveries ADD COLUMN destination TEXT;
