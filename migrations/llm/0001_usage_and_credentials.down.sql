DROP TABLE IF EXISTS provider_credentials;
DROP TABLE IF EXISTS usage_records;
