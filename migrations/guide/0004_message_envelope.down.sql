ALTER TABLE messages DROP COLUMN envelope;
