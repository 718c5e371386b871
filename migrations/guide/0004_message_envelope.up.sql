-- The envelope a routed message was published with (protobuf), so that a
-- retried request publishes exactly the same one: its structured intent,
-- confidence chain and pre-routing consultation included.
ALTER TABLE messages ADD COLUMN envelope bytea;
