-- Names and keys refuse control and invisible characters; payload nesting
-- has a limit (issue 9).
--
-- prescient_validate_key accepted any text of 1 to 512 bytes: a key holding
-- a newline, an escape sequence (ESC [ 3 1 m) or a bidirectional override
-- garbled the tables the CLI prints, or wrote to the terminal that printed
-- it. It now refuses, as Go's checks.ValidateKey does and with its message,
-- control characters (U+0001–U+001F, U+007F–U+009F: text cannot hold
-- U+0000), bidirectional controls (U+061C, U+200E, U+200F, U+202A–U+202E,
-- U+2066–U+2069), line and paragraph separators (U+2028, U+2029) and
-- zero-width characters (U+200B, U+2060, U+FEFF).
--
-- prescient_validate_name already refused them (a name is ASCII letters,
-- digits and _.:-), but echoed the name through to_json, which leaves the
-- C1 controls and bidirectional controls as they are: a name holding one
-- is now refused with a message naming the character, as in Go, instead.
--
-- prescient_validate_payload is new: it refuses a payload of more than
-- 65536 bytes (as prescient_schedule does) or nesting arrays and objects
-- more than 64 deep (Go's checks.PayloadDepthMax), with the Go client's
-- messages. Nothing calls it yet: prescient_schedule keeps its own size
-- check until it is redefined to call this function instead.
--
-- The list of characters is written out, in both languages, rather than
-- taken from Unicode's categories, so that Go and PostgreSQL refuse the same
-- keys whatever Unicode version either knows.

-- +goose Up

-- prescient_validate_name raises invalid_parameter_value unless p_name may
-- name a check, an entity, an event or a server, with the rule and message
-- of Go's checks.ValidateName.
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

-- prescient_validate_key raises invalid_parameter_value unless p_key may be
-- the key of entity p_entity (a valid name), with the rule and message of
-- Go's checks.ValidateKey: 1 to 512 bytes without the characters listed at
-- the top of this file. The class is written with \u escapes in an E''
-- string so that it does not depend on standard_conforming_strings.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_validate_key(p_entity text, p_key text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_char text;
    v_code int;
BEGIN
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 512 THEN
        RAISE EXCEPTION 'entity %: key must be 1 to 512 bytes, got %',
            p_entity, coalesce(octet_length(p_key)::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_char := substring(p_key FROM E'[\\u0001-\\u001f\\u007f-\\u009f\\u061c\\u200b\\u200e\\u200f\\u2028-\\u202e\\u2060\\u2066-\\u2069\\ufeff]');
    IF v_char IS NOT NULL THEN
        v_code := ascii(v_char);
        RAISE EXCEPTION 'entity %: key has U+%, %, at character %: a key is 1 to 512 bytes of UTF-8 text without control characters, bidirectional controls, line or paragraph separators or zero-width characters',
            p_entity, lpad(upper(to_hex(v_code)), 4, '0'),
            CASE
                WHEN v_code <= 31 OR v_code BETWEEN 127 AND 159 THEN 'a control character'
                WHEN v_code IN (8232, 8233) THEN 'a line or paragraph separator'
                WHEN v_code IN (8203, 8288, 65279) THEN 'a zero-width character'
                ELSE 'a bidirectional control'
            END,
            strpos(p_key, v_char)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
-- +goose StatementEnd

-- prescient_validate_payload raises invalid_parameter_value unless p_payload
-- (NULL: no payload) may be the payload of the job (p_entity, p_key,
-- p_check), with the limits and messages of Go's checks.ValidatePayload:
-- at most 65536 bytes as PostgreSQL prints the jsonb (with a space after
-- each ':' and ','), and arrays and objects nested at most 64 deep. The
-- rest of Go's rules (UTF-8, no \u0000, no half surrogate pair) jsonb
-- enforces itself, with its own errors, before any function is called.
-- +goose StatementBegin
CREATE FUNCTION prescient_validate_payload(p_entity text, p_key text, p_check text, p_payload jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_size int;
BEGIN
    IF p_payload IS NULL THEN
        RETURN;
    END IF;
    v_size := octet_length(p_payload::text);
    IF v_size > 65536 THEN
        RAISE EXCEPTION '%/%/%: payload is % bytes, more than the 65536 allowed', p_entity, p_key, p_check, v_size
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The document itself is at level 0, so an array or object at level 64
    -- is the 65th nested one.
    IF jsonb_path_exists(p_payload, 'strict $.**{64} ? (@.type() == "array" || @.type() == "object")') THEN
        RAISE EXCEPTION '%/%/%: payload nests arrays and objects more than 64 levels deep', p_entity, p_key, p_check
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION prescient_validate_payload(text, text, text, jsonb);

-- As in migration 00001.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_validate_key(p_entity text, p_key text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 512 THEN
        RAISE EXCEPTION 'entity %: key must be 1 to 512 bytes, got %',
            p_entity, coalesce(octet_length(p_key)::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
-- +goose StatementEnd

-- As in migration 00001.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_validate_name(p_what text, p_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$' THEN
        RAISE EXCEPTION 'invalid % name %: use 1 to 100 letters, digits, ''_'', ''.'', '':'' or ''-'', starting with a letter, digit or ''_''',
            p_what, coalesce(to_json(p_name)::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
-- +goose StatementEnd
