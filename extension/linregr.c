/*
 * linregr.c: MADlib's linregr and heteroskedasticity_test_linregr aggregates.
 *
 * The state (learnedidx.bytea8, laid out in learnedidx.h) is the R factor of the rows [x y] seen,
 * not X'X: a row is folded in by Givens rotations, two states merge by folding the rows of one R
 * into the other (exact: R1'R1 + R2'R2 is the merged R'R), so PostgreSQL's parallel and partial
 * aggregation combine states, and the accelerator server's per-worker states (written by
 * learnedidx/indb/runtime/lstsq.py) merge the same way.  The final function computes MADlib's
 * result from R: the coefficients by back substitution (a rank-deficient R: the minimum-norm
 * solution through its singular values), (X'X)^-1 as R^-1 R^-T, and MADlib's statistics
 * (LinearRegression::compute) from them; learnedidx.linregr_train writes its output table with it.
 */
#include "postgres.h"

#include <float.h>

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "learnedidx.h"

/* A state's fields, read from its bytes (R points into them). */
typedef struct LinregrState
{
	int			k;				/* length of x; -1: the empty initial state */
	int			p;				/* k + 1: the columns of [x y] */
	int64		n;
	double		mean;
	double		m2;
	double	   *R;
} LinregrState;

static size_t
state_bytes(int k)
{
	return LX_LINREGR_HEAD + sizeof(double) * (size_t) (k + 1) * (k + 1);
}

/* The fields of state `s` (checked: a state is the bytes this file or lstsq.py writes). */
static LinregrState
state_read(bytea *s)
{
	LinregrState st = {-1, 0, 0, 0.0, 0.0, NULL};
	char	   *d = VARDATA(s);
	size_t		len = VARSIZE(s) - VARHDRSZ;
	uint16		version,
				k;

	if (len == 0)
		return st;
	if (len < LX_LINREGR_HEAD)
		goto bad;
	memcpy(&version, d, 2);
	memcpy(&k, d + 2, 2);
	if (version != LX_LINREGR_VERSION || k > LX_LINREGR_MAX_K || len != state_bytes(k))
		goto bad;
	st.k = k;
	st.p = k + 1;
	memcpy(&st.n, d + 4, sizeof(int64));
	memcpy(&st.mean, d + 12, sizeof(double));
	memcpy(&st.m2, d + 20, sizeof(double));
	if (st.n < 0)
		goto bad;
	st.R = (double *) (d + LX_LINREGR_HEAD);
	return st;
bad:
	ereport(ERROR, (errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
					errmsg("not a linregr state (%zu bytes)", len)));
	return st;
}

static void
state_write_head(bytea *s, const LinregrState *st)
{
	char	   *d = VARDATA(s);
	uint16		version = LX_LINREGR_VERSION,
				k = (uint16) st->k;

	memcpy(d, &version, 2);
	memcpy(d + 2, &k, 2);
	memcpy(d + 4, &st->n, sizeof(int64));
	memcpy(d + 12, &st->mean, sizeof(double));
	memcpy(d + 20, &st->m2, sizeof(double));
}

/* A state of k features and no rows. */
static bytea *
state_new(int k)
{
	bytea	   *s = palloc0(VARHDRSZ + state_bytes(k));
	LinregrState st = {k, k + 1, 0, 0.0, 0.0, NULL};

	SET_VARSIZE(s, VARHDRSZ + state_bytes(k));
	state_write_head(s, &st);
	return s;
}

/* State argument `argno`, to be changed and returned: in place when an aggregate owns it (its
 * transition value), else a copy; R's doubles aligned either way. */
static bytea *
state_writable(FunctionCallInfo fcinfo, int argno)
{
	bytea	   *s = PG_GETARG_BYTEA_P(argno);

	if (!AggCheckCallContext(fcinfo, NULL) || (uintptr_t) VARDATA(s) % sizeof(double) != 4)
	{
		bytea	   *c = palloc(VARSIZE(s));

		memcpy(c, s, VARSIZE(s));
		s = c;
	}
	return s;
}

/* x of a row: false when it holds a NULL (MADlib skips the row). */
static bool
row_features(ArrayType *a, int *k, const double **x)
{
	if (ARR_NDIM(a) > 1)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("the independent variables must be a one-dimensional array")));
	if (array_contains_nulls(a))
		return false;
	*k = ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a));
	if (*k > LX_LINREGR_MAX_K)
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						errmsg("%d independent variables: at most %d", *k, LX_LINREGR_MAX_K)));
	*x = (const double *) ARR_DATA_PTR(a);
	return true;
}

/* Fold the row (x, y) into state s, made for k features when it is the initial one. */
static bytea *
state_add(FunctionCallInfo fcinfo, int k, const double *x, double y)
{
	bytea	   *s = state_writable(fcinfo, 0);
	LinregrState st = state_read(s);
	double	   *r;
	double		delta;
	int			j;

	if (!isfinite(y))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("the dependent variable is not finite")));
	for (j = 0; j < k; j++)
		if (!isfinite(x[j]))
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("the independent variables are not finite")));
	if (st.k < 0)
	{
		s = state_new(k);
		st = state_read(s);
	}
	else if (st.k != k)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("inconsistent numbers of independent variables: %d, then %d", st.k, k)));
	/* the row's scratch copy, kept for the query in fn_extra */
	if (fcinfo->flinfo->fn_extra == NULL || ((int *) fcinfo->flinfo->fn_extra)[0] < st.p)
	{
		int		   *buf = MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, sizeof(double) * (st.p + 1));

		buf[0] = st.p;
		fcinfo->flinfo->fn_extra = buf;
	}
	r = (double *) fcinfo->flinfo->fn_extra + 1;
	memcpy(r, x, sizeof(double) * k);
	r[k] = y;
	lx_qr_fold_row(st.R, st.p, r, 0);
	st.n++;
	delta = y - st.mean;
	st.mean += delta / st.n;
	st.m2 += delta * (y - st.mean);
	state_write_head(s, &st);
	return s;
}

PG_FUNCTION_INFO_V1(learnedidx_linregr_transition);

/* linregr_transition(state bytea8, y float8, x float8[]): the state with the row folded in. */
Datum
learnedidx_linregr_transition(PG_FUNCTION_ARGS)
{
	int			k;
	const double *x;

	if (!row_features(PG_GETARG_ARRAYTYPE_P(2), &k, &x))
		PG_RETURN_DATUM(PG_GETARG_DATUM(0));
	PG_RETURN_BYTEA_P(state_add(fcinfo, k, x, PG_GETARG_FLOAT8(1)));
}

PG_FUNCTION_INFO_V1(learnedidx_hetero_linregr_transition);

/* hetero_linregr_transition(state, y, x, coef): the row (x, (y - coef . x)^2) folded in: the
 * state of the Breusch-Pagan test's regression of the squared residuals on x. */
Datum
learnedidx_hetero_linregr_transition(PG_FUNCTION_ARGS)
{
	int			k,
				kc,
				j;
	const double *x,
			   *coef;
	double		r = PG_GETARG_FLOAT8(1);

	if (!row_features(PG_GETARG_ARRAYTYPE_P(2), &k, &x) || !row_features(PG_GETARG_ARRAYTYPE_P(3), &kc, &coef))
		PG_RETURN_DATUM(PG_GETARG_DATUM(0));
	if (kc != k)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("%d coefficients for %d independent variables", kc, k)));
	for (j = 0; j < k; j++)
		r -= coef[j] * x[j];
	PG_RETURN_BYTEA_P(state_add(fcinfo, k, x, r * r));
}

PG_FUNCTION_INFO_V1(learnedidx_linregr_merge_states);

/* linregr_merge_states(state1, state2): the state of both states' rows (the aggregates' combine
 * function): [R1; R2] factored again, the counts and Welford's sums merged. */
Datum
learnedidx_linregr_merge_states(PG_FUNCTION_ARGS)
{
	LinregrState a = state_read(PG_GETARG_BYTEA_P(0));
	LinregrState b = state_read(PG_GETARG_BYTEA_P(1));
	bytea	   *s;
	double	   *r,
				delta;
	int64		n;
	int			i;

	if (b.k < 0 || b.n == 0)
		PG_RETURN_DATUM(PG_GETARG_DATUM(0));
	if (a.k < 0 || a.n == 0)
		PG_RETURN_DATUM(PG_GETARG_DATUM(1));
	if (a.k != b.k)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("inconsistent numbers of independent variables: %d and %d", a.k, b.k)));
	s = state_writable(fcinfo, 0);
	a = state_read(s);
	r = palloc(sizeof(double) * a.p);
	for (i = 0; i < b.p; i++)
	{
		CHECK_FOR_INTERRUPTS();
		memset(r, 0, sizeof(double) * i);
		memcpy(r + i, b.R + (size_t) i * b.p + i, sizeof(double) * (b.p - i));
		lx_qr_fold_row(a.R, a.p, r, i);
	}
	n = a.n + b.n;
	delta = b.mean - a.mean;
	a.m2 += b.m2 + delta * delta * ((double) a.n * (double) b.n / (double) n);
	a.mean += delta * ((double) b.n / (double) n);
	a.n = n;
	state_write_head(s, &a);
	PG_RETURN_BYTEA_P(s);
}

/* Least squares from a state: MADlib's LinearRegression::compute, from R. */
typedef struct LinregrFit
{
	double	   *coef;			/* k */
	double	   *inv;			/* (X'X)^+, k x k */
	double		rss;			/* as MADlib has it: min(residual sum of squares, tss) */
	double		tss;
	double		r2;
	double		condition_no;	/* sigma_max / sigma_min of X (MADlib's sqrt of X'X's eigenvalue ratio) */
} LinregrFit;

static void
interruptible(void)
{
	CHECK_FOR_INTERRUPTS();
}

/* The singular values of R[0:k, 0:k] with the columns scaled by `scale` (NULL: none), and with
 * U sigma (by columns, into A) and V when they are given. */
static void
singular_values(const LinregrState *st, const double *scale, double *A, double *V, double *sigma)
{
	int			k = st->k,
				i,
				j;

	for (j = 0; j < k; j++)
		for (i = 0; i < k; i++)
			A[(size_t) j * k + i] = i <= j ? st->R[(size_t) i * st->p + j] * (scale ? scale[j] : 1.0) : 0.0;
	lx_jacobi_svd(A, V, sigma, k, interruptible);
}

static void
fit(const LinregrState *st, LinregrFit *f)
{
	int			k = st->k,
				p = st->p,
				i,
				j,
				l;
	double	   *A = palloc(sizeof(double) * k * k),
			   *V = palloc(sizeof(double) * k * k),
			   *sigma = palloc(sizeof(double) * k),
			   *z = palloc(sizeof(double) * k),
				smax = 0.0,
				smin = INFINITY,
				rho = st->R[(size_t) k * p + k],
				rss;
	bool		full = true;

	f->coef = palloc0(sizeof(double) * k);
	f->inv = palloc0(sizeof(double) * k * k);
	for (i = 0; i < k; i++)
		z[i] = st->R[(size_t) i * p + k];

	/* full rank, judged with the columns scaled to unit norm (a column's scale is no rank
	 * deficiency): then substitution, which keeps the precision the factorization has */
	if (k > 0)
	{
		double	   *scale = palloc(sizeof(double) * k),
					emax = 0.0,
					emin = INFINITY;

		for (j = 0; j < k; j++)
		{
			double		s = 0.0;

			for (i = 0; i <= j; i++)
				s += st->R[(size_t) i * p + j] * st->R[(size_t) i * p + j];
			full &= s > 0.0;
			scale[j] = s > 0.0 ? 1.0 / sqrt(s) : 0.0;
		}
		if (full)
		{
			singular_values(st, scale, A, V, sigma);
			for (j = 0; j < k; j++)
			{
				emax = Max(emax, sigma[j]);
				emin = Min(emin, sigma[j]);
			}
			full = emin > k * DBL_EPSILON * emax;
		}
	}
	singular_values(st, NULL, A, V, sigma);
	for (j = 0; j < k; j++)
	{
		smax = Max(smax, sigma[j]);
		smin = Min(smin, sigma[j]);
	}
	f->condition_no = k == 0 ? NAN : (smax <= 0.0 || smin <= 0.0) ? INFINITY : smax / smin;

	if (full)
	{
		double	   *rinv = palloc(sizeof(double) * k * k);

		full = lx_tri_solve(st->R, p, k, z, f->coef) && lx_tri_inverse(st->R, p, k, rinv, interruptible);
		for (i = 0; full && i < k; i++)
		{
			CHECK_FOR_INTERRUPTS();
			for (j = i; j < k; j++)
			{
				double		s = 0.0;

				for (l = j; l < k; l++)
					s += rinv[(size_t) i * k + l] * rinv[(size_t) j * k + l];
				f->inv[(size_t) i * k + j] = f->inv[(size_t) j * k + i] = s;
			}
		}
		rss = rho * rho;
	}
	if (!full)
	{
		/* the minimum-norm solution: MADlib's pseudo-inverse, singular values below
		 * k eps sigma_max taken as zero */
		double		tol = k * DBL_EPSILON * smax,
					zz = 0.0,
					kept = 0.0;

		memset(f->coef, 0, sizeof(double) * k);
		memset(f->inv, 0, sizeof(double) * k * k);
		for (i = 0; i < k; i++)
			zz += z[i] * z[i];
		for (l = 0; l < k; l++)
		{
			double		uz = 0.0,
						s2 = sigma[l] * sigma[l];

			CHECK_FOR_INTERRUPTS();
			if (sigma[l] <= tol)
				continue;
			for (i = 0; i < k; i++)
				uz += A[(size_t) l * k + i] * z[i];
			kept += uz * uz / s2;
			for (i = 0; i < k; i++)
			{
				f->coef[i] += V[(size_t) l * k + i] * uz / s2;
				for (j = 0; j < k; j++)
					f->inv[(size_t) i * k + j] += V[(size_t) l * k + i] * V[(size_t) l * k + j] / s2;
			}
		}
		rss = rho * rho + Max(zz - kept, 0.0);
	}
	/* MADlib clamps the explained sum of squares to [0, tss]: the residual's too */
	f->tss = Max(st->m2, 0.0);
	f->rss = Min(Max(rss, 0.0), f->tss);
	f->r2 = f->tss == 0.0 ? 1.0 : (f->tss - f->rss) / f->tss;
}

static Datum
float8_array(const double *v, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		d[i] = Float8GetDatum(v[i]);
	return PointerGetDatum(construct_array(d, n, FLOAT8OID, sizeof(double), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

static Datum
float8_matrix(const double *v, int k)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(k * k, 1));
	int			dims[2] = {k, k},
				lbs[2] = {1, 1},
				i;

	for (i = 0; i < k * k; i++)
		d[i] = Float8GetDatum(v[i]);
	return PointerGetDatum(construct_md_array(d, NULL, k > 0 ? 2 : 0, dims, lbs, FLOAT8OID, sizeof(double),
											  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

PG_FUNCTION_INFO_V1(learnedidx_linregr_final);

/* linregr_final(state): learnedidx.linregr_result, MADlib's (coef, r2, std_err, t_stats,
 * p_values, condition_no, num_processed, vcov); NULL for a state without rows.  Statistics that
 * need degrees of freedom (std_err, t_stats, p_values, vcov) are NULL unless n > k. */
Datum
learnedidx_linregr_final(PG_FUNCTION_ARGS)
{
	LinregrState st = state_read(PG_GETARG_BYTEA_P(0));
	LinregrFit	f;
	TupleDesc	desc;
	Datum		values[8];
	bool		nulls[8] = {false};
	int			k = st.k,
				i;

	if (st.k < 0 || st.n == 0)
		PG_RETURN_NULL();
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "linregr_final must return a composite type");
	desc = BlessTupleDesc(desc);
	fit(&st, &f);
	values[0] = float8_array(f.coef, k);
	values[1] = Float8GetDatum(f.r2);
	values[5] = Float8GetDatum(f.condition_no);
	nulls[5] = isnan(f.condition_no);
	values[6] = Int64GetDatum(st.n);
	if (st.n > k)
	{
		double		variance = f.rss / (double) (st.n - k),
				   *se = palloc(sizeof(double) * Max(k, 1)),
				   *t = palloc(sizeof(double) * Max(k, 1)),
				   *pv = palloc(sizeof(double) * Max(k, 1));

		for (i = 0; i < k; i++)
		{
			double		d = f.inv[(size_t) i * k + i];

			se[i] = d < 0.0 ? 0.0 : sqrt(variance * d);
			/* 0 / 0: the coefficient is exactly 0, its t statistic 0 (MADlib's rule) */
			t[i] = f.coef[i] == 0.0 && se[i] == 0.0 ? 0.0 : f.coef[i] / se[i];
			pv[i] = lx_student_t_sf2(t[i], (double) (st.n - k));
		}
		for (i = 0; i < k * k; i++)
			f.inv[i] *= variance;
		values[2] = float8_array(se, k);
		values[3] = float8_array(t, k);
		values[4] = float8_array(pv, k);
		values[7] = float8_matrix(f.inv, k);
	}
	else
		nulls[2] = nulls[3] = nulls[4] = nulls[7] = true;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

PG_FUNCTION_INFO_V1(learnedidx_hetero_linregr_final);

/* hetero_linregr_final(state): learnedidx.heteroskedasticity_test_result, MADlib's (bp_stats,
 * bp_p_value): n R^2 of the squared residuals' regression on x, and its chi-squared tail with
 * k - 1 degrees of freedom (NULL for k < 2). */
Datum
learnedidx_hetero_linregr_final(PG_FUNCTION_ARGS)
{
	LinregrState st = state_read(PG_GETARG_BYTEA_P(0));
	LinregrFit	f;
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	if (st.k < 0 || st.n == 0)
		PG_RETURN_NULL();
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "hetero_linregr_final must return a composite type");
	desc = BlessTupleDesc(desc);
	fit(&st, &f);
	values[0] = Float8GetDatum((double) st.n * f.r2);
	values[1] = Float8GetDatum(lx_chi2_sf((double) st.n * f.r2, st.k - 1));
	nulls[1] = st.k < 2;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}
