-- A group commit sends BEGIN, its members' writes and COMMIT in one round
-- trip, so a member's check must fail on the server, where it aborts the
-- transaction before COMMIT, rather than in the client after it. A check
-- statement calls fail_check when it does not hold.
CREATE FUNCTION fail_check(message text) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
	RAISE EXCEPTION '%', message USING ERRCODE = 'check_violation';
END
$$;
