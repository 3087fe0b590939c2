-- Prediction over stored coefficients, predict_table, and the server-down error (no server needed).
-- Self-contained: creates the extension and drops it (and what CASCADE installed) at the end.
\set VERBOSITY terse
CREATE EXTENSION learnedidx CASCADE;
CREATE TABLE lin (coef float8[]);
INSERT INTO lin VALUES ('{1, 2, 3}');
CREATE TABLE lin_summary (method text, intercept bool, feature_expression text);
INSERT INTO lin_summary VALUES ('linregr', true, 'x');
CREATE TABLE log (coef float8[]);
INSERT INTO log VALUES ('{0, 1, -1}');
CREATE TABLE log_summary (method text, intercept bool, feature_expression text);
INSERT INTO log_summary VALUES ('logregr', true, 'x');
SELECT learnedidx.predict('lin', '{10, 100}');
SELECT learnedidx.predict('log', '{2, 1}'), round(learnedidx.predict_proba('log', '{2, 1}')::numeric, 6);
SELECT learnedidx.predict('log', '{1, 2}'), round(learnedidx.predict_proba('log', '{1, 2}')::numeric, 6);
CREATE TABLE pts (id int, x float8[]);
INSERT INTO pts VALUES (1, '{0, 0}'), (2, '{1, 1}');
SELECT learnedidx.predict_table('lin', 'pts', 'pts_pred');
SELECT id, prediction FROM pts_pred ORDER BY id;
SELECT learnedidx.predict_table('nope', 'pts', 'pts_pred2');
SELECT learnedidx.predict_table('pts', 'pts', 'pts_pred2');
SET learnedidx.socket = '/nonexistent/accel.sock';
CREATE TABLE d (y float8, x float8[]);
SELECT * FROM learnedidx.linregr_train('d', 'd_model', 'y', 'x');
SELECT to_regclass('d_model') IS NULL AS no_model;
DROP EXTENSION learnedidx, plpython3u;
