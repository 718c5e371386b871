ALTER TABLE nodes DROP COLUMN worker_received_time, DROP COLUMN worker_reported_time;
