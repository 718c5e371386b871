-- A node cancelled while its command ran keeps what the command printed
-- until then, marked partial (spec C-32).
ALTER TABLE nodes ADD COLUMN output_partial boolean NOT NULL DEFAULT false;
