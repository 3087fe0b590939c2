/*
 * madlib_predict.c: MADlib's prediction functions over coefficients.
 *
 * linregr_predict, logregr_predict and logregr_predict_prob over an output table's coef column.
 */
#include "postgres.h"

#include "catalog/pg_type.h"

#include "learnedidx.h"

/* coef . col_ind_var of MADlib's (coef float8[], col_ind_var float8[]) functions; false when the
 * features hold a NULL (the result is NULL), an error for NULL coefficients or two lengths. */
static bool
coef_dot(FunctionCallInfo fcinfo, double *dot)
{
	ArrayType  *c = PG_GETARG_ARRAYTYPE_P(0);
	ArrayType  *x = PG_GETARG_ARRAYTYPE_P(1);
	int			n,
				nx,
				i;
	const double *pc,
			   *px;

	if (ARR_NDIM(c) > 1 || ARR_NDIM(x) > 1)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("coef and col_ind_var must be one-dimensional arrays")));
	if (array_contains_nulls(c))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("the coefficients contain NULL values")));
	if (array_contains_nulls(x))
		return false;
	n = ArrayGetNItems(ARR_NDIM(c), ARR_DIMS(c));
	nx = ArrayGetNItems(ARR_NDIM(x), ARR_DIMS(x));
	if (n != nx)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("coef has %d values and col_ind_var %d: coefficients and independent variables "
							   "must have the same length", n, nx)));
	pc = (const double *) ARR_DATA_PTR(c);
	px = (const double *) ARR_DATA_PTR(x);
	*dot = 0.0;
	for (i = 0; i < n; i++)
		*dot += pc[i] * px[i];
	return true;
}

PG_FUNCTION_INFO_V1(learnedidx_linregr_predict);

Datum
learnedidx_linregr_predict(PG_FUNCTION_ARGS)
{
	double		s;

	if (!coef_dot(fcinfo, &s))
		PG_RETURN_NULL();
	PG_RETURN_FLOAT8(s);
}

PG_FUNCTION_INFO_V1(learnedidx_logregr_predict);

Datum
learnedidx_logregr_predict(PG_FUNCTION_ARGS)
{
	double		s;

	if (!coef_dot(fcinfo, &s))
		PG_RETURN_NULL();
	PG_RETURN_BOOL(s > 0);
}

PG_FUNCTION_INFO_V1(learnedidx_logregr_predict_prob);

Datum
learnedidx_logregr_predict_prob(PG_FUNCTION_ARGS)
{
	double		s;

	if (!coef_dot(fcinfo, &s))
		PG_RETURN_NULL();
	PG_RETURN_FLOAT8(lx_sigmoid(s));
}
