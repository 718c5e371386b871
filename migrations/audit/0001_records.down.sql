DROP TABLE heads;
DROP TABLE records;
