-- A MADlib user's session, unchanged but for the schema: training with MADlib's positional
-- arguments, SQL expressions and grouping_cols; reading the output and _summary tables;
-- predicting with learnedidx.predict and with MADlib's prediction functions.
-- Needs the accelerator server: at $LEARNEDIDX_SOCKET, else at its default path.
\set VERBOSITY terse
CREATE EXTENSION learnedidx CASCADE;
\set socket ''
\getenv socket LEARNEDIDX_SOCKET
SELECT set_config('learnedidx.socket', :'socket', false) IS NOT NULL AS configured;
SET learnedidx.threads = 1;  -- SGD's results depend on the engine threads: the same on every machine
-- numbers rounded for the comparison with the expected output
CREATE FUNCTION r(v float8[], digits int DEFAULT 4) RETURNS numeric[] LANGUAGE sql IMMUTABLE AS
$$ SELECT array_agg(round(x::numeric, digits) ORDER BY i) FROM unnest(v) WITH ORDINALITY AS u(x, i) $$;
CREATE TABLE houses (id int, tax float8, bedroom int, bath float8, size float8, price float8, zipcode text);
INSERT INTO houses
SELECT i, 1000 + (i * 37) % 500, 2 + (i * 5 + i / 7) % 3, 1 + i % 3, 800 + (i * 53) % 900,
       50000 + 30 * (800 + (i * 53) % 900) + 2000 * (1 + i % 3) + 10 * (1000 + (i * 37) % 500) + (i * 7919) % 1000,
       CASE WHEN i % 2 = 0 THEN '94301' ELSE '94086' END
FROM generate_series(1, 40) i;
INSERT INTO houses VALUES (41, NULL, 3, 2, 1000, 90000, '94301');  -- a NULL: skipped and counted
-- linear regression: one model per zipcode (MADlib's fifth argument), the intercept as ARRAY[1, ...]
SELECT count(*) AS models FROM learnedidx.linregr_train('houses', 'houses_linregr', 'price',
                                                        'ARRAY[1, tax, bath, size]', 'zipcode');
SELECT zipcode, r(coef, 2) AS coef, round(r2::numeric, 4) AS r2, r(std_err, 2) AS std_err, r(t_stats, 2) AS t_stats,
       round(condition_no::numeric, -2) AS condition_no, num_rows_processed, num_missing_rows_skipped,
       array_length(variance_covariance, 1) AS vcov_rows
FROM houses_linregr ORDER BY zipcode;
SELECT method, source_table, out_table, dependent_varname, independent_varname, num_rows_processed,
       num_missing_rows_skipped, grouping_col FROM houses_linregr_summary;
-- MADlib's aggregate gives the same models
SELECT zipcode, r((learnedidx.linregr(price, ARRAY[1, tax, bath, size])).coef, 2) AS coef
FROM houses GROUP BY zipcode ORDER BY zipcode;
SELECT h.id, h.zipcode, round(learnedidx.linregr_predict(m.coef, ARRAY[1, h.tax, h.bath, h.size])::numeric, 2) AS madlib,
       round(learnedidx.predict('houses_linregr', ARRAY[1, h.tax, h.bath, h.size], h.zipcode)::numeric, 2) AS learnedidx,
       h.price
FROM houses h JOIN houses_linregr m USING (zipcode) WHERE h.id <= 4 ORDER BY h.id;
-- logistic regression of an expression, MADlib's usual boolean label
SELECT num_iterations FROM learnedidx.logregr_train('houses', 'houses_logregr', 'bedroom > 2',
                                                    'ARRAY[1, size / 1000, bath]', NULL, 20, 'irls', 1e-8);
SELECT r(coef) AS coef, round(log_likelihood::numeric, 4) AS log_likelihood, r(std_err) AS std_err,
       r(z_stats) AS z_stats, r(p_values) AS p_values, r(odds_ratios) AS odds_ratios, num_rows_processed,
       num_missing_rows_skipped, num_iterations
FROM houses_logregr;
SELECT method, dependent_varname, optimizer_params, num_all_groups, num_failed_groups, num_rows_processed,
       grouping_col FROM houses_logregr_summary;
SELECT id, bedroom > 2 AS actual, learnedidx.logregr_predict(coef, ARRAY[1, size / 1000, bath]) AS predicted,
       round(learnedidx.logregr_predict_prob(coef, ARRAY[1, size / 1000, bath])::numeric, 4) AS probability
FROM houses, houses_logregr WHERE id IN (1, 2, 3, 17, 29) ORDER BY id;
-- linear SVM, MADlib's svm_classification, one model per zipcode
SELECT count(*) AS models FROM learnedidx.svm_classification('houses', 'houses_svm', 'price < 100000',
    'ARRAY[size / 1000, bath]', 'linear', 'fit_intercept=true', 'zipcode', 'init_stepsize=0.1, max_iter=20, lambda=0.01');
SELECT zipcode, r(coef, 3) AS coef, round(loss::numeric, 3) AS loss, num_iterations, num_rows_processed,
       num_rows_skipped, dep_var_mapping
FROM houses_svm ORDER BY zipcode;
SELECT method, kernel_func, kernel_params, grouping_col, reg_params, num_all_groups, total_rows_processed,
       total_rows_skipped FROM houses_svm_summary;
-- MADlib's svm_predict: the label, of the label's type, per row (the intercept is the last coefficient)
SELECT learnedidx.svm_predict('houses_svm', 'houses', 'id', 'houses_svm_pred');
SELECT h.zipcode, count(*) AS houses, sum((p.prediction = (h.price < 100000))::int) AS right
FROM houses AS h JOIN houses_svm_pred AS p USING (id) WHERE h.tax IS NOT NULL GROUP BY h.zipcode ORDER BY 1;
SELECT count(*) AS agree FROM houses_svm_pred AS p JOIN houses AS h USING (id)
WHERE learnedidx.predict('houses_svm', ARRAY[h.size / 1000, h.bath, 1], h.zipcode) = p.prediction::int;
-- predict_table picks each row's group too
SELECT learnedidx.predict_table('houses_linregr', 'houses', 'houses_pred');
SELECT count(*) FILTER (WHERE abs(prediction - price) < 1000) AS close, count(prediction) AS predicted
FROM houses_pred;
SELECT model, algorithm, source, dep, indep FROM learnedidx.models WHERE model::text LIKE 'houses%' ORDER BY 1;
-- mistakes a MADlib user can make
SELECT * FROM learnedidx.linregr_train('houses', 'h2', 'price', 'ARRAY[1, tax]', 'zip code');
SELECT * FROM learnedidx.logregr_train('houses', 'h2', 'price < 100000', 'ARRAY[1, tax]', NULL, 20, 'sgd');
SELECT learnedidx.predict('houses_linregr', ARRAY[1, 1000, 2, 900]);
SELECT learnedidx.linregr_predict('{1, 2, 3}', '{1, 2}');
SELECT learnedidx.drop_model('houses_linregr');
SELECT learnedidx.drop_model('houses_logregr');
SELECT learnedidx.drop_model('houses_svm');
DROP TABLE houses_svm_pred;
SELECT count(*) AS models_left FROM learnedidx.models WHERE model::text LIKE 'houses%';
DROP EXTENSION learnedidx, plpython3u;
