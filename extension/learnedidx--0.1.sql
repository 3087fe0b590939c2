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

-- MADlib's prediction functions over coefficients (an output table's coef column):
-- coef . features, the class (coef . features > 0) and P(y = 1), computed without overflow.
CREATE FUNCTION learnedidx.linregr_predict(coef float8[], col_ind_var float8[]) RETURNS float8
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'learnedidx_linregr_predict';

CREATE FUNCTION learnedidx.logregr_predict(coef float8[], col_ind_var float8[]) RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'learnedidx_logregr_predict';

CREATE FUNCTION learnedidx.logregr_predict_prob(coef float8[], col_ind_var float8[]) RETURNS float8
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'learnedidx_logregr_predict_prob';

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
            schema := (SELECT nspname FROM pg_namespace WHERE oid = pg_my_temp_schema());
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
    IF t.relname IN ('linregr', 'logregr', 'svm', 'lmf') THEN
        RAISE EXCEPTION '% is a built-in algorithm', t.relname USING ERRCODE = '42710';
    END IF;
    -- The server compiles it: bad source fails here, with the DSL's message.
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
CREATE FUNCTION learnedidx._train_impl(algorithm text, source text, out_table text, dep text, indep text,
                                       params jsonb, caller_path text)
RETURNS SETOF learnedidx.train_result LANGUAGE plpython3u VOLATILE SET search_path = pg_catalog, pg_temp AS $py$
import json, re
P = SD.get("plans")
if P is None:
    P = SD["plans"] = {k: plpy.prepare(q, t) for k, (q, t) in {
        "setting": ("SELECT pg_catalog.current_setting($1, true) AS v", ["text"]),
        "source": ("SELECT rel::pg_catalog.oid AS oid, from_sql FROM learnedidx._source($1, $2)", ["text", "text"]),
        "target": ("SELECT schema, relname FROM learnedidx._target($1, $2)", ["text", "text"]),
        "exists": ("SELECT pg_catalog.to_regclass($1) IS NOT NULL AS e", ["text"]),
        "columns": ("SELECT pg_catalog.array_agg(attname::pg_catalog.text) AS c FROM pg_catalog.pg_attribute "
                    "WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped", ["oid"]),
        "algorithm": ("SELECT qualified, source FROM learnedidx._algorithm($1, $2)", ["text", "text"]),
        "offload": ("SELECT learnedidx._offload('indb.train', $1::pg_catalog.jsonb, "
                    "$2::pg_catalog.oid::pg_catalog.regclass, $3, $4, $5) AS r", ["text", "oid", "text[]", "text", "text"]),
        "path": ("SELECT pg_catalog.set_config('search_path', $1, true)", ["text"]),
        "group_types": ("SELECT learnedidx._check_group_type($1, a.attname::pg_catalog.text, a.atttypid) "
                        "FROM pg_catalog.pg_attribute a WHERE a.attrelid = $1::pg_catalog.regclass "
                        "AND a.attnum BETWEEN 1 AND $2 ORDER BY a.attnum", ["text", "int4"]),
        "version": ("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'learnedidx'", []),
    }.items()}
BUILTINS = ("linregr", "logregr", "svm", "lmf")
READERS = {"auto": "auto", "pages": "pages", "query": "query", "strider": "pages", "copy": "query"}
F8, F8A, I8, I8A, I4, TEXT = ("pg_catalog.float8", "pg_catalog.float8[]", "pg_catalog.int8", "pg_catalog.int8[]",
                              "pg_catalog.int4", "pg_catalog.text")
# The output table of each algorithm: MADlib's columns, in MADlib's order, then ours.
COLUMNS = {
    "linregr": [("coef", F8A), ("r2", F8), ("std_err", F8A), ("t_stats", F8A), ("p_values", F8A),
                ("condition_no", F8), ("num_rows_processed", I8), ("num_missing_rows_skipped", I8),
                ("variance_covariance", F8A)],
    "logregr": [("coef", F8A), ("log_likelihood", F8), ("std_err", F8A), ("z_stats", F8A), ("p_values", F8A),
                ("odds_ratios", F8A), ("condition_no", F8), ("num_rows_processed", I8),
                ("num_missing_rows_skipped", I8), ("num_iterations", I4), ("variance_covariance", F8A)],
    "svm": [("coef", F8A), ("loss", F8), ("norm_of_gradient", F8), ("num_iterations", I4),
            ("num_rows_processed", I8), ("num_rows_skipped", I8), ("dep_var_mapping", F8A)],
    "lmf": [("u", F8A), ("v", F8A), ("row_ids", I8A), ("col_ids", I8A), ("loss", F8), ("num_rows_processed", I8),
            ("num_rows_skipped", I8), ("num_iterations", I4)],
    None: [("coef", F8A), ("loss", F8), ("num_rows_processed", I8), ("num_rows_skipped", I8),
           ("num_iterations", I4)],
}
TIMES = [("train_seconds", F8), ("accel_seconds", F8)]
# MADlib's svm_classification params we take (as the settings they mean), and those we refuse
# unless left at MADlib's default.
SVM_PARAMS = {"init_stepsize": "stepsize", "max_iter": "max_iter", "lambda": "lambda", "tolerance": "tolerance"}
SVM_REFUSED = {"decay_factor": None, "n_folds": "0", "validation_result": "", "epsilon": None, "eps_table": "",
               "class_weight": ""}

def fail(message, sqlstate="22023", hint=None):
    if hint:
        plpy.error(message, sqlstate=sqlstate, hint=hint)
    plpy.error(message, sqlstate=sqlstate)

def split_top(text):
    """The comma-separated items of a select list, commas inside (), [] or quotes aside."""
    items, cur, depth, quote = [], [], 0, None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    return items + ["".join(cur).strip()]

IDENT = re.compile(r'\s*(?:([A-Za-z_][A-Za-z0-9_$]*)|"((?:[^"]|"")+)")\s*$')
def ident(item):
    """The name an identifier item means (folded unless quoted), or None."""
    m = IDENT.match(item)
    return m and (m.group(1).lower() if m.group(1) else m.group(2).replace('""', '"'))

def keyvalues(text, what):
    """MADlib's 'name=value, name=value' parameter strings, as a dict."""
    out = {}
    for item in split_top(text or ""):
        if not item:
            continue
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            fail("%s must be name=value pairs, not %r" % (what, item))
        out[name.strip().lower()] = value.strip().strip("'\"")
    return out

def lit(v):
    # Array literals pass as text: converting nested lists element by element in PL/Python
    # costs far more than PostgreSQL parsing one float8[] literal.
    if v is None:
        return None
    if isinstance(v, list):
        return "{" + ",".join(lit(x) if isinstance(x, list) else repr(x) for x in v) + "}"
    return repr(v)

for arg, value in (("source", source), ("out_table", out_table), ("dep", dep), ("indep", indep)):
    if value is None or not value.strip():
        fail("%s must not be empty" % arg)
opts = json.loads(params) if params else {}
if not isinstance(opts, dict):
    fail("params must be a JSON object, not %s" % params)
grouping = opts.pop("grouping_cols", None)
if grouping is not None and algorithm not in ("linregr", "logregr", "svm"):
    fail("grouping_cols is supported by linregr, logregr and svm, not %s" % algorithm, "0A000")
if opts.pop("heteroskedasticity_option", None):
    fail("heteroskedasticity_option (the Breusch-Pagan test) is not supported", "0A000")
reader = opts.pop("reader", None) or plpy.execute(P["setting"], ["learnedidx.reader"])[0]["v"] or "auto"
if reader not in READERS:
    fail("reader (learnedidx.reader) must be auto, pages or query, not %r" % reader)
reader = READERS[reader]
threads = opts.get("threads")
if threads is None:
    threads = plpy.execute(P["setting"], ["learnedidx.threads"])[0]["v"] or None
if threads is not None:
    if not str(threads).isdigit() or int(threads) < 1:
        fail("threads (learnedidx.threads) must be a positive integer, not %r" % threads)
    opts["threads"] = int(threads)

# MADlib's svm_classification: its kernel and its parameter string.
svm_madlib = opts.pop("svm_classification", None)
extra_summary = {}
if svm_madlib is not None:
    kernel = (svm_madlib.get("kernel_func") or "linear").strip().lower()
    if kernel != "linear":
        fail("kernel_func %r is not supported: 'linear' is" % kernel, "0A000")
    kp = keyvalues(svm_madlib.get("kernel_params"), "kernel_params")
    fit_intercept = kp.pop("fit_intercept", "false").lower()
    if kp or fit_intercept not in ("true", "false"):
        fail("kernel_params of the linear kernel take fit_intercept=true|false only, not %r"
             % svm_madlib.get("kernel_params"))
    opts["intercept"] = fit_intercept == "true"
    given = keyvalues(svm_madlib.get("params"), "params")
    svm_settings = {"init_stepsize": 0.01, "max_iter": 100, "lambda": 0.01, "tolerance": 1e-10, "norm": "l2"}
    for name, value in given.items():
        if name in SVM_REFUSED:
            if SVM_REFUSED[name] is None or value.lower() != SVM_REFUSED[name]:
                fail("svm_classification parameter %s is not supported" % name, "0A000",
                     hint="learnedidx steps with init_stepsize / (1 + init_stepsize * lambda * t) and takes "
                          "init_stepsize, max_iter, lambda, tolerance and norm=L2")
        elif name == "norm":
            if value.lower() != "l2":
                fail("norm %r is not supported: L2 is" % value, "0A000")
        elif name not in SVM_PARAMS:
            fail("unknown svm_classification parameter %s" % name)
        else:
            try:
                svm_settings[name] = int(value) if name == "max_iter" else float(value)
            except ValueError:
                fail("svm_classification parameter %s must be a number, not %r" % (name, value))
    opts.update({SVM_PARAMS[k]: v for k, v in svm_settings.items() if k in SVM_PARAMS})
    opts["lambda_per"] = "model"  # MADlib's lambda weighs ||w||^2 against the sum of the losses
    extra_summary = {
        "version_number": plpy.execute(P["version"])[0]["extversion"], "kernel_func": kernel,
        "kernel_params": "fit_intercept=%s" % fit_intercept,
        "optim_params": "init_stepsize=%r, max_iter=%d, tolerance=%r" % (
            svm_settings["init_stepsize"], svm_settings["max_iter"], svm_settings["tolerance"]),
        "reg_params": "lambda=%r, norm=L2, n_folds=0" % svm_settings["lambda"]}

args = {"algorithm": algorithm, "params": opts, "dep": dep, "indep": indep}
method = algorithm
if algorithm not in BUILTINS:
    alg = plpy.execute(P["algorithm"], [algorithm, caller_path])[0]
    method, args["dsl_source"] = alg["qualified"], alg["source"]
columns_out = COLUMNS.get(algorithm if algorithm in BUILTINS else None)

target = plpy.execute(P["target"], [out_table, caller_path])[0]
if len(target["relname"].encode()) > 63 - len("_summary"):
    fail("output table name %s is too long for its _summary table" % out_table, "42622")
out = plpy.quote_ident(target["schema"]) + "." + plpy.quote_ident(target["relname"])
summary = plpy.quote_ident(target["schema"]) + "." + plpy.quote_ident(target["relname"] + "_summary")
for t in (out, summary):
    if plpy.execute(P["exists"], [t])[0]["e"]:
        fail("relation %s already exists" % t, "42P07")

# What to read: dep and indep are columns or SQL expressions of the source.  MADlib's
# 'ARRAY[1, x1, x2]' states the intercept (true with a 1 among the items, false without).
src = plpy.execute(P["source"], [source, caller_path])[0]
array_form = re.match(r"(?is)\s*array\s*\[(.*)\]\s*$", indep)
items = split_top(array_form.group(1) if array_form else indep)
if "" in items:
    fail("indep lists an empty item: %r" % indep, "42601")
if array_form:
    opts["intercept"] = "1" in items
    items = items[1:] if items and items[0] == "1" else items
query = "SELECT (%s), %s FROM %s AS src" % (dep, indep, src["from_sql"])
names = None
if src["oid"] is not None:
    names = set(plpy.execute(P["columns"], [src["oid"]])[0]["c"] or [])
columns = None
if names is not None:
    found = [ident(c) for c in [dep] + items]
    if items and all(f in names for f in found):
        columns = found

groups = None
if grouping is not None:
    groups = []
    for item in split_top(grouping):
        name = ident(item)
        if name is None:
            fail("grouping_cols must name columns of the source, comma-separated, not %r" % item,
                 "0A000" if item else "42601")
        if name in [c for c, _ in columns_out + TIMES]:
            fail("grouping column %s has the name of an output column" % name, "42701")
        if names is not None and name not in names:
            fail('column "%s" of grouping_cols does not exist in %s' % (name, source), "42703")
        groups.append(name)
    if reader == "pages":
        fail("the page reader trains one model: grouping_cols reads the query path", "0A000")
    qg = ", ".join(plpy.quote_ident(g) for g in groups)
    opts["grouped"] = True
    query = "SELECT (%s), %s, (pg_catalog.dense_rank() OVER (ORDER BY %s))::pg_catalog.float8 FROM %s AS src" % (
        dep, indep, qg, src["from_sql"])
    # The output table first, the grouping columns with the source's types as in MADlib's: predict
    # reads only types it can read with the system's code, so others are refused before training.
    plpy.execute(P["path"], [caller_path])
    plpy.execute("CREATE TABLE %s AS SELECT %s, %s FROM %s AS src WITH NO DATA" % (
        out, ", ".join("src.%s" % plpy.quote_ident(g) for g in groups),
        ", ".join("NULL::%s AS %s" % (t, c) for c, t in columns_out + TIMES), src["from_sql"]))
    plpy.execute(P["path"], ["pg_catalog, pg_temp"])
    plpy.execute(P["group_types"], [out, len(groups)])
if reader == "pages" and columns is None:
    fail("the page reader reads plain columns of a table, view-free: %s" % (
        "the source is a query" if src["oid"] is None else "dep or indep is an expression"), "0A000")

pages = reader != "query" and columns is not None and groups is None
if groups is None:
    raw = plpy.execute(P["offload"], [json.dumps(args), src["oid"] if pages else None, columns if pages else None,
                                      query if reader != "pages" else None, caller_path])[0]["r"]
    keys = None
else:
    # One statement, so one snapshot, reads the groups (their values and rows) and streams the
    # rows numbered by group; both are the caller's SQL, evaluated with its search_path.
    k = ", ".join("src.%s AS c%d" % (plpy.quote_ident(g), i) for i, g in enumerate(groups))
    order = ", ".join("k.c%d" % i for i in range(len(groups)))
    obj = ", ".join("%s, k.c%d" % (plpy.quote_literal(g), i) for i, g in enumerate(groups))
    stmt = ("SELECT learnedidx._offload('indb.train', $1::pg_catalog.jsonb, NULL, NULL, $2, $3) AS r, "
            "(SELECT pg_catalog.jsonb_build_object('keys', pg_catalog.array_agg(pg_catalog.jsonb_build_object(%s)"
            "::pg_catalog.text ORDER BY %s), 'rows', pg_catalog.array_agg(k.n ORDER BY %s))::pg_catalog.text "
            "FROM (SELECT %s, pg_catalog.count(*) AS n FROM %s AS src GROUP BY %s) AS k) AS keys" % (
                obj, order, order, k, src["from_sql"], ", ".join(str(i + 1) for i in range(len(groups)))))
    plpy.execute(P["path"], [caller_path])
    row = plpy.execute(plpy.prepare(stmt, ["text", "text", "text"]), [json.dumps(args), query, caller_path])[0]
    plpy.execute(P["path"], ["pg_catalog, pg_temp"])
    raw, keys = row["r"], json.loads(row["keys"])
reply = json.loads(raw)
if not reply.get("ok"):
    e = reply.get("error") or {}
    fail("learnedidx: %s" % e.get("message", "unknown error"), e.get("sqlstate") or "XX000")
r = reply["result"]

# The rows of the output table: one per model (per group with grouping).
results = r["groups"]
if keys is not None:
    by_group = {g["group"]: g for g in results}
    results = [by_group.get(i + 1) or {"group": i + 1, "model": None, "stats": {}, "num_rows_processed": 0}
               for i in range(len(keys["keys"]))]
    for g, n in zip(results, keys["rows"]):
        g["rows"] = n
else:
    results[0]["rows"] = r["num_rows_processed"] + r["num_rows_skipped"]
    results[0]["train_seconds"] = r["train_seconds"]

def failed(g):
    coef = (g["model"] or {}).get("coef")
    return g["model"] is None or (coef is not None and any(x != x or x in (float("inf"), float("-inf")) for x in coef))

def value(g, name):
    m, s = g["model"] or {}, g["stats"]
    if name in ("coef", "u", "v", "row_ids", "col_ids"):
        return lit(m.get(name))
    if name == "dep_var_mapping":
        return lit(m.get("labels"))
    if name in ("num_missing_rows_skipped", "num_rows_skipped"):
        return str(g["rows"] - g["num_rows_processed"])
    if name in s:
        return lit(s[name])
    return None if g.get(name) is None else lit(g[name])

model_cols = columns_out + (([("dep_var_mapping", F8A)] if "labels" in (results[0]["model"] or {}) else [])
                            if algorithm not in BUILTINS else []) + TIMES
types = [t for _, t in model_cols]
if groups is None:
    plpy.execute("CREATE TABLE %s (%s)" % (out, ", ".join("%s %s" % c for c in model_cols)))
    insert = plpy.prepare("INSERT INTO %s VALUES (%s)" % (
        out, ", ".join("$%d::%s" % (i + 1, t) for i, t in enumerate(types))), ["text"] * len(types))
else:  # the output table was made before training
    insert = plpy.prepare("INSERT INTO %s SELECT %s, %s FROM pg_catalog.jsonb_populate_record(NULL::%s, "
                          "$1::pg_catalog.jsonb) AS k" % (
        out, ", ".join("k.%s" % plpy.quote_ident(g) for g in groups),
        ", ".join("$%d::%s" % (i + 2, t) for i, t in enumerate(types)), out), ["text"] * (len(types) + 1))
for i, g in enumerate(results):
    row = [value(g, c) for c, _ in model_cols]
    plpy.execute(insert, row if groups is None else [keys["keys"][i]] + row)

# The summary table: MADlib's columns for the algorithm, then ours.
processed = sum(g["num_rows_processed"] for g in results)
skipped = sum(g["rows"] for g in results) - processed
nfailed = sum(1 for g in results if failed(g))
group_text = grouping if groups is not None else None
if algorithm == "svm":
    extra_summary = extra_summary or {
        "version_number": plpy.execute(P["version"])[0]["extversion"], "kernel_func": "linear",
        "kernel_params": "fit_intercept=%s" % ("true" if r["intercept"] else "false"),
        "optim_params": "init_stepsize=%r, max_iter=%r, tolerance=%r" % (
            opts.get("stepsize", 0.1), opts.get("max_iter", 30), opts.get("tolerance", 0.0)),
        "reg_params": "lambda=%r, norm=L2, n_folds=0" % opts.get("lambda", 0.0001)}
    head = [("method", TEXT, "SVC"), ("version_number", TEXT, extra_summary["version_number"]),
            ("source_table", TEXT, source), ("model_table", TEXT, out), ("dependent_varname", TEXT, dep),
            ("independent_varname", TEXT, indep), ("kernel_func", TEXT, extra_summary["kernel_func"]),
            ("kernel_params", TEXT, extra_summary["kernel_params"]), ("grouping_col", TEXT, group_text),
            ("optim_params", TEXT, extra_summary["optim_params"]), ("reg_params", TEXT, extra_summary["reg_params"]),
            ("num_all_groups", I4, len(results)), ("num_failed_groups", I4, nfailed),
            ("total_rows_processed", I8, processed), ("total_rows_skipped", I8, skipped)]
else:
    head = [("method", TEXT, method), ("source_table", TEXT, source), ("out_table", TEXT, out),
            ("dependent_varname", TEXT, dep), ("independent_varname", TEXT, indep)]
    if algorithm == "logregr":
        head += [("optimizer_params", TEXT, "optimizer=%s, max_iter=%s, tolerance=%s" % (
                     opts.get("optimizer", "irls"), opts.get("max_iter", 20), opts.get("tolerance", 0.0001))),
                 ("num_all_groups", I4, len(results)), ("num_failed_groups", I4, nfailed)]
    head += [("num_rows_processed", I8, processed), ("num_missing_rows_skipped", I8, skipped),
             ("grouping_col", TEXT, group_text)]
# The features as predict takes them: one array, or the items (numbers or arrays) concatenated.
if r["features_form"] == "array" and groups is None:
    feature_expression = "(%s)::pg_catalog.float8[]" % indep
else:
    feature_expression = "(ARRAY[]::pg_catalog.float8[] %s)::pg_catalog.float8[]" % " ".join(
        "OPERATOR(pg_catalog.||) (%s)" % item for item in split_top(indep))
tail = [("grouping_columns", "pg_catalog.text[]", lit(groups) if groups is None else
         "{" + ",".join('"%s"' % g.replace("\\", "\\\\").replace('"', '\\"') for g in groups) + "}"),
        ("intercept", "pg_catalog.bool", r["intercept"]), ("num_features", I4, r["num_features"]),
        ("feature_expression", TEXT, feature_expression),
        ("params", "pg_catalog.jsonb", json.dumps({k: v for k, v in opts.items() if k != "grouped"})),
        ("read_path", TEXT, r["path"]), ("timings", "pg_catalog.jsonb", json.dumps(r["timings"]))]
cols = head + tail
plpy.execute("CREATE TABLE %s (%s, created pg_catalog.timestamptz DEFAULT pg_catalog.now())" % (
    summary, ", ".join("%s %s" % c[:2] for c in cols)))
plpy.execute(plpy.prepare("INSERT INTO %s VALUES (%s)" % (
    summary, ", ".join("$%d::%s" % (i + 1, c[1]) for i, c in enumerate(cols))), ["text"] * len(cols)),
    [None if c[2] is None else str(c[2]) for c in cols])
return [{"coef": (g["model"] or {}).get("coef"),
         "loss": g["stats"].get("loss", g.get("loss")), "num_rows_processed": g["num_rows_processed"],
         "num_rows_skipped": g["rows"] - g["num_rows_processed"], "num_iterations": g.get("num_iterations"),
         "train_seconds": g.get("train_seconds"), "accel_seconds": g.get("accel_seconds")} for g in results]
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

-- Linear SVM, MADlib's form: its arguments, its 'name=value, ...' params (init_stepsize,
-- max_iter, lambda, tolerance, norm=L2; lambda weighs ||w||^2 / 2 against the summed hinge
-- loss) and its defaults; kernel_params 'fit_intercept=true' adds the intercept (coef[1]).
CREATE FUNCTION learnedidx.svm_classification(source_table text, model_table text, dependent_varname text,
                                              independent_varname text, kernel_func text DEFAULT NULL,
                                              kernel_params text DEFAULT NULL, grouping_col text DEFAULT NULL,
                                              params text DEFAULT NULL, verbose boolean DEFAULT false)
RETURNS SETOF learnedidx.train_result LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT * FROM learnedidx._train('svm', source_table, model_table, dependent_varname, independent_varname,
        pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object('grouping_cols', grouping_col,
            'svm_classification', pg_catalog.jsonb_build_object('kernel_func', kernel_func,
                                                                'kernel_params', kernel_params, 'params', params))),
        pg_catalog.current_setting('search_path'));
END;

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

-- Drops a model: its output table and its summary table (PostgreSQL's ownership check applies;
-- a table that is not a model is refused, never dropped).
CREATE FUNCTION learnedidx.drop_model(model regclass) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s regclass := learnedidx._summary(model);
BEGIN
    EXECUTE format('DROP TABLE %s, %s', model::oid::regclass, s);
END $$;

CREATE FUNCTION learnedidx._predict_table(model regclass, source text, out_table text, caller_path text)
RETURNS bigint LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    features text;
    groups text[];
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
    EXECUTE format('SELECT s.feature_expression, ARRAY(SELECT pg_catalog.jsonb_array_elements_text(g.j) FROM '
                   '(SELECT pg_catalog.to_jsonb(s) -> ''grouping_columns'' AS j) AS g '
                   'WHERE pg_catalog.jsonb_typeof(g.j) = ''array'') FROM ONLY %s AS s', learnedidx._summary(model))
        INTO features, groups;
    -- a model trained with grouping scores each row with its group's coefficients
    stmt := format('CREATE TABLE %I.%I AS SELECT s.*, '
                   'learnedidx.predict(%s::pg_catalog.oid::pg_catalog.regclass, %s%s) AS prediction FROM %s AS s',
                   t.schema, t.relname, model::oid, features,
                   (SELECT pg_catalog.string_agg(', s.' || pg_catalog.quote_ident(g), '' ORDER BY i)
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
