"""The security model as attacks (the findings of the security review of the extension).

Each test is an attack that succeeded against the previous design, in which the server logged
in to PostgreSQL with identity fields a public function passed to it; here the data are read in
the caller's backend, as the caller, and the server has no database identity to abuse.
"""
from __future__ import annotations

import contextlib
import json
import socket
import struct

import numpy as np
import psycopg
import pytest

from tests.indb.conftest import connect, load, make_role

pytestmark = pytest.mark.postgres

IDENTITY_WORDS = {"login", "role", "caller", "dbname", "database", "host", "port", "socket", "conninfo", "snapshot",
                  "user", "session_user", "caller_xid", "path"}


def _secret(db) -> None:
    db.execute("CREATE TABLE secret (y float8, x float8)")
    db.execute("INSERT INTO secret SELECT g, g % 7 FROM generate_series(1, 100) g")


# ----------------------------------------------------------------- 1. any role became superuser
def test_no_public_function_takes_an_identity_or_a_connection_target(db):
    rows = db.execute(
        "SELECT p.proname, coalesce(p.proargnames, '{}') FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid "
        "AND d.classid = 'pg_proc'::regclass AND d.deptype = 'e' JOIN pg_extension e ON e.oid = d.refobjid "
        "WHERE e.extname = 'learnedidx' AND has_function_privilege('public', p.oid, 'EXECUTE')").fetchall()
    names = {r[0] for r in rows}
    assert {"linregr_train", "predict", "_offload"} <= names and not {"_call", "_cluster"} & names
    assert [(name, args) for name, args in rows if IDENTITY_WORDS & set(args)] == []


def test_forged_identity_fields_are_ignored_and_privileges_are_the_callers(db):
    _secret(db)
    make_role(db, "mallory")
    db.execute("GRANT CREATE ON SCHEMA public TO mallory")
    forged = json.dumps({"algorithm": "linregr", "params": {}, "login": db.info.user, "role": db.info.user,
                         "caller": db.info.user, "dbname": "postgres", "host": "/tmp", "port": 5432,
                         "snapshot": "00000003-00000002-1", "search_path": "pg_catalog"})
    with connect(db, "mallory") as m:
        for call, args in [
            ("SELECT learnedidx._offload('indb.train', %s::jsonb, 'secret', '{y,x}')", (forged,)),
            ("SELECT learnedidx._offload('indb.train', %s::jsonb, NULL, NULL, 'SELECT y, x FROM public.secret')",
             (forged,)),
            ("SELECT * FROM learnedidx.linregr_train('secret', 'stolen', 'y', 'x')", None),
            ("SELECT * FROM learnedidx.linregr_train('SELECT * FROM secret', 'stolen', 'y', 'x')", None),
            ("SELECT * FROM learnedidx.svm_train('public.secret', 'stolen', 'y', 'x')", None),
        ]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied for table secret"):
                m.execute(call, args)
        with pytest.raises(psycopg.errors.UndefinedFunction):  # the old entry point is gone
            m.execute("SELECT learnedidx._train('linregr', 'secret', 'o', 'y', '{x}', '{}', NULL, %s, NULL)",
                      (db.info.user,))
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="unknown operation"):
            m.execute("SELECT learnedidx._offload('stats', '{}')")
    assert db.execute("SELECT to_regclass('stolen')").fetchone() == (None,)


def test_server_files_and_pg_authid_stay_out_of_reach(db):
    make_role(db, "mallory")
    db.execute("GRANT CREATE ON SCHEMA public TO mallory")
    with connect(db, "mallory") as m:
        for source, dep in [("SELECT length(pg_read_file('/etc/passwd'))::float8 AS y, 1 AS x", "y"),
                            ("SELECT 1::float8 AS y, 1 AS x", "pg_read_file('/etc/passwd')::float8"),
                            ("pg_authid", "oid"), ("SELECT oid::int::float8 AS y, rolpassword AS x FROM pg_authid", "y")]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as err:
                m.execute("SELECT * FROM learnedidx.linregr_train(%s, 'stolen', %s, %s)",
                          (source, dep, "oid" if source == "pg_authid" else "x"))
            assert "root:" not in str(err.value) and "SCRAM" not in str(err.value)


def test_a_database_without_connect_stays_out_of_reach(db):
    vault = f"vault_{db.info.dbname}"[:60]
    db.execute(f'CREATE DATABASE "{vault}"')
    try:
        with connect(db, dbname=vault) as v:
            v.execute("CREATE TABLE loot (y float8, x float8)")
            v.execute("INSERT INTO loot SELECT g, g FROM generate_series(1, 10) g")
        db.execute(f'REVOKE CONNECT ON DATABASE "{vault}" FROM PUBLIC')
        make_role(db, "mallory")
        with connect(db, "mallory") as m:
            args = json.dumps({"algorithm": "linregr", "params": {}, "dbname": vault})
            with pytest.raises(psycopg.errors.UndefinedTable):
                m.execute("SELECT learnedidx._offload('indb.train', %s::jsonb, NULL, NULL, 'SELECT y, x FROM loot')",
                          (args,))
            with pytest.raises(psycopg.errors.FeatureNotSupported, match="cross-database references"):
                m.execute(f"SELECT * FROM learnedidx.linregr_train('{vault}.public.loot', 'l', 'y', 'x')")
    finally:
        db.execute(f'DROP DATABASE "{vault}"')


def test_reset_role_in_a_query_source_runs_in_the_callers_own_session(db):
    """Code the caller controls runs in its own backend: RESET ROLE / SET ROLE / SET SESSION
    AUTHORIZATION there give it nothing it did not have."""
    su = db.info.user
    make_role(db, "mallory")
    db.execute("GRANT CREATE ON SCHEMA public TO mallory")
    with connect(db, "mallory") as m:
        m.execute("CREATE TABLE mt (y float8, x float8)")
        m.execute("INSERT INTO mt SELECT g, g % 3 FROM generate_series(1, 50) g")
        m.execute(f"""CREATE FUNCTION grab(v float8) RETURNS float8 LANGUAGE plpgsql AS $$
            BEGIN
                BEGIN EXECUTE 'RESET ROLE'; EXECUTE 'SET ROLE {su}'; EXCEPTION WHEN insufficient_privilege THEN NULL; END;
                BEGIN EXECUTE 'SET SESSION AUTHORIZATION {su}'; EXCEPTION WHEN insufficient_privilege THEN NULL; END;
                IF (SELECT rolsuper FROM pg_roles WHERE rolname IN (current_user, session_user) ORDER BY 1 DESC LIMIT 1)
                THEN RAISE EXCEPTION 'escalated to %', current_user; END IF;
                RETURN v;
            END $$""")
        m.execute("CREATE VIEW mv AS SELECT y, grab(x) AS x FROM mt")
        assert m.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('mv', 'mv_m', 'y', 'x')"
                         ).fetchone() == (50,)
        assert m.execute("SELECT num_rows_processed FROM learnedidx.linregr_train("
                         "'SELECT y, grab(x) AS x FROM mt', 'q_m', 'grab(y)', 'x')").fetchone() == (50,)
        assert m.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'mv_m'").fetchone() == ("mallory",)


# ----------------------------------------------------------------- 2. SECURITY DEFINER
def test_a_security_definer_training_function_trains_as_its_owner(db):
    make_role(db, "bob")
    make_role(db, "alice")
    db.execute("GRANT CREATE ON SCHEMA public TO bob")
    with connect(db, "bob") as b:
        b.execute("CREATE TABLE bobs (y float8, x float8)")
        b.execute("INSERT INTO bobs SELECT g, 2 * g FROM generate_series(1, 40) g")
        b.execute("""CREATE FUNCTION train_bobs(name text) RETURNS bigint LANGUAGE sql SECURITY DEFINER AS $$
                     SELECT num_rows_processed FROM learnedidx.linregr_train('bobs', name, 'y', 'x') $$""")
        b.execute("GRANT EXECUTE ON FUNCTION train_bobs(text) TO alice")
    with connect(db, "alice") as a:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            a.execute("SELECT * FROM bobs")
        assert a.execute("SELECT train_bobs('bobs_model')").fetchone() == (40,)
    assert db.execute("SELECT tableowner FROM pg_tables WHERE tablename IN ('bobs_model', 'bobs_model_summary')"
                      ).fetchall() == [("bob",), ("bob",)]


def test_a_definer_functions_view_cannot_leave_its_owners_role(db):
    """A superuser calls a low-privilege role's SECURITY DEFINER training function whose view
    tries to change role: PostgreSQL's own rule refuses it (42501), as for its own SELECT."""
    make_role(db, "bob")
    db.execute("GRANT CREATE ON SCHEMA public TO bob")
    _secret(db)
    with connect(db, "bob") as b:
        b.execute("CREATE TABLE bt (y float8, x float8)")
        b.execute("INSERT INTO bt SELECT g, g FROM generate_series(1, 20) g")
        for name, stmt in (("reset_role", "RESET ROLE"), ("set_role", f"SET ROLE {db.info.user}")):
            b.execute(f"""CREATE FUNCTION {name}(v float8) RETURNS float8 LANGUAGE plpgsql AS $$
                          BEGIN EXECUTE '{stmt}'; RETURN (SELECT count(*) FROM secret); END $$""")
            b.execute(f"CREATE VIEW {name}_v AS SELECT y, {name}(x) AS x FROM bt")
            b.execute(f"""CREATE FUNCTION train_{name}() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS $$
                          SELECT num_rows_processed FROM learnedidx.linregr_train('{name}_v', '{name}_m', 'y', 'x') $$""")
    for name in ("reset_role", "set_role"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="within security-definer function"):
            db.execute(f"SELECT train_{name}()")
        assert db.execute(f"SELECT to_regclass('{name}_m')").fetchone() == (None,)


# ----------------------------------------------------------------- 3. the caller's context
def test_session_settings_apply_timezone_and_custom_settings_in_policies(db):
    db.execute("CREATE TABLE tz (ts timestamptz, x float8)")
    db.execute("INSERT INTO tz SELECT '2024-01-01 00:00+00'::timestamptz + g * interval '97 minutes', g "
               "FROM generate_series(1, 200) g")
    db.execute("CREATE VIEW tzv AS SELECT extract(hour FROM ts)::float8 AS y, x FROM tz")
    fits = {}
    for zone in ("UTC", "Asia/Tokyo"):
        db.execute(f"SET TimeZone = '{zone}'")
        rows = np.array(db.execute("SELECT y, x FROM tzv").fetchall())
        coef = db.execute(f"SELECT coef FROM learnedidx.linregr_train('tzv', 'tz_{zone[:3].lower()}', 'y', 'x')"
                          ).fetchone()[0]
        np.testing.assert_allclose(coef, np.linalg.lstsq(np.c_[np.ones(200), rows[:, 1]], rows[:, 0], rcond=None)[0],
                                   rtol=1e-9)
        fits[zone] = coef
    assert not np.allclose(fits["UTC"], fits["Asia/Tokyo"])
    db.execute("RESET TimeZone")
    # a policy reading a custom setting of the caller's session
    make_role(db, "tenant_user")
    db.execute("GRANT CREATE ON SCHEMA public TO tenant_user")
    db.execute("CREATE TABLE tenants (tenant text, y float8, x float8)")
    db.execute("INSERT INTO tenants SELECT CASE WHEN g <= 30 THEN 'a' ELSE 'b' END, g, g FROM generate_series(1, 100) g")
    db.execute("ALTER TABLE tenants ENABLE ROW LEVEL SECURITY")
    db.execute("CREATE POLICY by_tenant ON tenants USING (tenant = current_setting('app.tenant'))")
    db.execute("GRANT SELECT ON tenants TO tenant_user")
    with connect(db, "tenant_user") as t:
        with pytest.raises(psycopg.errors.UndefinedObject, match="app.tenant"):  # PostgreSQL's own error
            t.execute("SELECT * FROM learnedidx.linregr_train('tenants', 'tn', 'y', 'x')")
        t.execute("SET app.tenant = 'a'")
        assert t.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('tenants', 'tn', 'y', 'x')"
                         ).fetchone() == (30,)
        assert t.execute("SELECT read_path FROM tn_summary").fetchone() == ("query",)


def test_temporary_tables_uncommitted_rows_and_several_trainings_in_one_transaction(db):
    db.execute("CREATE TEMP TABLE tmp (y float8, x float8)")
    db.execute("INSERT INTO tmp SELECT g, g % 4 FROM generate_series(1, 60) g")
    assert db.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('tmp', 'pg_temp.tmp_m', 'y', 'x')"
                      ).fetchone() == (60,)
    assert db.execute("SELECT read_path FROM tmp_m_summary").fetchone() == ("pages",)
    assert db.execute("SELECT relpersistence FROM pg_class WHERE oid = 'tmp_m'::regclass").fetchone() == ("t",)
    db.execute("CREATE TABLE mine (y float8, x float8)")
    db.autocommit = False
    db.execute("INSERT INTO mine SELECT g, g FROM generate_series(1, 25) g")
    assert db.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('mine', 'mine_1', 'y', 'x')"
                      ).fetchone() == (25,)
    db.execute("DELETE FROM mine WHERE y > 20")
    assert db.execute("SELECT num_rows_processed FROM learnedidx.logregr_train('SELECT y > 10 AS y, x FROM mine', "
                      "'mine_2', 'y', 'x')").fetchone() == (20,)
    db.rollback()
    assert db.execute("SELECT to_regclass('mine_1'), to_regclass('mine_2')").fetchone() == (None, None)
    db.execute("INSERT INTO mine SELECT g, g FROM generate_series(1, 25) g")
    db.execute("SELECT * FROM learnedidx.linregr_train('mine', 'mine_1', 'y', 'x')")
    db.execute("SELECT * FROM learnedidx.linregr_train('mine', 'mine_2', 'y', 'x')")
    db.commit()
    db.autocommit = True
    assert [r[0] for r in db.execute("SELECT model::text FROM learnedidx.models ORDER BY 1").fetchall()] == \
        ["mine_1", "mine_2", "tmp_m"]


# ----------------------------------------------------------------- 4. models and algorithms
def test_models_are_their_tables_and_share_their_privileges(db):
    make_role(db, "bob")
    make_role(db, "alice")
    db.execute("GRANT CREATE ON SCHEMA public TO bob, alice")
    with connect(db, "bob") as b:
        b.execute("CREATE TABLE ratings (u int, i int, r float8)")
        b.execute("INSERT INTO ratings SELECT g % 20, g % 13, (g % 5)::float8 FROM generate_series(1, 400) g")
        b.execute("SELECT * FROM learnedidx.lmf_train('ratings', 'bob_lmf', 'u', 'i', 'r', max_rank => 2)")
    with connect(db, "alice") as a:
        assert a.execute("SELECT count(*) FROM learnedidx.models").fetchone() == (0,)  # the catalog does not leak
        for stmt in ("SELECT u, v FROM bob_lmf", "SELECT learnedidx.predict('bob_lmf', '{1, 2}')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied for table bob_lmf"):
                a.execute(stmt)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            a.execute("SELECT learnedidx.drop_model('bob_lmf')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # nor write into it
            a.execute("UPDATE bob_lmf SET u = NULL")
    with connect(db, "bob") as b:
        b.execute("GRANT SELECT ON bob_lmf, bob_lmf_summary TO alice")
    with connect(db, "alice") as a:
        assert a.execute("SELECT model::text FROM learnedidx.models").fetchall() == [("bob_lmf",)]
        assert a.execute("SELECT learnedidx.predict('bob_lmf', '{1, 2}')").fetchone()[0] is not None
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="must be owner"):
            a.execute("SELECT learnedidx.drop_model('bob_lmf')")
        # predict_table evaluates the feature expression bob's training wrote: bob's SQL, not
        # run as alice; predict, given the features, is hers to call
        a.execute("CREATE TABLE mine (u int, i int)")
        a.execute("INSERT INTO mine VALUES (1, 2), (999, 1)")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="SQL its owner wrote"):
            a.execute("SELECT learnedidx.predict_table('bob_lmf', 'mine', 'mine_pred')")
        assert a.execute("SELECT count(learnedidx.predict('bob_lmf', ARRAY[u, i])) FROM mine").fetchone() == (1,)
    with connect(db, "bob") as b:  # bob's own: his source and his expression
        assert b.execute("SELECT learnedidx.predict_table('bob_lmf', 'ratings', 'bob_pred')").fetchone() == (400,)


def test_no_role_creates_models_or_algorithms_for_another(db):
    for r in ("alice", "mallory", "bob"):
        make_role(db, r)
    db.execute("CREATE SCHEMA alice AUTHORIZATION alice")
    db.execute("GRANT CREATE ON SCHEMA public TO mallory")
    db.execute("CREATE TABLE shared (y float8, x float8)")
    db.execute("INSERT INTO shared SELECT g, g FROM generate_series(1, 30) g")
    db.execute("GRANT SELECT ON shared TO alice, mallory")
    source = "epochs = 1\ndef gradient(w, x, y):\n    return (dot(w, x) - y) * x\n"
    with connect(db, "mallory") as m:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="schema alice"):
            m.execute("SELECT * FROM learnedidx.linregr_train('shared', 'alice.churn', 'y', 'x')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            m.execute("SELECT learnedidx.register_algorithm('alice.ridge', %s)", (source,))
        alice_oid = m.execute("SELECT 'alice'::regrole::oid").fetchone()[0]
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            m.execute("INSERT INTO learnedidx.algorithms (nspoid, name, owner, source) "
                      "VALUES ('public'::regnamespace, 'ridge', %s, %s)", (alice_oid, source))
        m.execute("SELECT learnedidx.register_algorithm('ridge', %s)", (source.replace("epochs = 1", "epochs = 2"),))
    with connect(db, "alice") as a:
        with pytest.raises(psycopg.errors.UndefinedObject, match="unknown algorithm"):  # mallory's is not hers
            a.execute("SELECT * FROM learnedidx.train('ridge', 'shared', 'y', 'x')")
        a.execute("SELECT learnedidx.register_algorithm('ridge', %s)", (source,))  # into schema alice ("$user")
        assert a.execute("SELECT num_iterations FROM learnedidx.train('ridge', 'shared', 'y', 'x', '{}', "
                         "'alice.r_m')").fetchone() == (1,)
        assert a.execute("SELECT method FROM alice.r_m_summary").fetchone() == ("alice.ridge",)
        assert a.execute("SELECT name FROM learnedidx.algorithms").fetchall() == [("ridge",)]  # hers only
        a.execute("SELECT learnedidx.grant_algorithm('ridge', 'mallory')")
    with connect(db, "mallory") as m:
        assert m.execute("SELECT count(*) FROM learnedidx.algorithms").fetchone() == (2,)  # own + granted
        m.execute("SELECT * FROM learnedidx.train('alice.ridge', 'shared', 'y', 'x', '{}', 'm_ridge')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="must be owner"):
            m.execute("SELECT learnedidx.drop_algorithm('alice.ridge')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            m.execute("SELECT learnedidx.grant_algorithm('alice.ridge', 'bob')")
    with connect(db, "alice") as a:
        a.execute("SELECT learnedidx.revoke_algorithm('ridge', 'mallory')")
    with connect(db, "mallory") as m:
        with pytest.raises(psycopg.errors.UndefinedObject):
            m.execute("SELECT * FROM learnedidx.train('alice.ridge', 'shared', 'y', 'x', '{}', 'm_ridge2')")


def test_model_names_resolve_as_relation_names(db):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 2))
    load(db, "src", X, X @ [1.0, 1.0])
    db.execute("CREATE SCHEMA s1")
    db.execute("SET search_path = s1, public")
    db.execute("""SELECT * FROM learnedidx.linregr_train('src', '"MyModel"', 'y', 'features')""")
    assert db.execute("""SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 's1."MyModel"'::regclass"""
                      ).fetchone() == ("s1",)  # the first schema of the caller's search_path
    db.execute("CREATE TABLE mymodel (coef float8[])")  # unquoted MyModel: another table
    with pytest.raises(psycopg.errors.WrongObjectType, match="not a learnedidx model"):
        db.execute("SELECT learnedidx.drop_model('MyModel')")
    db.execute("""SELECT learnedidx.drop_model('"MyModel"')""")
    assert db.execute("""SELECT to_regclass('s1."MyModel"'), to_regclass('s1.mymodel') IS NOT NULL""").fetchone() == \
        (None, True)


# ----------------------------------------------------------------- search_path
def test_every_function_pins_search_path_or_has_a_standard_body(db):
    rows = db.execute(
        "SELECT p.proname, l.lanname, p.proconfig, p.prosqlbody IS NOT NULL FROM pg_proc p "
        "JOIN pg_language l ON l.oid = p.prolang JOIN pg_depend d ON d.objid = p.oid "
        "AND d.classid = 'pg_proc'::regclass AND d.deptype = 'e' JOIN pg_extension e ON e.oid = d.refobjid "
        "WHERE e.extname = 'learnedidx'").fetchall()
    assert len(rows) > 20
    # predict and predict_proba set it in their C code around the queries reading a model; the
    # MADlib functions over coefficients, the svm kernels' feature map, the regression
    # aggregates' C functions and bytea8's I/O (the system's bytea functions) run no SQL, and a
    # SET on them would cost every row a GUC save and restore
    no_sql = {"c": {"predict", "predict_proba", "linregr_predict", "logregr_predict", "logregr_predict_prob",
                    "_svm_features", "linregr_transition", "linregr_merge_states", "linregr_final",
                    "hetero_linregr_transition", "hetero_linregr_merge_states", "hetero_linregr_final"},
              "internal": {"bytea8in", "bytea8out", "bytea8recv", "bytea8send", "linregr", "linregr_state",
                           "heteroskedasticity_test_linregr"}}
    loose = [r[0] for r in rows if not r[3] and r[2] != ["search_path=pg_catalog, pg_temp"]
             and r[0] not in no_sql.get(r[1], ())]
    assert loose == []


SHADOWS = [
    ("to_regclass(text)", "regclass"), ("current_schema()", "name"), ("current_schemas(boolean)", "name[]"),
    ("set_config(text, text, boolean)", "text"), ("parse_ident(text, boolean)", "text[]"),
    ("quote_ident(text)", "text"), ("current_setting(text)", "text"), ("current_setting(text, boolean)", "text"),
    ("has_table_privilege(oid, text)", "boolean"), ("pg_has_role(oid, text)", "boolean"),
    ("has_schema_privilege(oid, text)", "boolean"), ("jsonb_strip_nulls(jsonb)", "jsonb"), ("now()", "timestamptz"),
    ("cardinality(anyarray)", "int"), ("to_regrole(text)", "regrole"), ("array_agg(text)", None),
]


def test_the_callers_shadowing_functions_and_operators_are_not_called(db):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(80, 2))
    load(db, "sh", X, (X[:, 0] > 0).astype(float))
    db.execute("ALTER TABLE sh ADD COLUMN g text")
    db.execute("UPDATE sh SET g = CASE WHEN id % 2 = 0 THEN 'even' END")
    make_role(db, "someone")
    db.execute("CREATE SCHEMA evil")
    for signature, returns in SHADOWS:
        name = signature.split("(")[0]
        if returns is None:  # an aggregate
            db.execute("CREATE FUNCTION evil.trap(text, text) RETURNS text LANGUAGE plpgsql AS "
                       "$$ BEGIN RAISE EXCEPTION 'shadowed: aggregate'; END $$")
            db.execute(f"CREATE AGGREGATE evil.{signature} (sfunc = evil.trap, stype = text)")
            continue
        db.execute(f"CREATE FUNCTION evil.{signature} RETURNS {returns} LANGUAGE plpgsql AS "
                   f"$$ BEGIN RAISE EXCEPTION 'shadowed: {name}'; END $$")
    for op, left, right in (("=", "oid", "oid"), ("=", "name", "name"), ("||", "text", "text"), ("~*", "text", "text"),
                            ("=", "text", "text"), ("<>", "text", "text")):
        fn = f"evil.op_{abs(hash((op, left))) % 10**6}"
        db.execute(f"CREATE FUNCTION {fn}({left}, {right}) RETURNS boolean LANGUAGE plpgsql AS "
                   f"$$ BEGIN RAISE EXCEPTION 'shadowed: {op}'; END $$")
        db.execute(f"CREATE OPERATOR evil.{op} (LEFTARG = {left}, RIGHTARG = {right}, FUNCTION = {fn})")
    db.execute("CREATE FUNCTION pg_temp.to_regclass(text) RETURNS regclass LANGUAGE sql AS 'SELECT NULL::regclass'")
    for path in ("evil, pg_catalog, public", "pg_temp, evil, public, pg_catalog"):
        db.execute(f"SET search_path = {path}")
        tag = path[:4].replace(",", "")
        for reader in ("pages", "query"):
            db.execute(f"SET learnedidx.reader = '{reader}'")
            db.execute(f"SELECT * FROM learnedidx.logregr_train('sh', 'sh_{tag}_{reader}', 'y', 'features')")
        db.execute("RESET learnedidx.reader")
        db.execute(f"SELECT * FROM learnedidx.linregr_train('sh', 'sh_{tag}_g', 'y', 'ARRAY[1]::float8[] || features', "
                   "'g')")
        assert db.execute(f"SELECT count(learnedidx.predict('sh_{tag}_g', features, g)) FROM public.sh").fetchone() == \
            (80,)
        db.execute(f"SELECT learnedidx.register_algorithm('alg_{tag}', %s)",
                   ("epochs = 1\ndef gradient(w, x, y):\n    return (dot(w, x) - y) * x\n",))
        db.execute(f"SELECT * FROM learnedidx.train('alg_{tag}', 'sh', 'y', 'features')")
        db.execute(f"SELECT learnedidx.grant_algorithm('alg_{tag}', 'someone')")
        assert db.execute(f"SELECT count(learnedidx.predict('sh_{tag}_pages', features)), "
                          f"count(learnedidx.predict_proba('sh_{tag}_query', features)) FROM public.sh").fetchone() == \
            (80, 80)
        assert db.execute(f"SELECT learnedidx.predict_table('sh_{tag}_pages', 'sh', 'sh_{tag}_pred')").fetchone() == \
            (80,)
        assert db.execute("SELECT count(*) FROM learnedidx.models").fetchone()[0] >= 2
        # MADlib's svm: text labels mapped, grouping, a kernel, svm_predict's join and labels
        db.execute(f"SELECT * FROM learnedidx.svm_classification('sh', 'sh_{tag}_svm', "
                   "'CASE WHEN y > 0 THEN ''yes'' ELSE ''no'' END', 'features', 'gaussian', 'n_components=3', "
                   "'g', 'max_iter=2')")
        db.execute(f"SELECT learnedidx.svm_predict('sh_{tag}_svm', 'sh', 'id', 'sh_{tag}_svm_out')")
        assert db.execute(f"SELECT count(*) FROM sh_{tag}_svm_out").fetchone() == (40,)  # g NULL: no group
        db.execute(f"SELECT learnedidx.drop_model('sh_{tag}_query')")
        db.execute(f"SELECT learnedidx.drop_algorithm('alg_{tag}')")
        db.execute("RESET search_path")


# ------------------------------------------------- column grants and row-level security as SELECT
def _read_path(db, model: str) -> str:
    return db.execute(f"SELECT read_path FROM {model}_summary").fetchone()[0]


def test_column_privileges_and_forced_row_level_security(db):
    carol = make_role(db, "carol")
    db.execute("CREATE TABLE cp (y float8, x float8, z float8)")
    db.execute("INSERT INTO cp SELECT g, g % 7, g % 3 FROM generate_series(1, 60) g")
    db.execute(f"GRANT SELECT (y, x) ON cp TO {carol}")
    db.execute(f"GRANT CREATE ON SCHEMA public TO {carol}")
    db.execute(f"SET SESSION AUTHORIZATION {carol}")
    for reader in ("pages", "query"):
        db.execute(f"SET learnedidx.reader = '{reader}'")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            db.execute("SELECT * FROM learnedidx.linregr_train('cp', 'cp_m', 'y', 'x, z')")
        assert db.execute(f"SELECT num_rows_processed FROM learnedidx.linregr_train('cp', 'cp_{reader}', 'y', 'x')"
                          ).fetchone() == (60,)
    db.execute("RESET learnedidx.reader")
    # The owner is subject to its own policy under FORCE: the page path must not bypass it.
    db.execute("CREATE TABLE own (y float8, x float8)")
    db.execute("INSERT INTO own SELECT g, g % 5 FROM generate_series(1, 40) g")
    db.execute("ALTER TABLE own ENABLE ROW LEVEL SECURITY")
    db.execute("ALTER TABLE own FORCE ROW LEVEL SECURITY")
    db.execute("CREATE POLICY small ON own USING (y <= 25)")
    want = db.execute("SELECT count(*) FROM own").fetchone()[0]
    n = db.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('own', 'own_m', 'y', 'x')").fetchone()[0]
    path = _read_path(db, "own_m")
    db.execute("SET learnedidx.reader = 'pages'")
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="row-level security"):
        db.execute("SELECT * FROM learnedidx.linregr_train('own', 'own_p', 'y', 'x')")
    db.execute("RESET learnedidx.reader")
    db.execute("RESET SESSION AUTHORIZATION")
    assert (n, want, path) == (25, 25, "query")


def test_row_security_is_checked_as_it_applies_to_the_caller(db):
    """Row-level security is checked as it applies to the caller, not by the table's flag: a
    table with RLS enabled whose policies do not apply to its owner (without FORCE) is read by
    the page path, every row; another role gets the policy's rows through the query path."""
    dave = make_role(db, "dave")
    db.execute("CREATE TABLE rls_owned (y float8, x float8)")
    db.execute("INSERT INTO rls_owned SELECT g, g % 5 FROM generate_series(1, 40) g")
    db.execute("ALTER TABLE rls_owned ENABLE ROW LEVEL SECURITY")
    db.execute("CREATE POLICY above_30 ON rls_owned USING (y > 30)")
    db.execute(f"GRANT SELECT ON rls_owned TO {dave}")
    db.execute(f"GRANT CREATE ON SCHEMA public TO {dave}")
    n = db.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('rls_owned', 'rls_owned_m', 'y', 'x')"
                   ).fetchone()[0]
    assert (n, _read_path(db, "rls_owned_m")) == (40, "pages")
    with connect(db, dave) as d:
        n = d.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('rls_owned', 'rls_dave', 'y', 'x')"
                      ).fetchone()[0]
        assert (n, _read_path(d, "rls_dave")) == (10, "query")


# ----------------------------------------------------------------- the server's socket
def _forged_call(path: str, frames: list) -> dict | str:
    """An indb.train request on the server's socket followed, after its request for pass 1, by
    ``frames``: JSON frames (bytes), ("pages", page) to write into a slot of the server's ring
    and name in a slot frame, or ("raw", payload) data frames.  The server's reply, or "query
    path" when it asks for the pass again."""
    import mmap

    from learnedidx.server import protocol as P
    from learnedidx.server import stream as S

    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.settimeout(30)
        P.read_hello(s)
        s.sendall(P.encode({"op": "indb.train", "id": 1, "args": {"algorithm": "linregr", "params": {}}}))
        head, fds, _, _ = socket.recv_fds(s, P.HEADER.size + S.RING.size, 1)  # the ring, with its memfd
        head += P._recv_exact(s, P.HEADER.size + S.RING.size - len(head))
        _, slots, slot_bytes, _ = S.RING.unpack(head[P.HEADER.size:])
        ring = mmap.mmap(fds[0], slots * slot_bytes)
        flags, n = P.read_header(s)
        assert flags == P.CONTROL and P._recv_exact(s, n)[:1] == b"S"
        with contextlib.suppress(OSError):
            for k, frame in enumerate(frames):
                if isinstance(frame, bytes):
                    s.sendall(frame)
                elif frame[0] == "pages":
                    ring[k * slot_bytes:k * slot_bytes + len(frame[1])] = frame[1]
                    s.sendall(P.encode_binary(P.DATA, S.SLOT.pack(b"K", b"P", k, 1, 1) + struct.pack(">I", 0)))
                else:
                    s.sendall(P.encode_binary(P.DATA, frame[1]))
        while True:
            flags, n = P.read_header(s)
            body = P._recv_exact(s, n)
            if flags == P.JSON:
                return P.parse_json(body)
            if body[:1] == b"S":
                return "query path"


def _page(tuple_bytes: bytes, lp_off: int | None = None) -> bytes:
    page = bytearray(8192)
    upper = 8192 - len(tuple_bytes)
    struct.pack_into("<HHHH", page, 12, 28, upper, 8192, 8192 | 4)
    struct.pack_into("<I", page, 24, (upper if lp_off is None else lp_off) | (1 << 15) | (len(tuple_bytes) << 17))
    page[upper:] = tuple_bytes
    return bytes(page)


def _tuple(data: bytes, hoff: int = 24, natts: int = 2) -> bytes:
    head = bytearray(24)
    struct.pack_into("<H", head, 18, natts)
    head[22] = hoff
    return bytes(head) + data


def test_a_forged_stream_gets_an_error_and_the_server_serves_on(db, accel_server):
    """Whoever reaches the socket (the database's OS user) and forges the data stream (corrupt
    pages: an array longer than its value, a header past its tuple, a line pointer past its
    page; a malformed layout; a lying row count; slot frames naming no rows, more rows than a
    slot holds or a slot outside the ring) gets an error reply or is asked
    for the query path; the server neither reads past what it received nor stops."""
    from learnedidx.server import protocol as P
    from learnedidx.server.stream import SLOT

    def pages(layout: dict, page: bytes, rows: int = 1) -> list:
        return [P.encode({"begin": {"pass": 1, "reader": "pages"}}), P.encode({"relation": layout}),
                ("pages", page), P.encode({"end": {"pass": 1, "rows": rows}})]

    scalars = {"name": "forged", "blocks": 1, "columns": [[1, 701, None, "y"], [2, 701, None, "x"]],
               "attrs": [[8, 8], [8, 8]]}
    arrays = {**scalars, "columns": [[1, 701, None, "y"], [2, 1022, None, "x"]], "attrs": [[8, 8], [-1, 8]]}
    cases = {f"array of {dim} in 40 bytes": pages(arrays, _page(_tuple(struct.pack("<d", 1.0) + struct.pack(
        "<I", 40 << 2) + struct.pack("<iiiii", 1, 0, 701, dim, 1) + b"\0" * 16))) for dim in (1000, 2 ** 31 - 1, -5)}
    cases.update({
        "header past the tuple": pages(scalars, _page(_tuple(b"\0" * 16, hoff=250))),
        "line pointer past the page": pages(scalars, _page(_tuple(b"\0" * 16), lp_off=32760)),
        "attribute number past the layout": pages({**scalars, "columns": [[1, 701, None, "y"], [900, 701, None, "x"]]},
                                                  _page(_tuple(b"\0" * 16))),
        "a text column": pages({**scalars, "columns": [[1, 701, None, "y"], [2, 25, None, "x"]]},
                               _page(_tuple(b"\0" * 16))),
        "a lying row count": pages(scalars, _page(_tuple(b"\0" * 16)), rows=5),
        "rows of no values": [P.encode({"begin": {"pass": 1, "reader": "query"}}),
                              ("raw", SLOT.pack(b"K", b"R", 0, 2, 0))],
        "more rows than a slot holds": [P.encode({"begin": {"pass": 1, "reader": "query"}}),
                                        ("raw", SLOT.pack(b"K", b"R", 0, 1 << 20, 3))],
        "a slot outside the ring": [P.encode({"begin": {"pass": 1, "reader": "query"}}),
                                    ("raw", SLOT.pack(b"K", b"R", 1 << 20, 1, 3))],
    })
    for name, frames in cases.items():
        reply = _forged_call(accel_server.socket_path, frames)
        # pages the Strider cannot decode go to the query path; a broken stream is a protocol error
        want = "query path" if "past" in name and "layout" not in name or "array" in name else "protocol"
        assert (reply if reply == "query path" else reply["error"]["kind"]) == want, (name, reply)
    with psycopg.connect(**{k: getattr(db.info, k) for k in ("host", "port", "user", "dbname")}) as c:
        c.execute("CREATE TABLE after (y float8, x float8)")
        c.execute("INSERT INTO after SELECT g, g FROM generate_series(1, 10) g")
        assert c.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('after', 'after_m', 'y', 'x')"
                         ).fetchone() == (10,)


def test_views_with_side_effects_run_as_the_callers_select(db):
    """Functions a source calls run in the caller's transaction as in its own SELECT: their
    writes happen (once per row read; twice with grouping, which reads the groups first) and
    go with the caller's transaction; a query source that writes by itself is refused."""
    db.execute("CREATE TABLE side (y float8, x float8, g int)")
    db.execute("INSERT INTO side SELECT i, i % 4, i % 2 FROM generate_series(1, 30) i")
    db.execute("CREATE TABLE side_log (n int)")
    db.execute("""CREATE FUNCTION noted(v float8) RETURNS float8 LANGUAGE plpgsql AS $$
                  BEGIN INSERT INTO side_log VALUES (1); RETURN v; END $$""")
    db.execute("CREATE VIEW side_v AS SELECT y, noted(x) AS x, g FROM side")
    db.autocommit = False
    db.execute("SELECT * FROM learnedidx.linregr_train('side_v', 'side_m', 'y', 'x')")
    assert db.execute("SELECT count(*) FROM side_log").fetchone() == (30,)
    db.execute("SELECT * FROM learnedidx.linregr_train('side_v', 'side_g', 'y', 'x', 'g')")
    assert db.execute("SELECT count(*) FROM side_log").fetchone() == (90,)
    db.rollback()
    db.autocommit = True
    assert db.execute("SELECT count(*), to_regclass('side_m') FROM side_log").fetchone() == (0, None)
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="data-modifying"):
        db.execute("SELECT * FROM learnedidx.linregr_train('WITH d AS (DELETE FROM side RETURNING *) "
                   "SELECT * FROM d', 'side_w', 'y', 'x')")
    assert db.execute("SELECT count(*) FROM side").fetchone() == (30,)


def _owner_and_victim(db) -> None:
    """Roles mallory, who may create in public and owns steal() (it notes in ran who ran it),
    and victim."""
    make_role(db, "mallory")
    make_role(db, "victim")
    db.execute("GRANT CREATE ON SCHEMA public TO mallory")
    with connect(db, "mallory") as m:
        m.execute("CREATE TABLE ran (who text)")
        m.execute("GRANT INSERT ON ran TO PUBLIC")
        m.execute("""CREATE FUNCTION steal() RETURNS boolean LANGUAGE plpgsql AS $$
                     BEGIN INSERT INTO public.ran VALUES (current_user); RETURN true; END $$""")


def test_reading_a_model_runs_no_code_of_its_owner(db):
    """A role that makes a "model" for others to use (granted to them, or named by them) gets
    no code run as them and cannot crash their backend: the model's tables are read without
    casts, policies, views or inheritors, and a column of another type is an error (an int
    coef once crashed the cluster)."""
    _owner_and_victim(db)
    with connect(db, "mallory") as m:
        # an int where the coefficients belong: the backend read it as an array pointer
        m.execute("CREATE TABLE crash (coef int)")
        m.execute("INSERT INTO crash VALUES (12345)")
        m.execute("CREATE TABLE crash_summary (method text, intercept bool)")
        m.execute("INSERT INTO crash_summary VALUES ('linregr', true)")
        # a cast of the owner's to float8[]
        m.execute("CREATE TYPE coefs AS ENUM ('a')")
        m.execute("CREATE FUNCTION to_coef(coefs) RETURNS float8[] LANGUAGE plpgsql AS "
                  "$$ BEGIN PERFORM steal(); RETURN '{1}'; END $$")
        m.execute("CREATE CAST (coefs AS float8[]) WITH FUNCTION to_coef(coefs) AS IMPLICIT")
        m.execute("CREATE TABLE casted (coef coefs)")
        m.execute("INSERT INTO casted VALUES ('a')")
        m.execute("CREATE TABLE casted_summary (method text, intercept bool)")
        m.execute("INSERT INTO casted_summary VALUES ('linregr', true)")
        # a policy, a view as the summary, and an inheritor holding another row
        m.execute("CREATE TABLE pol (coef float8[])")
        m.execute("INSERT INTO pol VALUES ('{1, 2}')")
        m.execute("ALTER TABLE pol ENABLE ROW LEVEL SECURITY")
        m.execute("CREATE POLICY p ON pol USING (steal())")
        m.execute("CREATE TABLE pol_summary (method text, intercept bool)")
        m.execute("INSERT INTO pol_summary VALUES ('linregr', true)")
        m.execute("ALTER TABLE pol_summary ENABLE ROW LEVEL SECURITY")
        m.execute("CREATE POLICY p ON pol_summary USING (steal())")
        m.execute("CREATE TABLE viewed (coef float8[])")
        m.execute("INSERT INTO viewed VALUES ('{1, 2}')")
        m.execute("CREATE VIEW viewed_summary AS SELECT 'linregr'::text AS method, steal() AS intercept")
        m.execute("CREATE TABLE parent (coef float8[])")
        m.execute("INSERT INTO parent VALUES ('{1, 2}')")
        m.execute("CREATE TABLE kid () INHERITS (parent)")
        m.execute("INSERT INTO kid VALUES ('{100, 200}')")
        m.execute("CREATE TABLE parent_summary (method text, intercept bool)")
        m.execute("INSERT INTO parent_summary VALUES ('linregr', true)")
        m.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO victim")
    with connect(db, "victim") as v:
        for model, error, match in [
            ("crash", psycopg.errors.DatatypeMismatch, 'column "coef" has type integer'),
            ("casted", psycopg.errors.DatatypeMismatch, 'column "coef" has type public.coefs'),
            ("pol", psycopg.errors.InsufficientPrivilege, "row-level security"),
            ("viewed", psycopg.errors.WrongObjectType, "not a learnedidx model"),
        ]:
            with pytest.raises(error, match=match):
                v.execute(f"SELECT learnedidx.predict('{model}', '{{1}}')")
        assert v.execute("SELECT learnedidx.predict('parent', '{1}')").fetchone() == (3.0,)  # the parent's row only
        assert [r[0] for r in v.execute("SELECT model::text FROM learnedidx.models ORDER BY 1").fetchall()] == \
            ["casted", "crash", "parent"]  # pol's summary has policies: not even listed
        v.execute("SELECT * FROM learnedidx.models")
    assert db.execute("SELECT count(*) FROM ran").fetchone() == (0,)


def test_predict_reads_group_values_with_the_systems_code_only(db):
    """predict converts a caller's group value with the grouping column type's input function:
    for an array, composite or range of the model owner's domain that ran the domain's CHECK, the
    owner's code, as the caller.  Such types are refused at training and, in a model written by
    hand, by predict; built-in types, enums, their arrays and top-level domains are read without
    running any of the owner's functions (domain CHECKs, casts to the enum, to text or to json)."""
    _owner_and_victim(db)
    # a base type a role made (its I/O is the system's here, but typinput is the superuser's choice)
    db.execute("CREATE TYPE mytext")
    db.execute("CREATE FUNCTION mytext_in(cstring) RETURNS mytext LANGUAGE internal IMMUTABLE STRICT AS 'textin'")
    db.execute("CREATE FUNCTION mytext_out(mytext) RETURNS cstring LANGUAGE internal IMMUTABLE STRICT AS 'textout'")
    db.execute("CREATE TYPE mytext (INPUT = mytext_in, OUTPUT = mytext_out, LIKE = text)")
    with connect(db, "mallory") as m:
        m.execute("CREATE DOMAIN d AS int CHECK (public.steal())")
        m.execute("CREATE DOMAIN dd AS d")
        m.execute("CREATE DOMAIN darr AS d[]")
        m.execute("CREATE TYPE c AS (a d)")
        m.execute("CREATE TYPE r AS RANGE (subtype = d)")
        m.execute("CREATE TYPE e AS ENUM ('1', 'a')")
        m.execute("CREATE DOMAIN de AS e CHECK (public.steal())")
        # training refuses a grouping column of such a type before it trains
        m.execute("CREATE TABLE src (y float8, x float8, g d[], h e[])")
        m.execute("INSERT INTO src SELECT i, i % 5, ARRAY[i % 2], CASE i % 2 WHEN 0 THEN '{1}'::e[] ELSE '{a}' END "
                  "FROM generate_series(1, 40) i")
        with pytest.raises(psycopg.errors.FeatureNotSupported,
                           match=r'grouping column "g" of model public.src_g has type public.d\[\], which predict'):
            m.execute("SELECT * FROM learnedidx.linregr_train('src', 'src_g', 'y', 'x', 'h, g')")
        assert m.execute("SELECT to_regclass('src_g')").fetchone() == (None,)
        m.execute("SELECT * FROM learnedidx.linregr_train('src', 'src_h', 'y', 'x', 'h')")
        m.execute("SELECT * FROM learnedidx.linregr_train('SELECT y, x, g::int[] AS g FROM src', 'src_gi', 'y', 'x', "
                  "'g')")  # the way to group by it
        # casts of the owner's to and from its enum: predict and learnedidx.models call none
        for source, target, implicit in (("text", "e", "AS IMPLICIT"), ("int", "e", "AS IMPLICIT"),
                                         ("e", "text", ""), ("e", "json", ""), ("e", "int8", "")):
            m.execute(f"CREATE FUNCTION {source}_to_{target}({source}) RETURNS {target} LANGUAGE plpgsql AS "
                      f"$$ BEGIN PERFORM public.steal(); RETURN NULL; END $$")
            m.execute(f"CREATE CAST ({source} AS {target}) WITH FUNCTION {source}_to_{target}({source}) {implicit}")
        # models written by hand: coef {1, 2} with an intercept for the group value given
        forged = {"arr": ("d[]", "{1}"), "arr2": ("dd[]", "{1}"), "darr_m": ("darr", "{1}"), "comp": ("c", "(1)"),
                  "rng": ("r", "[1,2)"), "mrng": ("r_multirange", "{[1,2)}"), "mine": ("mytext", "1"),
                  "dom": ("dd", "1"), "enum": ("e", "1"), "enumarr": ("e[]", "{1}"), "denum": ("de", "1")}
        for name, (typ, value) in forged.items():
            m.execute(f"CREATE TABLE {name} (g {typ}, coef float8[])")
            m.execute(f"INSERT INTO {name} VALUES ('{value}'::{typ}, '{{1, 2}}')")
            m.execute(f"CREATE TABLE {name}_summary (method text, intercept bool, grouping_columns text[])")
            m.execute(f"INSERT INTO {name}_summary VALUES ('linregr', true, '{{g}}')")
        # a summary whose columns have casts of the owner's to text, json and int8
        m.execute("CREATE TABLE plain (coef float8[])")
        m.execute("INSERT INTO plain VALUES ('{1, 2}')")
        m.execute("CREATE TABLE plain_summary (method text, intercept bool, extra e, source_table e, "
                  "num_rows_processed e, created e)")
        m.execute("INSERT INTO plain_summary VALUES ('linregr', true, 'a', 'a', 'a', 'a')")
        m.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO victim")
        m.execute("TRUNCATE ran")
    with connect(db, "victim") as v:
        for model, groups in (("arr", ["'{1}'::text", "'{1}'", "ARRAY[1]"]), ("comp", ["'(1)'::text", "ROW(1)"]),
                              ("arr2", ["'{1}'::text"]), ("darr_m", ["'{1}'"]), ("rng", ["'[1,2)'::text"]),
                              ("mrng", ["'{[1,2)}'::text"]), ("mine", ["'1'::text"])):
            for group in groups:
                with pytest.raises(psycopg.errors.FeatureNotSupported, match="which predict does not read"):
                    v.execute(f"SELECT learnedidx.predict('{model}', '{{1}}', {group})")
        got = v.execute("SELECT learnedidx.predict('dom', '{1}', '1'::text), "
                        "learnedidx.predict('dom', '{1}', 1::int8), "
                        "learnedidx.predict('enum', '{1}', '1'::text), learnedidx.predict('enum', '{1}', 1), "
                        "learnedidx.predict('enum', '{1}', 'a'), learnedidx.predict('enumarr', '{1}', ARRAY[1]), "
                        "learnedidx.predict('enumarr', '{1}', '{1}'), learnedidx.predict('denum', '{1}', '1'), "
                        "learnedidx.predict('plain', '{1}')").fetchone()
        assert got == (3.0, 3.0, 3.0, 3.0, None, 3.0, 3.0, 3.0, 3.0)
        assert v.execute("SELECT count(learnedidx.predict('src_h', ARRAY[x], h)), "
                         "count(learnedidx.predict('src_gi', ARRAY[x], ARRAY[1]::int8[])) FROM src").fetchone() == (40, 40)
        assert v.execute("SELECT source, num_rows_processed, created FROM learnedidx.models "
                         "WHERE model = 'plain'::regclass").fetchone() == (None, None, None)
    assert db.execute("SELECT who, count(*) FROM ran GROUP BY 1").fetchall() == []


def test_grouping_expressions_run_as_the_caller_and_their_types_are_checked(db):
    """A grouping expression (MADlib's data->>'bedroom') is the caller's own SQL: it runs as the
    caller, with the caller's search_path, in the statement's prepared, single statements (an
    item that is not one expression is 42601 before anything runs); its result type passes the
    same check as a grouping column's (0A000 for a type predict would read with another role's
    code); and predict_table evaluates it only for members of the model's owner, as it does the
    feature expression."""
    _owner_and_victim(db)
    db.execute("GRANT CREATE ON SCHEMA public TO victim")
    with connect(db, "mallory") as m:
        m.execute("CREATE TABLE src (y float8, x float8, data jsonb)")
        m.execute("INSERT INTO src SELECT i, i % 5, jsonb_build_object('g', i % 2) FROM generate_series(1, 40) i")
        m.execute("GRANT SELECT ON src TO victim")
        m.execute("CREATE DOMAIN d AS int CHECK (public.steal())")
        m.execute("CREATE FUNCTION dd(int) RETURNS d[] LANGUAGE sql AS 'SELECT ARRAY[$1]::d[]'")
        m.execute("GRANT EXECUTE ON FUNCTION steal() TO victim")
    with connect(db, "victim") as v:
        # the caller's expression runs as the caller (steal() notes who ran it), grouped by its text
        v.execute("SELECT * FROM learnedidx.linregr_train('src', 'vm', 'y', 'x', "
                  "'(data->>''g'')::int + (public.steal())::int')")
        assert v.execute("SELECT count(*) FROM vm").fetchone() == (2,)
        for grouping in ("x) FROM src; DROP TABLE src; --", "x) FROM src UNION SELECT (1", "x /* */"):
            with pytest.raises(psycopg.errors.SyntaxError, match="must be SQL expressions"):
                v.execute("SELECT * FROM learnedidx.linregr_train('src', 'vbad', 'y', 'x', %s)", (grouping,))
        # a type whose input runs mallory's CHECK: refused before training, no table left
        with pytest.raises(psycopg.errors.FeatureNotSupported, match=r'grouping column "dd\(x::int\)" .* which predict'):
            v.execute("SELECT * FROM learnedidx.linregr_train('src', 'vbad', 'y', 'x', 'dd(x::int)')")
        assert v.execute("SELECT to_regclass('vbad')").fetchone() == (None,)
    assert db.execute("SELECT DISTINCT who FROM ran").fetchall() == [("victim",)]
    db.execute("TRUNCATE ran")
    # mallory's model grouped by an expression: victim may predict with it, but predict_table,
    # which would evaluate mallory's expression, is refused
    with connect(db, "mallory") as m:
        m.execute("SELECT * FROM learnedidx.linregr_train('src', 'mm', 'y', 'x', '(data->>''g'')::int + "
                  "(public.steal())::int')")
        m.execute("GRANT SELECT ON mm, mm_summary TO victim")
    db.execute("TRUNCATE ran")
    with connect(db, "victim") as v:
        assert v.execute("SELECT learnedidx.predict('mm', ARRAY[2], 1)").fetchone()[0] is not None
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="SQL its owner wrote"):
            v.execute("SELECT learnedidx.predict_table('mm', 'src', 'vp')")
    assert db.execute("SELECT count(*) FROM ran").fetchone() == (0,)
