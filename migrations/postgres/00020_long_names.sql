-- prescient_validate_name refuses a name longer than 100 bytes with its
-- length, as Go's checks.ValidateName does, instead of quoting it: a name of
-- a megabyte (found by a trial of bad input) made an error of a megabyte, in
-- the application's logs and in every client that printed it.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_validate_name(p_what text, p_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_char text;
    v_code int;
BEGIN
    IF p_name IS NOT NULL AND p_name ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$' THEN
        RETURN;
    END IF;
    -- As in prescient_validate_key.
    v_char := substring(p_name FROM E'[\\u0001-\\u001f\\u007f-\\u009f\\u061c\\u200b\\u200e\\u200f\\u2028-\\u202e\\u2060\\u2066-\\u2069\\ufeff]');
    IF v_char IS NOT NULL THEN
        v_code := ascii(v_char);
        RAISE EXCEPTION 'invalid % name: U+%, %, at character %: use 1 to 100 letters, digits, ''_'', ''.'', '':'' or ''-'', starting with a letter, digit or ''_''',
            p_what, lpad(upper(to_hex(v_code)), 4, '0'),
            CASE
                WHEN v_code <= 31 OR v_code BETWEEN 127 AND 159 THEN 'a control character'
                WHEN v_code IN (8232, 8233) THEN 'a line or paragraph separator'
                WHEN v_code IN (8203, 8288, 65279) THEN 'a zero-width character'
                ELSE 'a bidirectional control'
            END,
            strpos(p_name, v_char)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(p_name) > 100 THEN
        RAISE EXCEPTION 'invalid % name: % bytes, more than 100: use 1 to 100 letters, digits, ''_'', ''.'', '':'' or ''-'', starting with a letter, digit or ''_''',
            p_what, octet_length(p_name)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RAISE EXCEPTION 'invalid % name %: use 1 to 100 letters, digits, ''_'', ''.'', '':'' or ''-'', starting with a letter, digit or ''_''',
        p_what, coalesce(to_json(p_name)::text, 'NULL')
        USING ERRCODE = 'invalid_parameter_value';
END
$$;
-- +goose StatementEnd

-- +goose Down
-- As in migration 00006.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_validate_name(p_what text, p_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_char text;
    v_code int;
BEGIN
    IF p_name IS NOT NULL AND p_name ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$' THEN
        RETURN;
    END IF;
    -- As in prescient_validate_key.
    v_char := substring(p_name FROM E'[\\u0001-\\u001f\\u007f-\\u009f\\u061c\\u200b\\u200e\\u200f\\u2028-\\u202e\\u2060\\u2066-\\u2069\\ufeff]');
    IF v_char IS NOT NULL THEN
        v_code := ascii(v_char);
        RAISE EXCEPTION 'invalid % name: U+%, %, at character %: use 1 to 100 letters, digits, ''_'', ''.'', '':'' or ''-'', starting with a letter, digit or ''_''',
            p_what, lpad(upper(to_hex(v_code)), 4, '0'),
            CASE
                WHEN v_code <= 31 OR v_code BETWEEN 127 AND 159 THEN 'a control character'
                WHEN v_code IN (8232, 8233) THEN 'a line or paragraph separator'
                WHEN v_code IN (8203, 8288, 65279) THEN 'a zero-width character'
                ELSE 'a bidirectional control'
            END,
            strpos(p_name, v_char)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RAISE EXCEPTION 'invalid % name %: use 1 to 100 letters, digits, ''_'', ''.'', '':'' or ''-'', starting with a letter, digit or ''_''',
        p_what, coalesce(to_json(p_name)::text, 'NULL')
        USING ERRCODE = 'invalid_parameter_value';
END
$$;
-- +goose StatementEnd
