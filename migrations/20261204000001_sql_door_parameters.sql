-- The schema of the SQL door: functions a caller runs inside its own
-- transaction, over the same tables as the gRPC service. This first part is
-- the parameter fingerprint, so that a digest computed here is the one the
-- server and every client compute (proto/parameters.rs states the rule;
-- client/testdata/parameter_digests.json holds the vectors all of them pass):
--
--   SELECT opreg_sql.parameters_digest('{"amount": 100, "account": "A"}');
--
-- Every function here is IMMUTABLE and reads no table.
--
-- Not named `opreg`: the role that runs the registry is usually called that,
-- and PostgreSQL's default search path begins with "$user". A schema named
-- like the role would come first in every session's path, so sqlx would keep
-- a new, empty migrations table there and run every migration again at the
-- next start (tests/maintenance.rs's replicas showed it).

CREATE SCHEMA opreg_sql;

COMMENT ON SCHEMA opreg_sql IS
    'opreg''s SQL door: claim, complete and look up operations inside the caller''s transaction';

-- A number as ECMAScript's Number.prototype.toString writes the nearest
-- double. PostgreSQL prints a float8 with digits that read back to the same
-- double (extra_float_digits >= 1): the shortest, except where a shorter one
-- lies exactly halfway to the next double and reads back by rounding to even
-- (-272609761866344400 reads as -272609761866344384, PostgreSQL prints
-- -2.7260976186634438e+17). So the shortest rounding of those digits that
-- reads back is taken, then laid out by ECMAScript's rule (ECMA-262,
-- Number::toString):
-- with k digits s and the decimal point after n of them,
--   k <= n <= 21      s, then n - k zeros
--   0 < n <= 21       s with the point after n digits
--   -6 < n <= 0       0. then -n zeros, then s
--   otherwise         s with a point after its first digit, e, the sign, n - 1
CREATE FUNCTION opreg_sql.canonical_number(value float8) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET extra_float_digits = 1
AS $$
DECLARE
    printed text;
    mantissa text;
    exponent int;
    digits text;
    point int;
    k int;
    shorter numeric;
    candidate numeric;
    sign text := '';
BEGIN
    IF value IN ('NaN'::float8, 'Infinity'::float8, '-Infinity'::float8) THEN
        RAISE EXCEPTION 'a parameter is not a finite number'
            USING ERRCODE = 'invalid_parameter_value', DETAIL = 'INVALID_ARGUMENT';
    END IF;
    IF value = 0 THEN
        RETURN '0'; -- negative zero too
    END IF;
    IF value < 0 THEN
        sign := '-';
        value := -value;
    END IF;
    printed := value::text;
    mantissa := split_part(printed, 'e', 1);
    exponent := coalesce(nullif(split_part(printed, 'e', 2), '')::int, 0);
    digits := replace(mantissa, '.', '');
    point := length(split_part(mantissa, '.', 1)) + exponent;
    -- Leading zeros move the point; trailing ones are not significant.
    point := point - (length(digits) - length(ltrim(digits, '0')));
    digits := rtrim(ltrim(digits, '0'), '0');
    k := length(digits);
    FOR j IN 1 .. k - 1 LOOP
        shorter := round(digits::numeric, j - k);
        candidate := (shorter::text || 'e' || (point - k))::numeric;
        -- Rounded up past the largest double, it reads as no double at all.
        IF candidate <= 1.7976931348623157e308 AND candidate::float8 = value THEN
            -- Its j leading digits, or j + 1 after a carry (999 -> 1000),
            -- which moves the point one place.
            shorter := trim_scale(shorter / 10::numeric ^ (k - j));
            point := point + length(shorter::text) - j;
            digits := rtrim(shorter::text, '0');
            k := length(digits);
            EXIT;
        END IF;
    END LOOP;
    IF k <= point AND point <= 21 THEN
        RETURN sign || digits || repeat('0', point - k);
    ELSIF 0 < point AND point <= 21 THEN
        RETURN sign || substr(digits, 1, point) || '.' || substr(digits, point + 1);
    ELSIF -6 < point AND point <= 0 THEN
        RETURN sign || '0.' || repeat('0', -point) || digits;
    END IF;
    RETURN sign || substr(digits, 1, 1)
        || CASE WHEN k > 1 THEN '.' || substr(digits, 2) ELSE '' END
        || 'e' || CASE WHEN point - 1 >= 0 THEN '+' ELSE '-' END || abs(point - 1)::text;
END
$$;

-- A string in JSON with only ", \ and control characters below U+0020
-- escaped (RFC 8785 §3.2.2.2): the short forms where JSON has them, else
-- \u00xx.
CREATE FUNCTION opreg_sql.canonical_string(value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    escaped text := replace(replace(value, '\', '\\'), '"', '\"');
    result text := '';
    c text;
BEGIN
    IF escaped !~ '[\x01-\x1f]' THEN
        RETURN '"' || escaped || '"';
    END IF;
    FOREACH c IN ARRAY regexp_split_to_array(escaped, '') LOOP
        result := result || CASE
            WHEN ascii(c) >= 32 THEN c
            WHEN c = chr(8) THEN '\b'
            WHEN c = chr(12) THEN '\f'
            WHEN c = chr(10) THEN '\n'
            WHEN c = chr(13) THEN '\r'
            WHEN c = chr(9) THEN '\t'
            ELSE '\u' || lpad(to_hex(ascii(c)), 4, '0')
        END;
    END LOOP;
    RETURN '"' || result || '"';
END
$$;

-- The UTF-16 code units of a name, big-endian: bytea order is then the order
-- RFC 8785 sorts member names in (§3.2.3), which differs from code point
-- order for characters beyond U+FFFF.
CREATE FUNCTION opreg_sql.utf16_sort_key(name text) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    key bytea := '';
    code int;
    c text;
BEGIN
    FOREACH c IN ARRAY regexp_split_to_array(name, '') LOOP
        code := ascii(c);
        IF code >= 65536 THEN
            code := code - 65536;
            key := key || substr(int4send(55296 + (code >> 10)), 3, 2)
                       || substr(int4send(56320 + (code & 1023)), 3, 2);
        ELSE
            key := key || substr(int4send(code), 3, 2);
        END IF;
    END LOOP;
    RETURN key;
END
$$;

-- The canonical text of a JSON value: members with a null value dropped at
-- every depth (null inside an array is kept), members ordered by the UTF-16
-- code units of their names, numbers and strings as above, no whitespace.
CREATE FUNCTION opreg_sql.canonical_json(value jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
BEGIN
    CASE jsonb_typeof(value)
        WHEN 'object' THEN
            RETURN '{' || coalesce((
                SELECT string_agg(
                    opreg_sql.canonical_string(name) || ':' || opreg_sql.canonical_json(member), ','
                    ORDER BY opreg_sql.utf16_sort_key(name))
                FROM jsonb_each(value) AS members(name, member)
                WHERE jsonb_typeof(member) <> 'null'
            ), '') || '}';
        WHEN 'array' THEN
            RETURN '[' || coalesce((
                SELECT string_agg(opreg_sql.canonical_json(item), ',' ORDER BY position)
                FROM jsonb_array_elements(value) WITH ORDINALITY AS items(item, position)
            ), '') || ']';
        WHEN 'string' THEN
            RETURN opreg_sql.canonical_string(value #>> '{}');
        WHEN 'number' THEN
            -- JSON numbers are doubles to every other door; PostgreSQL's are
            -- exact, and one beyond a double's range would not convert.
            IF abs((value #>> '{}')::numeric) > 1.7976931348623157e308 THEN
                RAISE EXCEPTION 'a parameter is beyond the range of a double'
                    USING ERRCODE = 'invalid_parameter_value', DETAIL = 'INVALID_ARGUMENT';
            END IF;
            RETURN opreg_sql.canonical_number((value #>> '{}')::float8);
        WHEN 'boolean' THEN
            RETURN value::text;
        ELSE
            RETURN 'null';
    END CASE;
END
$$;

-- The digest a Claim of these parameters registers: SHA-256 over the UTF-8
-- bytes of their canonical text. Parameters are an object, as the contract's
-- Struct is.
CREATE FUNCTION opreg_sql.parameters_digest(parameters jsonb) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
BEGIN
    IF jsonb_typeof(parameters) <> 'object' THEN
        RAISE EXCEPTION 'parameters must be a JSON object, not %', jsonb_typeof(parameters)
            USING ERRCODE = 'invalid_parameter_value', DETAIL = 'INVALID_ARGUMENT';
    END IF;
    RETURN sha256(convert_to(opreg_sql.canonical_json(parameters), 'UTF8'));
END
$$;

COMMENT ON FUNCTION opreg_sql.parameters_digest(jsonb) IS
    'SHA-256 of the RFC 8785 text of the parameters (null members dropped): the digest a Claim registers';
COMMENT ON FUNCTION opreg_sql.canonical_json(jsonb) IS
    'The canonical text a parameter digest is taken over (proto/parameters.rs)';
