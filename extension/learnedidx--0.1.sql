-- learnedidx 0.1: in-database ML UDFs (DAnA design) offloaded to the accelerator server.
--
-- Rules of this file (docs/indb.md, "Security model"; tests/indb/test_security.py checks them):
-- * every function either pins `SET search_path = pg_catalog, pg_temp` and qualifies what it
--   calls, or has an SQL-standard body (RETURN / BEGIN ATOMIC), which PostgreSQL parses once,
--   here, so that no search_path at call time changes what it calls;
-- * the public training functions are such bodies: they pass the caller's search_path to the
--   pinned implementation, which uses it only for the caller's own names and expressions
--   (the source, dep/indep, the output table's schema, an algorithm's name);
-- * nothing executable by PUBLIC takes a login, a role, a database or a socket: the data are
--   read in the caller's backend, as the caller, and streamed to the server (offload.c).
\echo Use "CREATE EXTENSION learnedidx CASCADE" to load this file. \quit

GRANT USAGE ON SCHEMA learnedidx TO PUBLIC;

-- ------------------------------------------------------------------------ native code
-- Streams the caller's data to the server and returns its reply (see offload.c).
CREATE FUNCTION learnedidx._offload(op text, args jsonb, source regclass DEFAULT NULL, columns text[] DEFAULT NULL,
                                    query text DEFAULT NULL, search_path text DEFAULT NULL) RETURNS text
LANGUAGE c VOLATILE SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'learnedidx_offload';

-- The score (linregr, DSL models), the class 0/1 (logregr), the label (svm) or u[row] . v[column]
-- (lmf) of a feature vector; the model is read once per query, with the caller's privileges.
CREATE FUNCTION learnedidx.predict(model regclass, features float8[]) RETURNS float8
LANGUAGE c STABLE AS 'MODULE_PATHNAME', 'learnedidx_predict';

CREATE FUNCTION learnedidx.predict_proba(model regclass, features float8[]) RETURNS float8
LANGUAGE c STABLE AS 'MODULE_PATHNAME', 'learnedidx_predict_proba';

-- The same for a model trained with grouping_cols: the group's values, one per grouping column
-- in their order, pick the group's coefficients (NULL for a group the model has not seen).
CREATE FUNCTION learnedidx.predict(model regclass, features float8[], VARIADIC "group" "any") RETURNS float8
LANGUAGE c STABLE AS 'MODULE_PATHNAME', 'learnedidx_predict';

CREATE FUNCTION learnedidx.predict_proba(model regclass, features float8[], VARIADIC "group" "any") RETURNS float8
LANGUAGE c STABLE AS 'MODULE_PATHNAME', 'learnedidx_predict_proba';

-- Refuses (0A000) a grouping column of model `model` whose type predict would not read with the
-- system's code only (see predict.c, group_type_safe): the training functions call it.
CREATE FUNCTION learnedidx._check_group_type(model text, "column" text, type regtype) RETURNS void
LANGUAGE c STABLE STRICT SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'learnedidx_check_group_type';

-- The directory the PL/Python functions import their modules from (SHAREDIR/learnedidx/python,
-- where learnedidx pg install puts them; see learnedidx.c).
CREATE FUNCTION learnedidx._python_path() RETURNS text
LANGUAGE c STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'learnedidx_python_path';

-- MADlib's prediction functions over coefficients (an output table's coef column):
-- coef . features, the class (coef . features > 0) and P(y = 1), computed without overflow.
CREATE FUNCTION learnedidx.linregr_predict(coef float8[], col_ind_var float8[]) RETURNS float8
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'learnedidx_linregr_predict';

CREATE FUNCTION learnedidx.logregr_predict(coef float8[], col_ind_var float8[]) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'learnedidx_logregr_predict';

CREATE FUNCTION learnedidx.logregr_predict_prob(coef float8[], col_ind_var float8[]) RETURNS float8
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'learnedidx_logregr_predict_prob';

-- Training over shards (docs/indb.md, "Training over shards"): the coordinator's side runs
-- learnedidx._shard_state on the shard of each postgres_fdw partition of `parent`, through
-- postgres_fdw's connection as the caller's user mapping (see shards.c); the caller needs SELECT
-- on `columns` of `parent`.
CREATE FUNCTION learnedidx._shard_states(parent regclass, parts regclass[], columns text[], requests jsonb[],
                                         version text) RETURNS text[]
LANGUAGE c VOLATILE STRICT SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'learnedidx_shard_states';

-- The shard's side: a pass over `columns` of the table schema.relname, read as the calling role
-- (the coordinator's user mapping's), returning the statistics the coordinator merges.  The body
-- is learnedidx.indb.udf.shards.
CREATE FUNCTION learnedidx._shard_state(request jsonb, schema text, relname text, columns text[]) RETURNS text
LANGUAGE plpython3u VOLATILE STRICT SET search_path = pg_catalog, pg_temp AS $py$
import sys
if "learnedidx.indb.udf" not in sys.modules:  # the modules installed with the extension (docs/indb.md)
    sys.path.insert(0, plpy.execute("SELECT learnedidx._python_path() AS p")[0]["p"])
from learnedidx.indb.udf import shards
return shards.shard_state(plpy, SD, request, schema, relname, columns)
$py$;

-- ------------------------------------------------------------------------ regression aggregates
-- MADlib's linregr aggregate, its transition, combine (merge) and final functions, and its
-- Breusch-Pagan test (heteroskedasticity_test_linregr), in C (linregr.c): the state is the R
-- factor of the rows [x y], merged exactly, never X'X; linregr_train writes its statistics with
-- linregr_final, from the server's states in the same format.  They run no SQL.
-- MADlib's bytea8: a bytea aligned for float8, the states' type.
CREATE TYPE learnedidx.bytea8;
CREATE FUNCTION learnedidx.bytea8in(cstring) RETURNS learnedidx.bytea8
LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE AS 'byteain';
CREATE FUNCTION learnedidx.bytea8out(learnedidx.bytea8) RETURNS cstring
LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE AS 'byteaout';
CREATE FUNCTION learnedidx.bytea8recv(internal) RETURNS learnedidx.bytea8
LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE AS 'bytearecv';
CREATE FUNCTION learnedidx.bytea8send(learnedidx.bytea8) RETURNS bytea
LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE AS 'byteasend';
CREATE TYPE learnedidx.bytea8 (INPUT = learnedidx.bytea8in, OUTPUT = learnedidx.bytea8out,
    RECEIVE = learnedidx.bytea8recv, SEND = learnedidx.bytea8send, ALIGNMENT = double, STORAGE = extended);

CREATE TYPE learnedidx.linregr_result AS (
    coef float8[], r2 float8, std_err float8[], t_stats float8[], p_values float8[], condition_no float8,
    num_processed bigint, vcov float8[]);
CREATE TYPE learnedidx.heteroskedasticity_test_result AS (bp_stats float8, bp_p_value float8);

CREATE FUNCTION learnedidx.linregr_transition(state learnedidx.bytea8, y float8, x float8[])
RETURNS learnedidx.bytea8 LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'learnedidx_linregr_transition';

CREATE FUNCTION learnedidx.linregr_merge_states(state1 learnedidx.bytea8, state2 learnedidx.bytea8)
RETURNS learnedidx.bytea8 LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'learnedidx_linregr_merge_states';

CREATE FUNCTION learnedidx.linregr_final(state learnedidx.bytea8) RETURNS learnedidx.linregr_result
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'learnedidx_linregr_final';

CREATE AGGREGATE learnedidx.linregr(float8, float8[]) (
    SFUNC = learnedidx.linregr_transition, STYPE = learnedidx.bytea8, FINALFUNC = learnedidx.linregr_final,
    COMBINEFUNC = learnedidx.linregr_merge_states, INITCOND = '', PARALLEL = SAFE);

-- The aggregate's state itself (no final function): per-shard states to merge with
-- linregr_merge_states and finish with linregr_final.
CREATE AGGREGATE learnedidx.linregr_state(float8, float8[]) (
    SFUNC = learnedidx.linregr_transition, STYPE = learnedidx.bytea8,
    COMBINEFUNC = learnedidx.linregr_merge_states, INITCOND = '', PARALLEL = SAFE);

CREATE FUNCTION learnedidx.hetero_linregr_transition(state learnedidx.bytea8, y float8, x float8[], coef float8[])
RETURNS learnedidx.bytea8 LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'learnedidx_hetero_linregr_transition';

CREATE FUNCTION learnedidx.hetero_linregr_merge_states(state1 learnedidx.bytea8, state2 learnedidx.bytea8)
RETURNS learnedidx.bytea8 LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'learnedidx_linregr_merge_states';

CREATE FUNCTION learnedidx.hetero_linregr_final(state learnedidx.bytea8)
RETURNS learnedidx.heteroskedasticity_test_result
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'learnedidx_hetero_linregr_final';

CREATE AGGREGATE learnedidx.heteroskedasticity_test_linregr(float8, float8[], float8[]) (
    SFUNC = learnedidx.hetero_linregr_transition, STYPE = learnedidx.bytea8,
    FINALFUNC = learnedidx.hetero_linregr_final, COMBINEFUNC = learnedidx.hetero_linregr_merge_states,
    INITCOND = '', PARALLEL = SAFE);

-- ------------------------------------------------------------------------ names
-- A training source: a query ('SELECT ...', 'WITH ...', 'VALUES ...', '(...)') or a relation
-- name resolved with the caller's search_path.  rel is NULL for a query; from_sql is what to
-- put after FROM.
CREATE FUNCTION learnedidx._source(source text, caller_path text, OUT rel regclass, OUT from_sql text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF source IS NULL OR btrim(source) = '' THEN
        RAISE EXCEPTION 'source must name a table or view, or be a query' USING ERRCODE = '22023';
    END IF;
    IF source ~* '^\s*(\(|(select|with|values)\M)' THEN
        from_sql := '(' || source || ')';
        RETURN;
    END IF;
    -- (qualified: what runs with the caller's search_path resolves nothing but the caller's names)
    PERFORM pg_catalog.set_config('search_path', caller_path, true);
    rel := pg_catalog.to_regclass(source);
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    IF rel IS NULL THEN
        RAISE EXCEPTION 'relation "%" does not exist', source USING ERRCODE = '42P01';
    END IF;
    SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) INTO from_sql
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel;
END $$;

-- Where a new object named `name` (an identifier, optionally schema-qualified) goes: its schema
-- as CREATE would choose it with the caller's search_path, and its name.
CREATE FUNCTION learnedidx._target(name text, caller_path text, OUT schema name, OUT relname name)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    parts text[] := parse_ident(name);
BEGIN
    IF cardinality(parts) > 2 THEN
        RAISE EXCEPTION 'improper qualified name (too many dotted names): %', name USING ERRCODE = '42601';
    END IF;
    relname := parts[cardinality(parts)];
    IF cardinality(parts) = 2 THEN
        schema := parts[1];
        IF parts[1] = 'pg_temp' THEN
            -- the session's temporary schema; before the session made one, 'pg_temp', which
            -- CREATE TABLE makes it for
            schema := coalesce((SELECT nspname FROM pg_namespace WHERE oid = pg_my_temp_schema()), 'pg_temp');
        END IF;
    ELSE
        PERFORM pg_catalog.set_config('search_path', caller_path, true);
        schema := pg_catalog.current_schema();
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    END IF;
    IF schema IS NULL THEN
        RAISE EXCEPTION 'no schema has been selected to create % in', name USING ERRCODE = '3F000';
    END IF;
END $$;

-- ------------------------------------------------------------------------ DSL algorithms
-- Registered algorithms, like PostgreSQL objects: a schema-qualified name resolved with the
-- caller's search_path, CREATE on the schema to register, visible and usable by their owner
-- (and members of it) and the roles it granted them to; nobody writes rows for another role.
CREATE TABLE learnedidx.algorithms (
    nspoid oid NOT NULL,
    name name NOT NULL,
    owner oid NOT NULL DEFAULT pg_catalog.to_regrole(pg_catalog.quote_ident(CURRENT_USER))::oid,
    source text NOT NULL,
    created timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (nspoid, name)
);
CREATE TABLE learnedidx.algorithm_grants (
    nspoid oid NOT NULL,
    name name NOT NULL,
    grantee oid NOT NULL,
    grantor oid NOT NULL DEFAULT pg_catalog.to_regrole(pg_catalog.quote_ident(CURRENT_USER))::oid,
    PRIMARY KEY (nspoid, name, grantee),
    FOREIGN KEY (nspoid, name) REFERENCES learnedidx.algorithms ON DELETE CASCADE
);
ALTER TABLE learnedidx.algorithms ENABLE ROW LEVEL SECURITY;
ALTER TABLE learnedidx.algorithm_grants ENABLE ROW LEVEL SECURITY;
CREATE POLICY granted ON learnedidx.algorithm_grants FOR SELECT
    USING (pg_catalog.pg_has_role(grantee, 'USAGE') OR pg_catalog.pg_has_role(grantor, 'USAGE'));
CREATE POLICY grant_own ON learnedidx.algorithm_grants FOR INSERT
    WITH CHECK (grantor = pg_catalog.to_regrole(pg_catalog.quote_ident(CURRENT_USER))::oid
                AND EXISTS (SELECT 1 FROM learnedidx.algorithms a WHERE a.nspoid = algorithm_grants.nspoid
                            AND a.name = algorithm_grants.name AND pg_catalog.pg_has_role(a.owner, 'USAGE')));
CREATE POLICY revoke_own ON learnedidx.algorithm_grants FOR DELETE USING (pg_catalog.pg_has_role(grantor, 'USAGE'));
CREATE POLICY visible ON learnedidx.algorithms FOR SELECT
    USING (pg_catalog.pg_has_role(owner, 'USAGE')
           OR EXISTS (SELECT 1 FROM learnedidx.algorithm_grants g WHERE g.nspoid = algorithms.nspoid
                      AND g.name = algorithms.name AND pg_catalog.pg_has_role(g.grantee, 'USAGE')));
CREATE POLICY create_own ON learnedidx.algorithms FOR INSERT
    WITH CHECK (owner = pg_catalog.to_regrole(pg_catalog.quote_ident(CURRENT_USER))::oid
                AND pg_catalog.has_schema_privilege(nspoid, 'CREATE'));
CREATE POLICY drop_own ON learnedidx.algorithms FOR DELETE USING (pg_catalog.pg_has_role(owner, 'USAGE'));
GRANT SELECT, INSERT, DELETE ON learnedidx.algorithms, learnedidx.algorithm_grants TO PUBLIC;

-- The algorithm a name means to the caller: 'schema.name', or the first schema of the caller's
-- search_path holding one it may use.
CREATE FUNCTION learnedidx._algorithm(name text, caller_path text, OUT nspoid oid, OUT qualified text, OUT source text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    parts text[] := parse_ident(name);
    schemas name[];
BEGIN
    IF cardinality(parts) = 2 THEN
        schemas := ARRAY[parts[1]::name];
    ELSIF cardinality(parts) = 1 THEN
        PERFORM pg_catalog.set_config('search_path', caller_path, true);
        schemas := pg_catalog.current_schemas(false);
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    ELSE
        RAISE EXCEPTION 'improper qualified name (too many dotted names): %', name USING ERRCODE = '42601';
    END IF;
    SELECT a.nspoid, quote_ident(n.nspname) || '.' || quote_ident(a.name), a.source INTO nspoid, qualified, source
    FROM unnest(schemas) WITH ORDINALITY AS s(nsp, i)
    JOIN pg_namespace n ON n.nspname = s.nsp
    JOIN learnedidx.algorithms a ON a.nspoid = n.oid AND a.name = parts[cardinality(parts)]
    ORDER BY s.i LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown algorithm %', name USING ERRCODE = '42704',
            HINT = 'Register it with learnedidx.register_algorithm, or ask its owner to grant it to you.';
    END IF;
END $$;

CREATE FUNCTION learnedidx._register(name text, source text, caller_path text) RETURNS text
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t record;
    reply jsonb;
BEGIN
    SELECT * INTO t FROM learnedidx._target(name, caller_path);
    -- The server compiles it: bad source (or a built-in algorithm's name) fails here, with its message.
    reply := learnedidx._offload('indb.register', jsonb_build_object('name', t.relname, 'source', source))::jsonb;
    IF NOT (reply->>'ok')::boolean THEN
        RAISE EXCEPTION 'learnedidx: %', reply->'error'->>'message'
            USING ERRCODE = coalesce(reply->'error'->>'sqlstate', 'XX000');
    END IF;
    INSERT INTO learnedidx.algorithms (nspoid, name, source)
    VALUES ((SELECT oid FROM pg_namespace WHERE nspname = t.schema), t.relname, source) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'algorithm %.% already exists', quote_ident(t.schema), quote_ident(t.relname)
            USING ERRCODE = '42710', HINT = 'Drop it with learnedidx.drop_algorithm first.';
    END IF;
    RETURN quote_ident(t.schema) || '.' || quote_ident(t.relname);
END $$;

CREATE FUNCTION learnedidx.register_algorithm(name text, source text) RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT learnedidx._register(name, source, pg_catalog.current_setting('search_path'));
END;

CREATE FUNCTION learnedidx._algorithm_change(action text, name text, grantee regrole, caller_path text)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    a record;
    parts text[] := parse_ident(name);
    n name := parts[cardinality(parts)];
BEGIN
    SELECT * INTO a FROM learnedidx._algorithm(name, caller_path);
    IF action = 'drop' THEN
        DELETE FROM learnedidx.algorithms WHERE nspoid = a.nspoid AND algorithms.name = n;
    ELSIF action = 'grant' THEN
        INSERT INTO learnedidx.algorithm_grants (nspoid, name, grantee)
        VALUES (a.nspoid, n, _algorithm_change.grantee) ON CONFLICT DO NOTHING;
    ELSE
        DELETE FROM learnedidx.algorithm_grants g
        WHERE g.nspoid = a.nspoid AND g.name = n AND g.grantee = _algorithm_change.grantee;
    END IF;
    IF action <> 'grant' AND NOT FOUND THEN
        RAISE EXCEPTION 'must be owner of algorithm %', name USING ERRCODE = '42501';
    END IF;
END $$;

CREATE FUNCTION learnedidx.drop_algorithm(name text) RETURNS void LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT learnedidx._algorithm_change('drop', name, NULL, pg_catalog.current_setting('search_path'));
END;

CREATE FUNCTION learnedidx.grant_algorithm(name text, grantee regrole) RETURNS void LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT learnedidx._algorithm_change('grant', name, grantee, pg_catalog.current_setting('search_path'));
END;

CREATE FUNCTION learnedidx.revoke_algorithm(name text, grantee regrole) RETURNS void LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT learnedidx._algorithm_change('revoke', name, grantee, pg_catalog.current_setting('search_path'));
END;

-- ------------------------------------------------------------------------ training
CREATE TYPE learnedidx.train_result AS (
    coef float8[], loss float8, num_rows_processed bigint, num_rows_skipped bigint, num_iterations int,
    train_seconds float8, accel_seconds float8);

-- Trains `algorithm` (a built-in or a registered DSL algorithm) on `source`, streaming the
-- caller's rows to the server, and writes the model: the output table and its _summary table
-- as MADlib writes them (one row per group with params->'grouping_cols'), created in the
-- caller's transaction in the schema `out_table` resolves to (CREATE on it is PostgreSQL's
-- check), so a failed or cancelled training leaves neither.  One row per model is returned.
-- The body is learnedidx.indb.udf.train (learnedidx/indb/udf/).
CREATE FUNCTION learnedidx._train_impl(algorithm text, source text, out_table text, dep text, indep text,
                                       params jsonb, caller_path text)
RETURNS SETOF learnedidx.train_result LANGUAGE plpython3u VOLATILE SET search_path = pg_catalog, pg_temp AS $py$
import sys
if "learnedidx.indb.udf" not in sys.modules:  # the modules installed with the extension (docs/indb.md)
    sys.path.insert(0, plpy.execute("SELECT learnedidx._python_path() AS p")[0]["p"])
from learnedidx.indb.udf import train
return train.train(plpy, SD, algorithm, source, out_table, dep, indep, params, caller_path)
$py$;

-- The training entry point: _train_impl, its errors raised again with PostgreSQL's words only
-- (PL/Python prefixes a message with the Python class that carried it, "plpy.Error: ...").
CREATE FUNCTION learnedidx._train(algorithm text, source text, out_table text, dep text, indep text, params jsonb,
                                  caller_path text)
RETURNS SETOF learnedidx.train_result LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    state text;
    msg text;
    detail text;
    hint text;
BEGIN
    RETURN QUERY SELECT * FROM learnedidx._train_impl(algorithm, source, out_table, dep, indep, params, caller_path);
EXCEPTION WHEN OTHERS OR query_canceled THEN  -- (raised again at once: a cancel still cancels)
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL,
                            hint = PG_EXCEPTION_HINT;
    msg := pg_catalog.regexp_replace(msg, '^(plpy\.[A-Za-z]+|spiexceptions\.[A-Za-z]+): ', '');
    IF detail <> '' AND hint <> '' THEN
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = msg, DETAIL = detail, HINT = hint;
    ELSIF detail <> '' THEN
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = msg, DETAIL = detail;
    ELSIF hint <> '' THEN
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = msg, HINT = hint;
    END IF;
    RAISE EXCEPTION USING ERRCODE = state, MESSAGE = msg;
END $$;

-- The training functions: SQL-standard bodies (parsed here, once) that pass the caller's
-- search_path to learnedidx._train.  MADlib's argument names and order.
-- dep: a column or any SQL expression of the source (a boolean such as 'y > 60' too).
-- indep: one numeric array column, 'x1, x2, ...', MADlib's 'ARRAY[1, x1, x2, ...]' (the 1 is the
-- intercept), or any SQL expressions of the source's columns ('ARRAY[1]::float8[] || features').
-- grouping_cols: columns of the source; one model per group of rows.
CREATE FUNCTION learnedidx.linregr_train(source text, out_table text, dep text, indep text,
                                         grouping_cols text DEFAULT NULL,
                                         heteroskedasticity_option boolean DEFAULT false,
                                         "intercept" boolean DEFAULT true)
RETURNS SETOF learnedidx.train_result LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT * FROM learnedidx._train('linregr', source, out_table, dep, indep,
        pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object('intercept', "intercept",
            'grouping_cols', grouping_cols,
            'heteroskedasticity_option', CASE WHEN heteroskedasticity_option THEN true END)),
        pg_catalog.current_setting('search_path'));
END;

-- optimizer 'irls' (Newton's method; 'newton' is the same).
CREATE FUNCTION learnedidx.logregr_train(source text, out_table text, dep text, indep text,
                                         grouping_cols text DEFAULT NULL, max_iter int DEFAULT 20,
                                         optimizer text DEFAULT 'irls', tolerance float8 DEFAULT 0.0001,
                                         verbose boolean DEFAULT false)
RETURNS SETOF learnedidx.train_result LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT * FROM learnedidx._train('logregr', source, out_table, dep, indep,
        pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object('max_iter', max_iter, 'tolerance', tolerance,
            'optimizer', optimizer, 'grouping_cols', grouping_cols)),
        pg_catalog.current_setting('search_path'));
END;

-- Linear SVM, learnedidx's form: lambda weighs ||w||^2 / 2 against the mean hinge loss.
CREATE FUNCTION learnedidx.svm_train(source text, out_table text, dep text, indep text,
                                     lambda float8 DEFAULT 0.0001, max_iter int DEFAULT 30,
                                     stepsize float8 DEFAULT 0.1, grouping_cols text DEFAULT NULL)
RETURNS SETOF learnedidx.train_result LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT * FROM learnedidx._train('svm', source, out_table, dep, indep,
        pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object('lambda', lambda, 'max_iter', max_iter,
            'stepsize', stepsize, 'grouping_cols', grouping_cols)),
        pg_catalog.current_setting('search_path'));
END;

-- ------------------------------------------------------------------------ MADlib's svm
-- MADlib 2.1's svm_classification, svm_regression, svm_one_class and svm_predict: MADlib's
-- arguments, defaults ('name=value, ...' params: init_stepsize, decay_factor, max_iter,
-- tolerance, lambda, norm, epsilon, eps_table, class_weight, n_folds, validation_result; lists
-- such as 'lambda=[0.1, 1]' are cross validation's candidates), kernels ('linear', 'gaussian',
-- 'polynomial' or a prefix; kernel_params n_components, gamma, degree, coef0, random_state,
-- fit_intercept, fit_in_memory), training and output tables (model, _summary, _random,
-- validation_result).  The body is learnedidx.indb.udf.svm (docs/indb.md, "MADlib's svm").
CREATE FUNCTION learnedidx._svm(method text, source_table text, model_table text, dependent_varname text,
                                independent_varname text, kernel_func text, kernel_params text, grouping_col text,
                                params text, caller_path text)
RETURNS SETOF learnedidx.train_result LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT * FROM learnedidx._train('svm', source_table, model_table, dependent_varname, independent_varname,
        pg_catalog.jsonb_build_object('madlib_svm', pg_catalog.jsonb_build_object('method', method,
            'kernel_func', kernel_func, 'kernel_params', kernel_params, 'grouping_col', grouping_col,
            'params', params)), caller_path);
END;

CREATE FUNCTION learnedidx.svm_classification(source_table text, model_table text, dependent_varname text,
                                              independent_varname text, kernel_func text DEFAULT NULL,
                                              kernel_params text DEFAULT NULL, grouping_col text DEFAULT NULL,
                                              params text DEFAULT NULL, verbose boolean DEFAULT false)
RETURNS SETOF learnedidx.train_result LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT * FROM learnedidx._svm('classification', source_table, model_table, dependent_varname,
        independent_varname, kernel_func, kernel_params, grouping_col, params, pg_catalog.current_setting('search_path'));
END;

CREATE FUNCTION learnedidx.svm_regression(source_table text, model_table text, dependent_varname text,
                                          independent_varname text, kernel_func text DEFAULT NULL,
                                          kernel_params text DEFAULT NULL, grouping_col text DEFAULT NULL,
                                          params text DEFAULT NULL, verbose boolean DEFAULT false)
RETURNS SETOF learnedidx.train_result LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT * FROM learnedidx._svm('regression', source_table, model_table, dependent_varname, independent_varname,
        kernel_func, kernel_params, grouping_col, params, pg_catalog.current_setting('search_path'));
END;

-- The rows against the origin; kernel 'gaussian' by default, class_weight 'balanced'.
CREATE FUNCTION learnedidx.svm_one_class(source_table text, model_table text, independent_varname text,
                                         kernel_func text DEFAULT NULL, kernel_params text DEFAULT NULL,
                                         grouping_col text DEFAULT NULL, params text DEFAULT NULL,
                                         verbose boolean DEFAULT false)
RETURNS SETOF learnedidx.train_result LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT * FROM learnedidx._svm('one_class', source_table, model_table, NULL, independent_varname, kernel_func,
        kernel_params, grouping_col, params, pg_catalog.current_setting('search_path'));
END;

-- output_table (id, prediction, decision_function[, grouping_col, the grouping columns]): each
-- row of new_data_table whose features hold no NULL, scored as the caller (through
-- learnedidx._train, for its errors: no model is trained).
CREATE FUNCTION learnedidx.svm_predict(model_table text, new_data_table text, id_col_name text, output_table text)
RETURNS void LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT pg_catalog.count(*) FROM learnedidx._train('svm', new_data_table, output_table, id_col_name, NULL,
        pg_catalog.jsonb_build_object('madlib_svm', pg_catalog.jsonb_build_object('predict', model_table)),
        pg_catalog.current_setting('search_path'));
END;

-- A row's features through a kernel's random feature map (svm.c): what the training query
-- streams and svm_predict scores.
CREATE FUNCTION learnedidx._svm_features(x float8[], kernel text, weights float8[], offsets float8[], reps float8[],
                                         scale float8, "intercept" boolean) RETURNS float8[]
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'learnedidx_svm_features';

-- ------------------------------------------------------------------------ MADlib's utilities
-- The utilities of MADlib's that its install-check tests call besides the functions they test
-- (svm's: assert, norm1, norm2, array_dot, array_sub, array_div; regression's: assert,
-- relative_error), for its tests to run with only the schema's name changed.  assert fails on a
-- NULL condition too (MADlib's lets it pass).
CREATE FUNCTION learnedidx.assert(condition boolean, msg text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF condition IS NOT TRUE THEN
        RAISE EXCEPTION 'Failed assertion: %', msg USING ERRCODE = 'P0004';
    END IF;
END $$;

CREATE FUNCTION learnedidx.norm1(x float8[]) RETURNS float8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (SELECT pg_catalog.sum(pg_catalog.abs(v)) FROM pg_catalog.unnest(x) AS v);

CREATE FUNCTION learnedidx.norm2(x float8[]) RETURNS float8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (SELECT pg_catalog.sqrt(pg_catalog.sum(v OPERATOR(pg_catalog.*) v)) FROM pg_catalog.unnest(x) AS v);

-- x . y (NULL when either holds a NULL; arrays of two lengths are an error)
CREATE FUNCTION learnedidx.array_dot(x float8[], y float8[]) RETURNS float8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN learnedidx.linregr_predict(x, y);

-- x - y and x / y, element by element
CREATE FUNCTION learnedidx._elementwise(x float8[], y float8[], op text) RETURNS float8[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF cardinality(x) <> cardinality(y) THEN
        RAISE EXCEPTION 'arrays of % and % elements: the arrays must have the same length', cardinality(x),
            cardinality(y) USING ERRCODE = '22023';
    END IF;
    IF op = '-' THEN
        RETURN ARRAY(SELECT a - b FROM unnest(x, y) WITH ORDINALITY AS t(a, b, i) ORDER BY i);
    END IF;
    RETURN ARRAY(SELECT a / b FROM unnest(x, y) WITH ORDINALITY AS t(a, b, i) ORDER BY i);
END $$;

CREATE FUNCTION learnedidx.array_sub(x float8[], y float8[]) RETURNS float8[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN learnedidx._elementwise(x, y, '-');

CREATE FUNCTION learnedidx.array_div(x float8[], y float8[]) RETURNS float8[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN learnedidx._elementwise(x, y, '/');

-- MADlib's relative error of approx: |approx - value| / |value|; for arrays ||approx - value|| /
-- ||value|| (2-norms; arrays of two lengths are an error)
CREATE FUNCTION learnedidx.relative_error(approx float8, value float8) RETURNS float8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN pg_catalog.abs((approx OPERATOR(pg_catalog.-) value) OPERATOR(pg_catalog./) value);

CREATE FUNCTION learnedidx.relative_error(approx float8[], value float8[]) RETURNS float8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN learnedidx.norm2(learnedidx.array_sub(approx, value)) OPERATOR(pg_catalog./) learnedidx.norm2(value);

CREATE FUNCTION learnedidx.lmf_train(source text, out_table text, col_row text, col_column text, col_value text,
                                     max_rank int DEFAULT 10, stepsize float8 DEFAULT 0.01,
                                     lambda float8 DEFAULT 0.01, num_iterations int DEFAULT 50,
                                     scale_factor float8 DEFAULT 0.1)
RETURNS TABLE(loss float8, num_rows_processed bigint, num_iterations int, train_seconds float8,
              accel_seconds float8)
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT r.loss, r.num_rows_processed, r.num_iterations, r.train_seconds, r.accel_seconds
    FROM learnedidx._train('lmf', source, out_table, col_value, col_row || ', ' || col_column,
        pg_catalog.jsonb_build_object('max_rank', max_rank, 'stepsize', stepsize, 'lambda', lambda,
                                      'num_iterations', num_iterations, 'scale_factor', scale_factor),
        pg_catalog.current_setting('search_path')) AS r;
END;

-- A registered DSL algorithm (docs/dsl.md); params override its settings.
CREATE FUNCTION learnedidx.train(name text, source text, dep text, indep text, params jsonb DEFAULT '{}',
                                 out_table text DEFAULT NULL)
RETURNS SETOF learnedidx.train_result LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT * FROM learnedidx._train(name, source, coalesce(out_table, name || '_model'), dep, indep, params,
        pg_catalog.current_setting('search_path'));
END;

-- ------------------------------------------------------------------------ models
-- A model is its output table plus the <name>_summary table beside it (as in MADlib); its
-- privileges are those tables' privileges.  This is the summary of a model, or an error.
CREATE FUNCTION learnedidx._summary(model regclass) RETURNS regclass
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s oid;
BEGIN
    SELECT c.oid INTO s FROM pg_class m
    JOIN pg_class c ON c.relnamespace = m.relnamespace AND c.relname = m.relname || '_summary' AND c.relkind = 'r'
    WHERE m.oid = model AND m.relkind = 'r'
      AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'method' AND NOT a.attisdropped);
    IF s IS NULL THEN
        RAISE EXCEPTION '% is not a learnedidx model', model USING ERRCODE = '42809',
            DETAIL = 'A model is an output table with a _summary table beside it, made by a training function.';
    END IF;
    RETURN s;
END $$;

-- Drops a model: its output table and its summary table, and an svm kernel's <name>_random
-- table (PostgreSQL's ownership check applies; a table that is not a model is refused, never
-- dropped).
CREATE FUNCTION learnedidx.drop_model(model regclass) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s regclass := learnedidx._summary(model);
    r regclass;
BEGIN
    SELECT c.oid INTO r FROM pg_class m
    JOIN pg_class c ON c.relnamespace = m.relnamespace AND c.relname = m.relname || '_random' AND c.relkind = 'r'
    WHERE m.oid = model AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = s AND a.attname = 'kernel_func'
                                    AND NOT a.attisdropped)
      AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'desp' AND NOT a.attisdropped);
    EXECUTE format('DROP TABLE %s, %s%s', model::oid::regclass, s, coalesce(', ' || r::text, ''));
END $$;

CREATE FUNCTION learnedidx._predict_table(model regclass, source text, out_table text, caller_path text)
RETURNS bigint LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    features text;
    groups text[];
    named text[];
    src record;
    t record;
    stmt text;
    n bigint;
BEGIN
    SELECT * INTO src FROM learnedidx._source(source, caller_path);
    SELECT * INTO t FROM learnedidx._target(out_table, caller_path);
    -- the feature expression is SQL the model's owner wrote: only its members run it
    IF NOT pg_catalog.pg_has_role((SELECT relowner FROM pg_class WHERE oid = learnedidx._summary(model)), 'USAGE') THEN
        RAISE EXCEPTION 'predict_table evaluates the feature expression of model %, SQL its owner wrote', model
            USING ERRCODE = '42501', HINT = 'Call learnedidx.predict(model, features) with the features yourself.';
    END IF;
    -- each group's SQL over a row of the source: grouping_expressions (its column or its
    -- expression); a model without them groups by the columns grouping_columns names
    EXECUTE format('SELECT s.feature_expression, ARRAY(SELECT pg_catalog.jsonb_array_elements_text(g.e) FROM '
                   '(SELECT pg_catalog.to_jsonb(s) -> ''grouping_expressions'' AS e) AS g '
                   'WHERE pg_catalog.jsonb_typeof(g.e) = ''array''), '
                   'ARRAY(SELECT pg_catalog.quote_ident(pg_catalog.jsonb_array_elements_text(g.j)) FROM '
                   '(SELECT pg_catalog.to_jsonb(s) -> ''grouping_columns'' AS j) AS g '
                   'WHERE pg_catalog.jsonb_typeof(g.j) = ''array'') FROM ONLY %s AS s', learnedidx._summary(model))
        INTO features, groups, named;
    IF groups = '{}' THEN
        groups := named;
    END IF;
    -- a model trained with grouping scores each row with its group's coefficients
    stmt := format('CREATE TABLE %I.%I AS SELECT s.*, '
                   'learnedidx.predict(%s::pg_catalog.oid::pg_catalog.regclass, %s%s) AS prediction FROM %s AS s',
                   t.schema, t.relname, model::oid, features,
                   (SELECT pg_catalog.string_agg(', ' || g, '' ORDER BY i)
                    FROM pg_catalog.unnest(groups) WITH ORDINALITY AS u(g, i)), src.from_sql);
    -- the caller's source and feature expression, evaluated with the caller's search_path
    PERFORM pg_catalog.set_config('search_path', caller_path, true);
    EXECUTE stmt;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    RETURN n;
END $$;

-- CREATE TABLE out_table AS SELECT source.*, predict(model, features) AS prediction.
CREATE FUNCTION learnedidx.predict_table(model regclass, source text, out_table text) RETURNS bigint
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT learnedidx._predict_table(model, source, out_table, pg_catalog.current_setting('search_path'));
END;

-- The SQL reading column `col` of summary table `summary` (as `s`) as text: NULL when it has no
-- such column (a summary written by hand may lack columns) or one of a type initdb did not make,
-- whose text form could call a cast its owner wrote.
CREATE FUNCTION learnedidx._summary_text(summary oid, col text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce((SELECT format('s.%I::pg_catalog.text', a.attname) FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = summary AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped
                       AND a.atttypid < 16384),  -- FirstNormalObjectId
                    'NULL::pg_catalog.text')
$$;

-- The models the caller can read (both tables readable): one row each.
CREATE FUNCTION learnedidx._models()
RETURNS TABLE(model regclass, algorithm text, source text, dep text, indep text, read_path text,
              num_rows_processed bigint, created timestamptz)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m record;
BEGIN
    FOR m IN SELECT o.oid AS model, s.oid AS summary FROM pg_class o
             JOIN pg_namespace n ON n.oid = o.relnamespace
             JOIN pg_class s ON s.relnamespace = o.relnamespace AND s.relname = o.relname || '_summary'
             WHERE o.relkind = 'r' AND s.relkind = 'r'
               AND (n.nspname NOT LIKE 'pg_temp%' OR n.oid = pg_my_temp_schema())
               AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = s.oid AND a.attname = 'method'
                           AND NOT a.attisdropped)
               AND has_table_privilege(o.oid, 'SELECT') AND has_table_privilege(s.oid, 'SELECT')
               -- listing runs no code of a summary's owner: no policies (nor inheritors)
               AND NOT row_security_active(s.oid)
             ORDER BY n.nspname, o.relname
    LOOP
        RETURN QUERY EXECUTE format('SELECT %s::oid::regclass, %s, %s, %s, %s, %s, coalesce(%s, %s)::int8, '
                                    '(%s)::timestamptz FROM ONLY %s AS s', m.model,
                                    learnedidx._summary_text(m.summary, 'method'),
                                    learnedidx._summary_text(m.summary, 'source_table'),
                                    learnedidx._summary_text(m.summary, 'dependent_varname'),
                                    learnedidx._summary_text(m.summary, 'independent_varname'),
                                    learnedidx._summary_text(m.summary, 'read_path'),
                                    learnedidx._summary_text(m.summary, 'num_rows_processed'),
                                    learnedidx._summary_text(m.summary, 'total_rows_processed'),
                                    learnedidx._summary_text(m.summary, 'created'), m.summary::regclass);
    END LOOP;
END $$;

CREATE VIEW learnedidx.models AS SELECT * FROM learnedidx._models();
GRANT SELECT ON learnedidx.models TO PUBLIC;

-- ------------------------------------------------------------------------ help
-- MADlib's help forms of every public training and prediction function: fn() a summary,
-- fn('usage') the arguments and output, fn('example') a session; the texts are
-- learnedidx.indb.udf.help's.
CREATE FUNCTION learnedidx._help(fn text, message text) RETURNS text
LANGUAGE plpython3u STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $py$
import sys
if "learnedidx.indb.udf" not in sys.modules:  # the modules installed with the extension (docs/indb.md)
    sys.path.insert(0, plpy.execute("SELECT learnedidx._python_path() AS p")[0]["p"])
from learnedidx.indb.udf import help
return help.text(fn, message)
$py$;

CREATE FUNCTION learnedidx.linregr_train() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('linregr_train', NULL);
CREATE FUNCTION learnedidx.linregr_train(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('linregr_train', message);

CREATE FUNCTION learnedidx.logregr_train() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('logregr_train', NULL);
CREATE FUNCTION learnedidx.logregr_train(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('logregr_train', message);

CREATE FUNCTION learnedidx.svm_classification() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('svm_classification', NULL);
CREATE FUNCTION learnedidx.svm_classification(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('svm_classification', message);

CREATE FUNCTION learnedidx.svm_regression() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('svm_regression', NULL);
CREATE FUNCTION learnedidx.svm_regression(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('svm_regression', message);

CREATE FUNCTION learnedidx.svm_one_class() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('svm_one_class', NULL);
CREATE FUNCTION learnedidx.svm_one_class(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('svm_one_class', message);

CREATE FUNCTION learnedidx.svm_predict() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('svm_predict', NULL);
CREATE FUNCTION learnedidx.svm_predict(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('svm_predict', message);

CREATE FUNCTION learnedidx.svm_train() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('svm_train', NULL);
CREATE FUNCTION learnedidx.svm_train(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('svm_train', message);

CREATE FUNCTION learnedidx.lmf_train() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('lmf_train', NULL);
CREATE FUNCTION learnedidx.lmf_train(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('lmf_train', message);

CREATE FUNCTION learnedidx.train() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('train', NULL);
CREATE FUNCTION learnedidx.train(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('train', message);

CREATE FUNCTION learnedidx.predict() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('predict', NULL);
CREATE FUNCTION learnedidx.predict(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('predict', message);

CREATE FUNCTION learnedidx.predict_proba() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('predict_proba', NULL);
CREATE FUNCTION learnedidx.predict_proba(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('predict_proba', message);

CREATE FUNCTION learnedidx.predict_table() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('predict_table', NULL);
CREATE FUNCTION learnedidx.predict_table(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('predict_table', message);

CREATE FUNCTION learnedidx.linregr_predict() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('linregr_predict', NULL);
CREATE FUNCTION learnedidx.linregr_predict(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('linregr_predict', message);

CREATE FUNCTION learnedidx.logregr_predict() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('logregr_predict', NULL);
CREATE FUNCTION learnedidx.logregr_predict(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('logregr_predict', message);

CREATE FUNCTION learnedidx.logregr_predict_prob() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('logregr_predict_prob', NULL);
CREATE FUNCTION learnedidx.logregr_predict_prob(message text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN learnedidx._help('logregr_predict_prob', message);
