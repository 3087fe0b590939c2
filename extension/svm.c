/*
 * svm.c: the random feature maps of MADlib's svm kernels, applied to one row.
 *
 * learnedidx._svm_features(x, kernel, weights, offsets, reps, scale, intercept) is what the
 * training query streams to the server and what svm_predict scores, so both see the same
 * features; learnedidx/indb/udf/svm_kernels.py draws the random arrays as MADlib does:
 *   gaussian:    scale * cos(W x + offsets), W one row of len(x) weights per component;
 *   polynomial:  scale * [the products of z = W x over consecutive runs of reps[j] values, times
 *                offsets[j]; then the offsets beyond len(reps), constants];
 * then a trailing 1 when intercept.  A NULL element of x makes the result NULL (the row is
 * skipped, as MADlib skips it).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "learnedidx.h"

/* The values of a one-dimensional float8[] argument without NULLs (its name for errors). */
static const double *
vector_arg(FunctionCallInfo fcinfo, int argno, const char *name, int *n)
{
	ArrayType  *a = PG_GETARG_ARRAYTYPE_P(argno);

	if (ARR_NDIM(a) > 1 || ARR_ELEMTYPE(a) != FLOAT8OID)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("%s must be a one-dimensional float8[]", name)));
	if (array_contains_nulls(a))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s contains NULL values", name)));
	*n = ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a));
	return (const double *) ARR_DATA_PTR(a);
}

PG_FUNCTION_INFO_V1(learnedidx_svm_features);

Datum
learnedidx_svm_features(PG_FUNCTION_ARGS)
{
	ArrayType  *xa = PG_GETARG_ARRAYTYPE_P(0);
	char	   *kernel = text_to_cstring(PG_GETARG_TEXT_PP(1));
	double		scale = PG_GETARG_FLOAT8(5);
	bool		intercept = PG_GETARG_BOOL(6);
	bool		gaussian = strcmp(kernel, "gaussian") == 0;
	const double *x,
			   *w,
			   *off,
			   *reps;
	int			d,
				nw,
				noff,
				nreps,
				rows,
				nout,
				i,
				j,
				k;
	double	   *z,
			   *out;

	if (!gaussian && strcmp(kernel, "polynomial") != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("kernel must be gaussian or polynomial, not \"%s\"", kernel)));
	if (ARR_NDIM(xa) > 1 || ARR_ELEMTYPE(xa) != FLOAT8OID)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("the features must be a one-dimensional float8[]")));
	if (array_contains_nulls(xa))
		PG_RETURN_NULL();
	d = ArrayGetNItems(ARR_NDIM(xa), ARR_DIMS(xa));
	x = (const double *) ARR_DATA_PTR(xa);
	w = vector_arg(fcinfo, 2, "the kernel's weights", &nw);
	off = vector_arg(fcinfo, 3, "the kernel's offsets", &noff);
	reps = vector_arg(fcinfo, 4, "the kernel's reps", &nreps);
	if (d == 0 || nw % d != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("a row has %d features and the kernel %d weights: the kernel was fitted to rows of "
							   "another length", d, nw)));
	rows = nw / d;
	/* z = W x: one dot product per row of W */
	z = palloc(sizeof(double) * Max(1, rows));
	for (k = 0; k < rows; k++)
	{
		double		s = 0.0;

		for (i = 0; i < d; i++)
			s += w[(size_t) k * d + i] * x[i];
		z[k] = s;
	}
	if (gaussian)
	{
		if (noff != rows || nreps != 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("a gaussian kernel has one offset per component and no reps")));
		nout = rows;
	}
	else
	{
		int			total = 0;

		if (nreps > noff)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("a polynomial kernel has an offset for each of its reps")));
		for (j = 0; j < nreps; j++)
		{
			if (!(reps[j] >= 1 && reps[j] == floor(reps[j]) && reps[j] <= rows))
				ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("the polynomial kernel's reps must be positive integers")));
			total += (int) reps[j];
		}
		if (total != rows)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("the polynomial kernel's reps add up to %d, its weights have %d rows", total, rows)));
		nout = noff;
	}
	out = palloc(sizeof(double) * (nout + (intercept ? 1 : 0) + 1));
	if (gaussian)
		for (k = 0; k < nout; k++)
			out[k] = cos(z[k] + off[k]) * scale;
	else
	{
		for (j = 0, k = 0; j < nreps; j++)
		{
			double		p = 1.0;
			int			end = k + (int) reps[j];

			for (; k < end; k++)
				p *= z[k];
			out[j] = p * off[j] * scale;
		}
		for (; j < nout; j++)
			out[j] = off[j] * scale;
	}
	if (intercept)
		out[nout++] = 1.0;
	{
		Datum	   *elems = palloc(sizeof(Datum) * Max(1, nout));

		for (k = 0; k < nout; k++)
			elems[k] = Float8GetDatum(out[k]);
		PG_RETURN_ARRAYTYPE_P(construct_array(elems, nout, FLOAT8OID, sizeof(float8), FLOAT8PASSBYVAL,
											  TYPALIGN_DOUBLE));
	}
}
