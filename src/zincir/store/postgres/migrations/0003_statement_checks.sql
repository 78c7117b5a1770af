-- zincir_fail(reason): raise from inside one statement, so that a write done as a single
-- statement (its fence, its checks and its effects in one WITH) stores nothing when a
-- check fails. SQLSTATE ZC001; the message is the reason, read by the store.

CREATE FUNCTION zincir_fail(reason text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'ZC001', MESSAGE = reason;
END
$$;
