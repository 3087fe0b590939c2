-- learnedidx 0.1: in-database ML UDFs (DAnA design) offloaded to the accelerator server.
\echo Use "CREATE EXTENSION learnedidx CASCADE" to load this file. \quit

-- Every trained model.  Rows are written by the training functions in the caller's
-- transaction, so a failed or cancelled training leaves none.
CREATE TABLE learnedidx.models (
    name text PRIMARY KEY,
    algorithm text NOT NULL,
    source text NOT NULL,
    dep text,
    indep text[] NOT NULL,
    params jsonb NOT NULL DEFAULT '{}',
    owner name NOT NULL DEFAULT current_user,
    created timestamptz NOT NULL DEFAULT now(),
    coef float8[],
    labels float8[],
    u float8[],
    v float8[],
    loss float8,
    num_rows_processed bigint,
    num_rows_skipped bigint,
    num_iterations int,
    train_seconds float8,
    accel_seconds float8,
    read_path text
);
-- Everyone reads the catalog; rows are added (by training) and removed (drop_model) by their owner only.
ALTER TABLE learnedidx.models ENABLE ROW LEVEL SECURITY;
CREATE POLICY models_read ON learnedidx.models FOR SELECT USING (true);
CREATE POLICY models_insert ON learnedidx.models FOR INSERT WITH CHECK (owner = current_user);
CREATE POLICY models_delete ON learnedidx.models FOR DELETE USING (owner = current_user);
GRANT SELECT, INSERT, DELETE ON learnedidx.models TO PUBLIC;
GRANT USAGE ON SCHEMA learnedidx TO PUBLIC;

-- Raises an error from SQL expressions (VOLATILE, so that the planner never folds it early).
CREATE FUNCTION learnedidx._fail(message text, sqlstate text DEFAULT '22023') RETURNS float8
LANGUAGE plpgsql VOLATILE AS $$ BEGIN RAISE EXCEPTION '%', message USING ERRCODE = sqlstate; END $$;

-- (The parameter is not called "args": PL/Python reserves that global for the argument list.)
-- Thin client of the accelerator server (standard library only: this runs in the backend's
-- Python).  Waits in short slices and runs pg_sleep(0) between them so that
-- pg_cancel_backend() and statement_timeout interrupt a long training call.
CREATE FUNCTION learnedidx._call(op text, request jsonb) RETURNS jsonb
LANGUAGE plpython3u VOLATILE AS $py$
import json, os, socket, struct
# Copies of the Python package's constants (this code imports the standard library only);
# tests/indb/test_extension_sql.py checks each against its original.
HEADER, MAGIC, VERSION = ">2sBBI", b"LX", 1  # learnedidx.server.protocol: frame header
def default_socket_path():
    # learnedidx.server.protocol.default_socket_path(), in the backend's environment
    env = os.environ.get("LEARNEDIDX_SOCKET")
    if env:
        return env
    base = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(base, "learnedidx", "accel.sock") if base else "/tmp/learnedidx-%d/accel.sock" % os.getuid()
path = plpy.execute("SELECT current_setting('learnedidx.socket', true) AS s")[0]["s"] or default_socket_path()
payload = json.dumps({"op": op, "id": 1, "args": json.loads(request)}).encode()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.settimeout(5)
    s.connect(path)
except OSError as exc:
    plpy.error("learnedidx accelerator server is not reachable at %s: %s" % (path, exc),
               hint="start it with: learnedidx server start --socket %s (or SET learnedidx.socket)" % path,
               sqlstate="08006")
try:
    s.sendall(struct.pack(HEADER, MAGIC, VERSION, 0, len(payload)) + payload)
    s.settimeout(0.2)
    def recv_exact(n):
        chunks = []
        while n:
            try:
                c = s.recv(min(n, 1 << 20))
            except socket.timeout:
                plpy.execute("SELECT pg_sleep(0)")  # lets cancel requests and statement_timeout in
                continue
            if not c:
                plpy.error("the learnedidx accelerator server at %s closed the connection mid-request" % path,
                           sqlstate="08006")
            chunks.append(c)
            n -= len(c)
        return b"".join(chunks)
    magic, version, flags, length = struct.unpack(HEADER, recv_exact(struct.calcsize(HEADER)))
    if magic != MAGIC or version != VERSION:
        plpy.error("unexpected reply from the learnedidx accelerator server at %s" % path)
    reply = json.loads(recv_exact(length))
finally:
    s.close()
if not reply.get("ok"):
    err = reply.get("error") or {}
    # learnedidx.errors.SQLSTATES (tests/test_errors.py checks that they agree)
    states = {"auth": "28000", "bad-data": "22023", "bad-parameter": "22023", "bad-request": "22023",
              "cache-miss": "55000", "cancelled": "57014", "config": "22023", "corrupt-log": "XX001",
              "device": "58000", "dsl": "42601", "internal": "XX000", "key-length": "22023",
              "key-type": "42804", "login": "28000", "not-supported": "0A000", "permission-denied": "42501",
              "protocol": "08P01", "snapshot": "25000", "store-closed": "55000", "store-locked": "55006",
              "strider-fallback": "0A000", "too-large": "54000", "trace-format": "22P02",
              "unavailable": "08006", "undefined-column": "42703", "undefined-table": "42P01",
              "unknown-algorithm": "42704", "unknown-op": "42883", "unsupported-type": "42804",
              "workload": "22023"}
    plpy.error("learnedidx: %s" % err.get("message", "unknown error"),
               sqlstate=states.get(err.get("kind"), "XX000"))
return json.dumps(reply.get("result") or {})
$py$;

-- Where the server reaches this cluster.  SECURITY DEFINER because reading
-- unix_socket_directories needs pg_read_all_settings; it only reveals the socket directory.
CREATE FUNCTION learnedidx._cluster(OUT host text, OUT port int, OUT db text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT btrim(split_part(current_setting('unix_socket_directories'), ',', 1)),
           current_setting('port')::int, current_database()::text
$$;

-- Runs a training request and stores the model: output table + catalog row, in the
-- caller's transaction.
CREATE FUNCTION learnedidx._train(algorithm text, source text, out_table text, dep text, indep text[],
                                  params jsonb, snapshot text, caller name, caller_xid xid8)
RETURNS jsonb LANGUAGE plpython3u VOLATILE AS $py$
import json
if caller_xid is not None:
    plpy.error("learnedidx cannot train inside a transaction that has already written data",
               detail="The accelerator reads the data through an exported snapshot, which cannot see this "
                      "transaction's own uncommitted writes.", hint="COMMIT first, then train.", sqlstate="25001")
if plpy.execute(plpy.prepare("SELECT 1 FROM learnedidx.models WHERE name = $1", ["text"]), [out_table]).nrows():
    plpy.error("a model named %s already exists in learnedidx.models" % out_table, sqlstate="42710")
if plpy.execute(plpy.prepare("SELECT to_regclass($1) IS NOT NULL AS e", ["text"]), [out_table])[0]["e"]:
    plpy.error("output table %s already exists" % out_table, sqlstate="42P07")
import re
QUERY_SOURCE = re.compile(r"\s*(\(|(select|with|values)\b)", re.I)  # learnedidx.indb.read.access.QUERY_SOURCE
src = [] if QUERY_SOURCE.match(source) else plpy.execute(plpy.prepare(
    "SELECT c.relpersistence AS p FROM pg_class c WHERE c.oid = to_regclass($1)", ["text"]), [source])
if len(src) and src[0]["p"] == "t":
    plpy.error("learnedidx cannot train on temporary table %s" % source,
               detail="The accelerator server reads through a session of its own, which cannot see this "
                      "session's temporary tables.", hint="Use a regular or unlogged table.", sqlstate="0A000")
conn = plpy.execute("SELECT * FROM learnedidx._cluster()")[0]
# The server logs in as the caller (session_user) and takes on current_user, so that the
# caller's privileges and row-level security apply to everything it reads.
args = {"algorithm": algorithm, "source": source, "dep": dep, "indep": list(indep), "params": params if isinstance(params, dict) else json.loads(params),
        "snapshot": snapshot, "login": caller, "role": plpy.execute("SELECT current_user AS u")[0]["u"],
        # lets the server stop training once this statement is cancelled or times out
        "caller_pid": plpy.execute("SELECT pg_backend_pid() AS p")[0]["p"],
        "caller_xact_start": plpy.execute("SELECT now()::text AS t")[0]["t"],
        "host": conn["host"].strip(), "port": int(conn["port"]),
        "dbname": conn["db"], "search_path": plpy.execute("SELECT current_setting('search_path') AS p")[0]["p"]}
# Session settings learnedidx.reader (auto, strider, copy) and learnedidx.threads apply unless params name them.
for key in ("reader", "threads"):
    v = plpy.execute("SELECT current_setting('learnedidx.%s', true) AS v" % key)[0]["v"]
    if v and key not in args["params"]:
        if key == "threads" and not v.isdigit():
            plpy.error("learnedidx.threads must be a positive integer, not %r" % v, sqlstate="22023")
        args["params"][key] = int(v) if key == "threads" else v
raw = plpy.execute(plpy.prepare("SELECT learnedidx._call('indb.train', $1::jsonb)::text AS r", ["text"]),
                   [json.dumps(args)])[0]["r"]
r = json.loads(raw)
def lit(v):
    # Array literals pass as text: converting nested lists element by element in PL/Python
    # costs far more than PostgreSQL parsing one float8[] literal.
    if v is None:
        return None
    return "{" + ",".join(lit(x) if isinstance(x, list) else repr(float(x)) for x in v) + "}"
m = {k: lit(v) for k, v in r["model"].items()}
stats = [r["loss"], r["num_rows_processed"], r["num_rows_skipped"], r["num_iterations"], r["train_seconds"],
         r["accel_seconds"]]
q = plpy.quote_ident
parts = out_table.split(".")
if len(parts) > 2:
    plpy.error("bad output table name %s" % out_table, sqlstate="42602")
target = ".".join(q(p) for p in parts)
if algorithm == "lmf":
    plpy.execute("CREATE TABLE %s (u float8[], v float8[], loss float8, num_rows_processed bigint, "
                 "num_rows_skipped bigint, num_iterations int, train_seconds float8, accel_seconds float8)" % target)
    plpy.execute(plpy.prepare("INSERT INTO %s VALUES ($1::float8[], $2::float8[], $3, $4, $5, $6, $7, $8)" % target,
                              ["text", "text", "float8", "bigint", "bigint", "int", "float8", "float8"]),
                 [m["u"], m["v"]] + stats)
else:
    plpy.execute("CREATE TABLE %s (coef float8[], loss float8, num_rows_processed bigint, num_rows_skipped bigint, "
                 "num_iterations int, train_seconds float8, accel_seconds float8)" % target)
    plpy.execute(plpy.prepare("INSERT INTO %s VALUES ($1::float8[], $2, $3, $4, $5, $6, $7)" % target,
                              ["text", "float8", "bigint", "bigint", "int", "float8", "float8"]),
                 [m["coef"]] + stats)
plpy.execute(plpy.prepare(
    "INSERT INTO learnedidx.models (name, algorithm, source, dep, indep, params, coef, labels, u, v, loss, "
    "num_rows_processed, num_rows_skipped, num_iterations, train_seconds, accel_seconds, read_path) "
    "VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7::float8[], $8::float8[], $9::float8[], $10::float8[], $11, $12, $13, "
    "$14, $15, $16, $17)",
    ["text", "text", "text", "text", "text[]", "text", "text", "text", "text", "text", "float8",
     "bigint", "bigint", "int", "float8", "float8", "text"]),
    [out_table, algorithm, source, dep, list(indep), params, m.get("coef"), m.get("labels"), m.get("u"), m.get("v")]
    + stats + [r.get("path")])
return json.dumps(r)
$py$;

-- indep: one array column, 'x1, x2, ...', or MADlib's 'ARRAY[1, x1, x2, ...]' (the 1 is the intercept).
CREATE FUNCTION learnedidx._indep_items(indep text) RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT array_agg(btrim(c)) FROM unnest(string_to_array(
        coalesce(substring(indep from '(?i)^\s*array\s*\[(.*)\]\s*$'), indep), ',')) AS c
$$;

CREATE FUNCTION learnedidx._split_indep(indep text) RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$ SELECT array_remove(learnedidx._indep_items(indep), '1') $$;

-- MADlib's form states the intercept: true with a 1 among the items, false without; NULL otherwise.
CREATE FUNCTION learnedidx._intercept(indep text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN indep ~* '^\s*array\s*\[' THEN '1' = ANY(learnedidx._indep_items(indep)) END
$$;

CREATE FUNCTION learnedidx._floats(j jsonb) RETURNS float8[]
LANGUAGE sql IMMUTABLE AS $$ SELECT ARRAY(SELECT jsonb_array_elements_text(j)::float8) $$;

CREATE TYPE learnedidx.train_result AS (
    coef float8[], loss float8, num_rows_processed bigint, num_rows_skipped bigint, num_iterations int,
    train_seconds float8, accel_seconds float8);

CREATE FUNCTION learnedidx._result(r jsonb) RETURNS learnedidx.train_result
LANGUAGE sql IMMUTABLE AS $$
    SELECT learnedidx._floats(r->'model'->'coef'), (r->>'loss')::float8, (r->>'num_rows_processed')::bigint,
           (r->>'num_rows_skipped')::bigint, (r->>'num_iterations')::int, (r->>'train_seconds')::float8,
           (r->>'accel_seconds')::float8
$$;

-- Training runs in FROM, not as (f()).*, which would call it once per output column.
-- The training functions are LANGUAGE sql so that pg_export_snapshot() runs in the caller's
-- top-level transaction (PL/Python would run it in a subtransaction, which PostgreSQL refuses).
CREATE FUNCTION learnedidx.linregr_train(source text, out_table text, dep text, indep text,
                                         "intercept" boolean DEFAULT true)
RETURNS SETOF learnedidx.train_result LANGUAGE sql VOLATILE AS $$
    SELECT * FROM learnedidx._result(learnedidx._train('linregr', source, out_table, dep, learnedidx._split_indep(indep),
            jsonb_build_object('intercept', coalesce(learnedidx._intercept(indep), "intercept")), pg_export_snapshot(), session_user,
            pg_current_xact_id_if_assigned()))
$$;

-- MADlib's signature; grouping_cols must be NULL (one model per call), optimizer 'irls' or 'newton'.
CREATE FUNCTION learnedidx.logregr_train(source text, out_table text, dep text, indep text,
                                         grouping_cols text DEFAULT NULL, max_iter int DEFAULT 20,
                                         optimizer text DEFAULT 'irls', tolerance float8 DEFAULT 0.0001,
                                         verbose boolean DEFAULT false)
RETURNS SETOF learnedidx.train_result LANGUAGE sql VOLATILE AS $$
    SELECT * FROM learnedidx._result(learnedidx._train('logregr', source, out_table, dep, learnedidx._split_indep(indep),
            jsonb_build_object('max_iter', max_iter, 'tolerance', tolerance, 'optimizer', optimizer,
                               'intercept', learnedidx._intercept(indep),
                               'grouping_cols', grouping_cols),
            pg_export_snapshot(), session_user, pg_current_xact_id_if_assigned()))
$$;

CREATE FUNCTION learnedidx.svm_train(source text, out_table text, dep text, indep text,
                                     lambda float8 DEFAULT 0.0001, max_iter int DEFAULT 30,
                                     stepsize float8 DEFAULT 0.1)
RETURNS SETOF learnedidx.train_result LANGUAGE sql VOLATILE AS $$
    SELECT * FROM learnedidx._result(learnedidx._train('svm', source, out_table, dep, learnedidx._split_indep(indep),
            jsonb_build_object('lambda', lambda, 'max_iter', max_iter, 'stepsize', stepsize,
                               'intercept', learnedidx._intercept(indep)),
            pg_export_snapshot(), session_user, pg_current_xact_id_if_assigned()))
$$;

CREATE FUNCTION learnedidx.lmf_train(source text, out_table text, col_row text, col_column text, col_value text,
                                     max_rank int DEFAULT 10, stepsize float8 DEFAULT 0.01,
                                     lambda float8 DEFAULT 0.01, num_iterations int DEFAULT 50,
                                     scale_factor float8 DEFAULT 0.1)
RETURNS TABLE(loss float8, num_rows_processed bigint, num_iterations int, train_seconds float8,
              accel_seconds float8)
LANGUAGE sql VOLATILE AS $$
    SELECT (r->>'loss')::float8, (r->>'num_rows_processed')::bigint, (r->>'num_iterations')::int,
           (r->>'train_seconds')::float8, (r->>'accel_seconds')::float8
    FROM learnedidx._train('lmf', source, out_table, col_value, ARRAY[col_row, col_column],
            jsonb_build_object('rank', max_rank, 'stepsize', stepsize, 'lambda', lambda,
                               'max_iter', num_iterations, 'scale_factor', scale_factor),
            pg_export_snapshot(), session_user, pg_current_xact_id_if_assigned()) r
$$;

-- User algorithms written in the DSL (see docs/dsl.md).
CREATE TABLE learnedidx.algorithms (
    name text PRIMARY KEY,
    source text NOT NULL,
    owner name NOT NULL DEFAULT current_user,
    created timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE learnedidx.algorithms ENABLE ROW LEVEL SECURITY;
CREATE POLICY algorithms_read ON learnedidx.algorithms FOR SELECT USING (true);
CREATE POLICY algorithms_insert ON learnedidx.algorithms FOR INSERT WITH CHECK (owner = current_user);
GRANT SELECT, INSERT ON learnedidx.algorithms TO PUBLIC;

CREATE FUNCTION learnedidx.register_algorithm(name text, source text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM learnedidx._call('indb.register', jsonb_build_object('name', name, 'source', source));
    INSERT INTO learnedidx.algorithms (name, source) VALUES (name, source);
    RETURN name;
END $$;

CREATE FUNCTION learnedidx.train(name text, source text, dep text, indep text, params jsonb DEFAULT '{}',
                                 out_table text DEFAULT NULL)
RETURNS SETOF learnedidx.train_result LANGUAGE sql VOLATILE AS $$
    SELECT * FROM learnedidx._result(learnedidx._train(name, source, coalesce(out_table, name || '_model'), dep,
            learnedidx._split_indep(indep),
            jsonb_strip_nulls(jsonb_build_object('intercept', learnedidx._intercept(indep))) || params
            || jsonb_build_object('dsl_source', (SELECT a.source FROM learnedidx.algorithms a WHERE a.name = train.name)),
            pg_export_snapshot(), session_user, pg_current_xact_id_if_assigned()))
$$;

-- Prediction: plain SQL over the stored coefficients (no server round trip per row).
-- coef[1] is the intercept when the model has one coefficient more than there are features.
-- NULL features (or a NULL element) predict NULL; a feature count the model does not fit is an error.
CREATE FUNCTION learnedidx._score(coef float8[], features float8[]) RETURNS float8
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN features IS NULL OR array_position(features, NULL) IS NOT NULL THEN NULL
                WHEN cardinality(coef) = cardinality(features) + 1
                THEN coef[1] + (SELECT sum(c * f) FROM unnest(coef[2:], features) AS t(c, f))
                WHEN cardinality(coef) = cardinality(features)
                THEN (SELECT sum(c * f) FROM unnest(coef, features) AS t(c, f))
                ELSE learnedidx._fail(format('the model has %s coefficients; %s features do not fit it',
                                             cardinality(coef), cardinality(features))) END
$$;

-- LMF: features = ARRAY[row id, column id]; u[row] . v[column], NULL for ids the model has not seen.
CREATE FUNCTION learnedidx._lmf_score(u float8[], v float8[], features float8[]) RETURNS float8
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN cardinality(features) IS DISTINCT FROM 2
                THEN learnedidx._fail('LMF models predict from ARRAY[row id, column id]')
                ELSE (SELECT sum(a * b) FROM unnest(u[features[1] + 1:features[1] + 1][:],
                                                     v[features[2] + 1:features[2] + 1][:]) AS t(a, b)) END
$$;

CREATE FUNCTION learnedidx.predict(model text, features float8[]) RETURNS float8
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN m.name IS NULL THEN learnedidx._fail(format('no model named %s', model), '42704')
                WHEN m.algorithm = 'logregr' THEN (learnedidx._score(m.coef, features) > 0)::int::float8
                WHEN m.algorithm = 'svm'
                THEN CASE WHEN learnedidx._score(m.coef, features) > 0 THEN m.labels[2] ELSE m.labels[1] END
                WHEN m.algorithm = 'lmf' THEN learnedidx._lmf_score(m.u, m.v, features)
                ELSE learnedidx._score(m.coef, features) END
    FROM (VALUES (1)) AS one(x) LEFT JOIN learnedidx.models m ON m.name = model
$$;

CREATE FUNCTION learnedidx.predict_proba(model text, features float8[]) RETURNS float8
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN m.name IS NULL THEN learnedidx._fail(format('no model named %s', model), '42704')
                WHEN m.algorithm <> 'logregr'
                THEN learnedidx._fail(format('predict_proba needs a logistic regression model; %s is %s',
                                             model, m.algorithm), '42809')
                ELSE 1.0 / (1.0 + exp(-learnedidx._score(m.coef, features))) END
    FROM (VALUES (1)) AS one(x) LEFT JOIN learnedidx.models m ON m.name = model
$$;

-- Removes a model of one's own: its catalog row and its output table.
CREATE FUNCTION learnedidx.drop_model(model text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    DELETE FROM learnedidx.models WHERE name = model;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM learnedidx.models WHERE name = model) THEN
            RAISE EXCEPTION 'model % belongs to another role', model USING ERRCODE = '42501';
        END IF;
        RAISE EXCEPTION 'no model named %', model USING ERRCODE = '42704';
    END IF;
    EXECUTE format('DROP TABLE IF EXISTS %s',
                   array_to_string(ARRAY(SELECT quote_ident(x) FROM unnest(parse_ident(model)) x), '.'));
END $$;

CREATE FUNCTION learnedidx.predict_table(model text, source text, out_table text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    m learnedidx.models;
    feats text;
    n bigint;
BEGIN
    SELECT * INTO m FROM learnedidx.models WHERE name = model;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no model named %', model USING ERRCODE = '42704';
    END IF;
    IF cardinality(m.indep) = 1 THEN
        feats := format('%I::float8[]', m.indep[1]);
    ELSE
        feats := format('ARRAY[%s]::float8[]', (SELECT string_agg(format('%I', c), ', ') FROM unnest(m.indep) c));
    END IF;
    EXECUTE format('CREATE TABLE %s AS SELECT s.*, learnedidx.predict(%L, %s) AS prediction FROM %s s',
                   array_to_string(ARRAY(SELECT quote_ident(x) FROM unnest(parse_ident(out_table)) x), '.'),
                   model, feats, source::regclass);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
