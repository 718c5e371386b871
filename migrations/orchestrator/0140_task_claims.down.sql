DROP TABLE task_claims;
