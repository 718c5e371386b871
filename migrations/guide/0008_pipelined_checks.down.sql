DROP FUNCTION IF EXISTS fail_check(text);
