DROP TABLE reviews;
