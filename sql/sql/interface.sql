-- Feature lists, prediction rules, LMF prediction, drop_model and refusals made before any server call.
-- Self-contained: creates the extension and drops it (and what CASCADE installed) at the end.
\set VERBOSITY terse
CREATE EXTENSION learnedidx CASCADE;
SELECT learnedidx._split_indep('x1, x2') AS cols, learnedidx._intercept('x1, x2') AS intercept;
SELECT learnedidx._split_indep('ARRAY[1, x1, x2]') AS cols, learnedidx._intercept('ARRAY[1, x1, x2]') AS intercept;
SELECT learnedidx._split_indep('array[x1,x2]') AS cols, learnedidx._intercept('array[x1,x2]') AS intercept;
INSERT INTO learnedidx.models (name, algorithm, source, dep, indep, coef, labels, u, v)
VALUES ('lin3', 'linregr', 't', 'y', '{a,b}', '{1, 2, 3}', NULL, NULL, NULL),
       ('sv', 'svm', 't', 'y', '{a}', '{-1, 1}', '{-5, 5}', NULL, NULL),
       ('mf', 'lmf', 'r', 'v', '{r,c}', NULL, NULL, '{{1,2},{3,4}}', '{{5,6},{7,8},{9,10}}');
SELECT learnedidx.predict('lin3', '{10, 100}') AS two_features, learnedidx.predict('lin3', '{1, 10, 100}') AS with_leading_one;
SELECT learnedidx.predict('lin3', '{10, NULL}') IS NULL AS null_element, learnedidx.predict('lin3', NULL) IS NULL AS null_array;
SELECT learnedidx.predict('lin3', '{1, 2, 3, 4}');
SELECT learnedidx.predict('sv', '{0.5}') AS low, learnedidx.predict('sv', '{2}') AS high;
SELECT learnedidx.predict_proba('sv', '{2}');
SELECT r, c, learnedidx.predict('mf', ARRAY[r, c]) FROM generate_series(0, 2) r, generate_series(0, 1) c ORDER BY r, c;
SELECT learnedidx.predict('mf', '{1}');
SELECT learnedidx.predict('gone', '{1}');
CREATE TABLE lin3 (coef float8[]);
SELECT learnedidx.drop_model('lin3');
SELECT to_regclass('lin3') IS NULL AS table_dropped, count(*) AS catalog_rows FROM learnedidx.models WHERE name = 'lin3';
SELECT learnedidx.drop_model('lin3');
CREATE TEMP TABLE tt (y float8, x float8);
SELECT * FROM learnedidx.linregr_train('tt', 'tt_model', 'y', 'x');
DROP EXTENSION learnedidx, pageinspect, plpython3u;
