DROP TABLE terms;
