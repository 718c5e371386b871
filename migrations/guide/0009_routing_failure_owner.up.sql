-- Whose message a routing failure is about: the list shows a member only
-- their own (an admin the tenant's), since a failure holds the message.
ALTER TABLE routing_failures ADD COLUMN user_id text NOT NULL DEFAULT '';
UPDATE routing_failures f SET user_id = s.user_id
    FROM sessions s WHERE s.tenant_id = f.tenant_id AND s.id::text = f.session_id;
CREATE INDEX routing_failures_user_idx ON routing_failures (tenant_id, user_id, create_time DESC);
