-- Prediction over stored coefficients, the catalog, and the server-down error (no server needed).
-- Self-contained: creates the extension and drops it (and what CASCADE installed) at the end.
\set VERBOSITY terse
CREATE EXTENSION learnedidx CASCADE;
INSERT INTO learnedidx.models (name, algorithm, source, dep, indep, coef)
VALUES ('lin', 'linregr', 't', 'y', '{x}', '{1, 2, 3}'),
       ('log', 'logregr', 't', 'y', '{x}', '{0, 1, -1}');
SELECT learnedidx.predict('lin', '{10, 100}');
SELECT learnedidx.predict('log', '{2, 1}'), round(learnedidx.predict_proba('log', '{2, 1}')::numeric, 6);
SELECT learnedidx.predict('log', '{1, 2}'), round(learnedidx.predict_proba('log', '{1, 2}')::numeric, 6);
CREATE TABLE pts (id int, x float8[]);
INSERT INTO pts VALUES (1, '{0, 0}'), (2, '{1, 1}');
SELECT learnedidx.predict_table('lin', 'pts', 'pts_pred');
SELECT id, prediction FROM pts_pred ORDER BY id;
SELECT learnedidx.predict_table('nope', 'pts', 'pts_pred2');
SET learnedidx.socket = '/nonexistent/accel.sock';
CREATE TABLE d (y float8, x float8[]);
SELECT * FROM learnedidx.linregr_train('d', 'd_model', 'y', 'x');
SELECT count(*) FROM learnedidx.models WHERE name = 'd_model';
DROP EXTENSION learnedidx, pageinspect, plpython3u;
