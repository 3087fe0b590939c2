-- Models are tables: prediction rules over hand-made model tables, drop_model, and refusals
-- made before any server call.
-- Self-contained: creates the extension and drops it (and what CASCADE installed) at the end.
\set VERBOSITY terse
CREATE EXTENSION learnedidx CASCADE;
CREATE TABLE lin3 (coef float8[]);
INSERT INTO lin3 VALUES ('{1, 2, 3}');
CREATE TABLE lin3_summary (method text, intercept bool);
INSERT INTO lin3_summary VALUES ('linregr', true);
CREATE TABLE sv (coef float8[], dep_var_mapping float8[]);
INSERT INTO sv VALUES ('{-1, 1}', '{-5, 5}');
CREATE TABLE sv_summary (method text, intercept bool);
INSERT INTO sv_summary VALUES ('svm', true);
CREATE TABLE mf (u float8[], v float8[], row_ids int8[], col_ids int8[]);
INSERT INTO mf VALUES ('{{1,2},{3,4}}', '{{5,6},{7,8},{9,10}}', '{0, 1}', '{0, 1, 5}');
CREATE TABLE mf_summary (method text, intercept bool);
INSERT INTO mf_summary VALUES ('lmf', false);
SELECT learnedidx.predict('lin3', '{10, 100}') AS two_features, learnedidx.predict('lin3', '{1, 10, 100}') AS with_leading_one;
SELECT learnedidx.predict('lin3', '{10, NULL}') IS NULL AS null_element, learnedidx.predict('lin3', NULL) IS NULL AS null_array;
SELECT learnedidx.predict('lin3', '{1, 2, 3, 4}');
SELECT learnedidx.predict('sv', '{0.5}') AS low, learnedidx.predict('sv', '{2}') AS high;
SELECT learnedidx.predict_proba('sv', '{2}');
SELECT r, c, learnedidx.predict('mf', ARRAY[r, c]) FROM generate_series(0, 2) r, (VALUES (0), (1), (5)) v(c) ORDER BY r, c;
SELECT learnedidx.predict('mf', '{1}');
SELECT learnedidx.predict('gone', '{1}');
SELECT model, algorithm FROM learnedidx.models ORDER BY 1;
-- drop_model drops a model's two tables, and never a table that is not a model
CREATE TABLE plain (coef float8[]);
SELECT learnedidx.drop_model('plain');
SELECT learnedidx.drop_model('lin3');
SELECT to_regclass('lin3') IS NULL AS table_dropped, to_regclass('lin3_summary') IS NULL AS summary_dropped,
       to_regclass('plain') IS NOT NULL AS plain_kept;
SELECT learnedidx.drop_model('lin3');
-- refused before reading any data
CREATE TABLE t (y float8, x float8);
SELECT * FROM learnedidx.linregr_train('t', 'sv', 'y', 'x');
SELECT * FROM learnedidx.linregr_train('t', 'm', '', 'x');
SELECT * FROM learnedidx.linregr_train('nope', 'm', 'y', 'x');
SELECT * FROM learnedidx.linregr_train('t', 'a.b.c', 'y', 'x');
SET learnedidx.reader = 'pages';
SELECT * FROM learnedidx.linregr_train('t', 'm', 'y', 'x * 2');
SET learnedidx.reader = 'sideways';
SELECT * FROM learnedidx.linregr_train('t', 'm', 'y', 'x');
RESET learnedidx.reader;
-- only superusers say where the server is
CREATE ROLE lx_plain;
SET ROLE lx_plain;
SET learnedidx.socket = '/tmp/elsewhere.sock';
RESET ROLE;
DROP ROLE lx_plain;
DROP EXTENSION learnedidx, plpython3u;
