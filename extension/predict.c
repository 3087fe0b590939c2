/*
 * predict.c: predict and predict_proba, feature vectors scored against a model table.
 *
 * A model is read once per query (a model trained with grouping_cols: the group's row, picked by
 * the group's values); reading a model runs no code of its owner's.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/transam.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "learnedidx.h"

typedef enum ModelKind
{
	MODEL_SCORE,				/* linregr and DSL models: the score */
	MODEL_LOGREGR,				/* the class 0/1 */
	MODEL_SVM,					/* one of two labels */
	MODEL_LMF					/* u[row] . v[column] */
} ModelKind;

typedef struct Model
{
	Oid			relid;
	ModelKind	kind;
	int			ncoef;
	double	   *coef;			/* one model's coefficients, or ngroups rows of them */
	bool		intercept;		/* coef[0] is an intercept: features may omit its leading 1 */
	double		labels[2];
	int			rank;
	int			nrows,
				ncols;
	double	   *u,
			   *v;
	int64	   *row_ids,
			   *col_ids;
	/* A model trained with grouping_cols: one row per group, sorted by the group's values. */
	int			nkeys;			/* grouping columns; 0 for one model */
	char	   *keynames;		/* their names, for messages */
	int			ngroups;
	Oid		   *keytype;
	Oid		   *keycoll;
	FmgrInfo   *keycmp;			/* the types' btree comparison */
	Datum	   *keys;			/* ngroups × nkeys */
	bool	   *keynull;
	bool	   *trained;		/* the group has coefficients (a group whose rows all had NULLs has none) */
	/* How the call's group arguments become values of the key types (set up on the first call). */
	Oid		   *argtype;
	FmgrInfo   *argout;
	FmgrInfo   *keyin;
	Oid		   *keyioparam;
} Model;

static double *
float8s(Datum d, int *n, int ndim, int *dim2)
{
	ArrayType  *a = DatumGetArrayTypeP(d);
	int			nd = ARR_NDIM(a);

	if (array_contains_nulls(a) || ARR_ELEMTYPE(a) != FLOAT8OID || (nd != ndim && !(nd == 0 && ndim == 1)))
		ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("the model's arrays are malformed")));
	*n = nd == 0 ? 0 : ARR_DIMS(a)[0];
	if (dim2)
		*dim2 = nd == 2 ? ARR_DIMS(a)[1] : 0;
	return (double *) ARR_DATA_PTR(a);
}

static int64 *
int8s(Datum d, int n)
{
	ArrayType  *a = DatumGetArrayTypeP(d);

	if (array_contains_nulls(a) || ARR_ELEMTYPE(a) != INT8OID || ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a)) != n)
		ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("the model's id arrays are malformed")));
	return (int64 *) ARR_DATA_PTR(a);
}

/* Refuse columns first + 1 .. first + n of `t` whose (base) types are not `want` (varchar
 * passes for text): a model table is read without casts, which could run a cast function its
 * owner wrote, and its values are then taken as the types they must be. */
static void
require_types(SPITupleTable *t, const char *model, int first, const Oid *want, int n)
{
	int			j;

	for (j = 0; j < n; j++)
	{
		Oid			have = getBaseType(SPI_gettypeid(t->tupdesc, first + j + 1));

		if (have != want[j] && !(want[j] == TEXTOID && have == VARCHAROID))
			ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
							errmsg("model %s: column \"%s\" has type %s, not %s", model,
								   NameStr(TupleDescAttr(t->tupdesc, first + j)->attname), format_type_be(have),
								   format_type_be(want[j]))));
	}
}

/* The two labels of svm model `model` from column `col` (1-based) of row `row`: its
 * dep_var_mapping, an array of the labels' own type as MADlib writes it (booleans or numbers),
 * read without casts; other labels (text, ...) are svm_predict's to give. */
static void
read_labels(SPITupleTable *t, HeapTuple row, int col, const char *model, double *labels)
{
	Oid			type = getBaseType(SPI_gettypeid(t->tupdesc, col));
	bool		isnull;
	Datum		d = SPI_getbinval(row, t->tupdesc, col, &isnull);
	ArrayType  *a;
	Oid			elem;
	Datum	   *v;
	bool	   *nulls;
	int			n,
				i;
	int16		typlen;
	bool		byval;
	char		align;

	if (type != BOOLARRAYOID && type != INT2ARRAYOID && type != INT4ARRAYOID && type != INT8ARRAYOID &&
		type != FLOAT4ARRAYOID && type != FLOAT8ARRAYOID)
		ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
						errmsg("model %s: its labels (dep_var_mapping) have type %s; predict returns numbers",
							   model, format_type_be(type)),
						errhint("Score it with learnedidx.svm_predict, which gives the labels themselves.")));
	if (isnull)
		ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("model %s lacks its two labels", model)));
	a = DatumGetArrayTypeP(d);
	elem = ARR_ELEMTYPE(a);
	get_typlenbyvalalign(elem, &typlen, &byval, &align);
	deconstruct_array(a, elem, typlen, byval, align, &v, &nulls, &n);
	if (ARR_NDIM(a) != 1 || n != 2 || nulls[0] || nulls[1])
		ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("model %s lacks its two labels", model)));
	for (i = 0; i < 2; i++)
		labels[i] = elem == BOOLOID ? (double) DatumGetBool(v[i]) :
			elem == INT2OID ? (double) DatumGetInt16(v[i]) :
			elem == INT4OID ? (double) DatumGetInt32(v[i]) :
			elem == INT8OID ? (double) DatumGetInt64(v[i]) :
			elem == FLOAT4OID ? (double) DatumGetFloat4(v[i]) : DatumGetFloat8(v[i]);
}

/* One value of the single row of `sql`, whose columns must have types `want` (NULL when SQL
 * NULL); errors unless there is one row. */
static Datum
model_value(const char *sql, const char *model, const Oid *want, int n, bool *isnull)
{
	if (SPI_execute(sql, true, 2) != SPI_OK_SELECT)
		elog(ERROR, "reading model %s failed", model);
	require_types(SPI_tuptable, model, 0, want, n);
	if (SPI_processed != 1)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("model %s has " UINT64_FORMAT " rows; predict scores models of one row", model,
							   (uint64) SPI_processed),
						errhint("A model trained with grouping_cols has a summary naming its grouping_columns.")));
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, isnull);
}

/*
 * Whether predict reads group values of type `t` (a grouping column's) with the system's code
 * only.  It converts a caller's value of another type with the column type's input function and
 * compares values with its btree comparison; a domain's CHECK, and the functions of a type or
 * cast a role made, are code the model's owner may have written, which would run as the caller.
 * Safe: built-in types (made by initdb, below FirstNormalObjectId, which user objects never get),
 * enums (always enum_in, enum_out and enum_cmp), arrays of these, and a domain over any of them
 * (read as its base type, so its CHECKs never run).  Not: a domain inside an array (array_in
 * checks each element), composites and ranges a role made (record_in and range_in run their
 * members' input functions), base types a role made.
 */
static bool
group_type_safe(Oid t)
{
	HeapTuple	tup;
	Form_pg_type typ;
	bool		safe = false;

	t = getBaseType(t);
	if (t < FirstNormalObjectId)
		return true;
	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(t));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for type %u", t);
	typ = (Form_pg_type) GETSTRUCT(tup);
	if (typ->typtype == TYPTYPE_ENUM)
		safe = typ->typinput == F_ENUM_IN && typ->typoutput == F_ENUM_OUT;
	else if (typ->typtype == TYPTYPE_BASE && IsTrueArrayType(typ) && typ->typinput == F_ARRAY_IN &&
			 typ->typoutput == F_ARRAY_OUT && get_typtype(typ->typelem) != TYPTYPE_DOMAIN)
		safe = group_type_safe(typ->typelem);
	ReleaseSysCache(tup);
	return safe;
}

/* Refuse grouping column `column` of `model` when predict could not read its type `t` with the
 * system's code only (at training, and again in predict: a model's table may be written by hand). */
static void
check_group_type(const char *model, const char *column, Oid t)
{
	if (!group_type_safe(t))
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("grouping column \"%s\" of model %s has type %s, which predict does not read",
							   column, model, format_type_be(t)),
						errdetail("predict reads group values as built-in types, enums, arrays of these or domains "
								  "over one: the input function of another type could run code of the role that "
								  "made it (a domain's CHECK inside an array, composite or range) as the caller."),
						errhint("Group by a column of such a type, e.g. cast in a query source.")));
}

PG_FUNCTION_INFO_V1(learnedidx_check_group_type);

/* learnedidx._check_group_type(model text, column text, type regtype): check_group_type, for
 * the training functions. */
Datum
learnedidx_check_group_type(PG_FUNCTION_ARGS)
{
	check_group_type(text_to_cstring(PG_GETARG_TEXT_PP(0)), text_to_cstring(PG_GETARG_TEXT_PP(1)),
					 PG_GETARG_OID(2));
	PG_RETURN_VOID();
}

/* Compare groups a and b of model m (keys ordered as the types' btree orders them, NULLs last). */
static int
compare_keys(const Model *m, const Datum *ka, const bool *na, const Datum *kb, const bool *nb)
{
	int			j;

	for (j = 0; j < m->nkeys; j++)
	{
		int			c;

		if (na[j] || nb[j])
			c = (na[j] ? 1 : 0) - (nb[j] ? 1 : 0);
		else
			c = DatumGetInt32(FunctionCall2Coll(&m->keycmp[j], m->keycoll[j], ka[j], kb[j]));
		if (c != 0)
			return c;
	}
	return 0;
}

static int
compare_groups(const void *a, const void *b, void *arg)
{
	const Model *m = (const Model *) arg;
	int			ia = *(const int *) a,
				ib = *(const int *) b;

	return compare_keys(m, m->keys + (size_t) ia * m->nkeys, m->keynull + (size_t) ia * m->nkeys,
						m->keys + (size_t) ib * m->nkeys, m->keynull + (size_t) ib * m->nkeys);
}

/* The rows of a grouped model (in SPI, search_path pinned): its keys and coefficients, sorted. */
static void
load_groups(Model *m, const char *name, ArrayType *keycols, MemoryContext mcxt)
{
	Datum	   *kn;
	bool	   *knulls;
	int			nk,
				j,
				g;
	StringInfoData sql,
				names;
	SPITupleTable *t;
	int		   *order;
	Datum	   *keys;
	bool	   *keynull,
			   *trained;
	double	   *coef;
	MemoryContext old;

	deconstruct_array(keycols, TEXTOID, -1, false, TYPALIGN_INT, &kn, &knulls, &nk);
	initStringInfo(&sql);
	initStringInfo(&names);
	appendStringInfoString(&sql, "SELECT ");
	for (j = 0; j < nk; j++)
	{
		if (knulls[j])
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("model %s names a NULL grouping column", name)));
		appendStringInfo(&sql, "%s, ", quote_identifier(TextDatumGetCString(kn[j])));
		appendStringInfo(&names, "%s%s", j ? ", " : "", TextDatumGetCString(kn[j]));
	}
	appendStringInfo(&sql, "coef%s FROM ONLY %s", m->kind == MODEL_SVM ? ", dep_var_mapping" : "", name);
	if (SPI_execute(sql.data, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "reading model %s failed", name);
	t = SPI_tuptable;
	{
		Oid			want[1] = {FLOAT8ARRAYOID};

		require_types(t, name, nk, want, 1);	/* after the keys; the labels: read_labels */
	}
	if (SPI_processed > INT_MAX / Max(1, nk))
		ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED), errmsg("model %s has too many groups", name)));

	old = MemoryContextSwitchTo(mcxt);
	m->nkeys = nk;
	m->keynames = pstrdup(names.data);
	m->ngroups = (int) SPI_processed;
	m->keytype = palloc(sizeof(Oid) * nk);
	m->keycoll = palloc(sizeof(Oid) * nk);
	m->keycmp = palloc0(sizeof(FmgrInfo) * nk);
	keys = palloc(sizeof(Datum) * Max(1, (size_t) m->ngroups * nk));
	keynull = palloc(sizeof(bool) * Max(1, (size_t) m->ngroups * nk));
	trained = palloc0(sizeof(bool) * Max(1, m->ngroups));
	order = palloc(sizeof(int) * Max(1, m->ngroups));
	m->ncoef = -1;
	for (j = 0; j < nk; j++)
	{
		TypeCacheEntry *tc;

		check_group_type(name, TextDatumGetCString(kn[j]), SPI_gettypeid(t->tupdesc, j + 1));
		/* values of a domain compare and convert as its base type's (a domain's input would run
		 * its CHECK expressions, code the model's owner wrote) */
		m->keytype[j] = getBaseType(SPI_gettypeid(t->tupdesc, j + 1));
		m->keycoll[j] = TupleDescAttr(t->tupdesc, j)->attcollation;
		tc = lookup_type_cache(m->keytype[j], TYPECACHE_CMP_PROC_FINFO);
		if (!OidIsValid(tc->cmp_proc))
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_FUNCTION),
							errmsg("grouping column %s of model %s has type %s, which has no ordering",
								   TextDatumGetCString(kn[j]), name, format_type_be(m->keytype[j]))));
		fmgr_info_copy(&m->keycmp[j], &tc->cmp_proc_finfo, mcxt);
	}
	for (g = 0; g < m->ngroups; g++)
	{
		HeapTuple	row = t->vals[g];
		bool		isnull;
		Datum		c;

		order[g] = g;
		for (j = 0; j < nk; j++)
		{
			Datum		v = SPI_getbinval(row, t->tupdesc, j + 1, &keynull[(size_t) g * nk + j]);
			int16		typlen;
			bool		typbyval;

			get_typlenbyval(m->keytype[j], &typlen, &typbyval);
			keys[(size_t) g * nk + j] = keynull[(size_t) g * nk + j] ? (Datum) 0 : datumCopy(v, typbyval, typlen);
		}
		c = SPI_getbinval(row, t->tupdesc, nk + 1, &isnull);
		if (!isnull)
		{
			int			n;
			double	   *p = float8s(c, &n, 1, NULL);

			if (m->ncoef < 0)
			{
				m->ncoef = n;
				m->coef = palloc(sizeof(double) * Max(1, (size_t) m->ngroups * n));
			}
			if (n != m->ncoef)
				ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
								errmsg("model %s has coefficients of two lengths", name)));
			memcpy(m->coef + (size_t) g * n, p, sizeof(double) * n);
			trained[g] = true;
		}
		if (m->kind == MODEL_SVM && !isnull)
			read_labels(t, row, nk + 2, name, m->labels);
	}
	if (m->ncoef < 0)
	{
		m->ncoef = 0;
		m->coef = palloc(sizeof(double));
	}
	/* sort the groups: keys, coefficients and the trained flags follow */
	m->keys = keys;
	m->keynull = keynull;
	qsort_arg(order, m->ngroups, sizeof(int), compare_groups, m);
	m->keys = palloc(sizeof(Datum) * Max(1, (size_t) m->ngroups * nk));
	m->keynull = palloc(sizeof(bool) * Max(1, (size_t) m->ngroups * nk));
	m->trained = palloc(sizeof(bool) * Max(1, m->ngroups));
	{
		double	   *sorted = palloc(sizeof(double) * Max(1, (size_t) m->ngroups * m->ncoef));

		for (g = 0; g < m->ngroups; g++)
		{
			memcpy(m->keys + (size_t) g * nk, keys + (size_t) order[g] * nk, sizeof(Datum) * nk);
			memcpy(m->keynull + (size_t) g * nk, keynull + (size_t) order[g] * nk, sizeof(bool) * nk);
			m->trained[g] = trained[order[g]];
			if (trained[order[g]])
				memcpy(sorted + (size_t) g * m->ncoef, m->coef + (size_t) order[g] * m->ncoef,
					   sizeof(double) * m->ncoef);
		}
		coef = sorted;
	}
	m->coef = coef;
	MemoryContextSwitchTo(old);
}

/* Read model `relid` (a table with its <name>_summary table) into the query's memory.  Its
 * queries name everything qualified and run with search_path = pg_catalog, pg_temp, set here
 * rather than by the function's SET clause, which would cost a GUC change per row. */
static Model *
load_model(Oid relid, MemoryContext mcxt)
{
	Model	   *m;
	char	   *nsp = get_namespace_name(get_rel_namespace(relid));
	char	   *rel = get_rel_name(relid);
	char	   *name;
	char	   *summary;
	Oid			summary_relid;
	char	   *method;
	bool		isnull;
	Datum		d;
	ArrayType  *keycols;
	MemoryContext old;
	int			nest;

	if (nsp == NULL || rel == NULL)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE), errmsg("model %u does not exist", relid)));
	name = quote_qualified_identifier(nsp, rel);
	summary = quote_qualified_identifier(nsp, psprintf("%s_summary", rel));
	summary_relid = get_relname_relid(psprintf("%s_summary", rel), get_rel_namespace(relid));
	/* Plain tables only, read without their inheritors and with row_security off (an error if
	 * policies apply): reading a model runs no code of its owner's (views, policies, foreign
	 * tables, casts), whoever owns it. */
	if (get_rel_relkind(relid) != RELKIND_RELATION ||
		get_rel_relkind(summary_relid) != RELKIND_RELATION)
		ereport(ERROR, (errcode(ERRCODE_WRONG_OBJECT_TYPE),
						errmsg("%s is not a learnedidx model: it is not a table with a summary table %s", name,
							   summary)));
	nest = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	(void) set_config_option("row_security", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* Summaries written by hand, or by MADlib, have no grouping_columns.  Columns are read as
	 * they are, never converted: to_jsonb(s) would run a JSON cast of any column's type. */
	{
		Oid			want[3] = {TEXTOID, BOOLOID, TEXTARRAYOID};
		bool		grouped = get_attnum(summary_relid, "grouping_columns") != InvalidAttrNumber;

		d = model_value(psprintf("SELECT s.method, s.intercept, %s FROM ONLY %s AS s",
								 grouped ? "s.grouping_columns" : "NULL::pg_catalog.text[]", summary),
						name, want, 3, &isnull);
	}
	if (isnull)
		ereport(ERROR, (errcode(ERRCODE_WRONG_OBJECT_TYPE), errmsg("%s is not a learnedidx model", name)));
	method = TextDatumGetCString(d);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
	keycols = isnull ? NULL : DatumGetArrayTypePCopy(d);
	old = MemoryContextSwitchTo(mcxt);
	m = palloc0(sizeof(Model));
	m->relid = relid;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	m->intercept = !isnull && DatumGetBool(d);
	m->kind = strcmp(method, "logregr") == 0 ? MODEL_LOGREGR :
		strcmp(method, "svm") == 0 || strcmp(method, "SVC") == 0 ? MODEL_SVM :
		strcmp(method, "lmf") == 0 ? MODEL_LMF : MODEL_SCORE;
	MemoryContextSwitchTo(old);
	/* A model of MADlib's svm with a kernel scores the row's random features: svm_predict's. */
	if (get_attnum(summary_relid, "kernel_func") != InvalidAttrNumber)
	{
		Oid			want[1] = {TEXTOID};

		d = model_value(psprintf("SELECT s.kernel_func FROM ONLY %s AS s", summary), name, want, 1, &isnull);
		if (!isnull && strcmp(TextDatumGetCString(d), "linear") != 0)
			ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							errmsg("model %s maps its features with the %s kernel: predict scores linear models",
								   name, TextDatumGetCString(d)),
							errhint("Score it with learnedidx.svm_predict.")));
	}
	if (keycols != NULL && ArrayGetNItems(ARR_NDIM(keycols), ARR_DIMS(keycols)) > 0)
	{
		if (m->kind == MODEL_LMF)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("model %s: lmf models have no groups", name)));
		load_groups(m, name, keycols, mcxt);
	}
	else if (m->kind == MODEL_LMF)
	{
		Oid			want[4] = {FLOAT8ARRAYOID, FLOAT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID};
		Datum		u = model_value(psprintf("SELECT u, v, row_ids, col_ids FROM ONLY %s", name), name, want, 4,
									&isnull);
		bool		n2,
					n3,
					n4;
		Datum		v = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &n2);
		Datum		rows = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &n3);
		Datum		cols = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &n4);
		double	   *pu,
				   *pv;
		int			ru,
					rv;
		int64	   *pr,
				   *pc;

		if (isnull || n2 || n3 || n4)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("model %s lacks its factors", name)));
		pu = float8s(u, &m->nrows, 2, &ru);
		pv = float8s(v, &m->ncols, 2, &rv);
		if (ru != rv)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("model %s has factors of two ranks", name)));
		pr = int8s(rows, m->nrows);
		pc = int8s(cols, m->ncols);
		old = MemoryContextSwitchTo(mcxt);
		m->rank = ru;
		m->u = palloc(sizeof(double) * Max(1, m->nrows * ru));
		m->v = palloc(sizeof(double) * Max(1, m->ncols * rv));
		m->row_ids = palloc(sizeof(int64) * Max(1, m->nrows));
		m->col_ids = palloc(sizeof(int64) * Max(1, m->ncols));
		memcpy(m->u, pu, sizeof(double) * m->nrows * ru);
		memcpy(m->v, pv, sizeof(double) * m->ncols * rv);
		memcpy(m->row_ids, pr, sizeof(int64) * m->nrows);
		memcpy(m->col_ids, pc, sizeof(int64) * m->ncols);
		MemoryContextSwitchTo(old);
	}
	else
	{
		const char *cols = m->kind == MODEL_SVM ? "coef, dep_var_mapping" : "coef";
		double	   *coef;
		Oid			want[1] = {FLOAT8ARRAYOID};
		Datum		c = model_value(psprintf("SELECT %s FROM ONLY %s", cols, name), name, want, 1, &isnull);

		if (isnull)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("model %s has no coefficients", name)));
		coef = float8s(c, &m->ncoef, 1, NULL);
		old = MemoryContextSwitchTo(mcxt);
		m->coef = palloc(sizeof(double) * Max(1, m->ncoef));
		memcpy(m->coef, coef, sizeof(double) * m->ncoef);
		MemoryContextSwitchTo(old);
		if (m->kind == MODEL_SVM)
			read_labels(SPI_tuptable, SPI_tuptable->vals[0], 2, name, m->labels);
	}
	SPI_finish();
	AtEOXact_GUC(true, nest);
	return m;
}

static Model *
cached_model(FunctionCallInfo fcinfo)
{
	Oid			relid = PG_GETARG_OID(0);
	Model	   *m = (Model *) fcinfo->flinfo->fn_extra;

	if (m == NULL || m->relid != relid)
	{
		m = load_model(relid, fcinfo->flinfo->fn_mcxt);
		fcinfo->flinfo->fn_extra = m;
	}
	return m;
}

/* The coefficients predict's group arguments (after model and features) pick: the model's own
 * without grouping, the group's with it; NULL for a group the model has not trained. */
static const double *
call_coef(FunctionCallInfo fcinfo, Model *m)
{
	int			nargs = PG_NARGS() - 2;
	Datum	   *key;
	bool	   *null;
	int			j,
				lo,
				hi;

	if (m->nkeys == 0)
	{
		if (nargs > 0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("model %s is one model, not one per group: call predict(model, features)",
								   get_rel_name(m->relid))));
		return m->coef;
	}
	if (nargs != m->nkeys)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("model %s has a model per group of (%s): predict(model, features, %s) picks one",
							   get_rel_name(m->relid), m->keynames, m->keynames)));
	if (get_fn_expr_variadic(fcinfo->flinfo))
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("give the group's values as arguments, not as one VARIADIC array")));
	if (m->argtype == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);

		m->argout = palloc0(sizeof(FmgrInfo) * m->nkeys);
		m->keyin = palloc0(sizeof(FmgrInfo) * m->nkeys);
		m->keyioparam = palloc0(sizeof(Oid) * m->nkeys);
		m->argtype = palloc(sizeof(Oid) * m->nkeys);
		for (j = 0; j < m->nkeys; j++)
		{
			Oid			f;
			bool		varlena;

			m->argtype[j] = get_fn_expr_argtype(fcinfo->flinfo, 2 + j);
			if (m->argtype[j] == m->keytype[j])
				continue;
			/* another type: its text form, read as the grouping column's type */
			getTypeOutputInfo(m->argtype[j], &f, &varlena);
			fmgr_info_cxt(f, &m->argout[j], fcinfo->flinfo->fn_mcxt);
			getTypeInputInfo(m->keytype[j], &f, &m->keyioparam[j]);
			fmgr_info_cxt(f, &m->keyin[j], fcinfo->flinfo->fn_mcxt);
		}
		MemoryContextSwitchTo(old);
	}
	key = palloc(sizeof(Datum) * m->nkeys);
	null = palloc(sizeof(bool) * m->nkeys);
	for (j = 0; j < m->nkeys; j++)
	{
		null[j] = PG_ARGISNULL(2 + j);
		key[j] = null[j] ? (Datum) 0 : PG_GETARG_DATUM(2 + j);
		if (!null[j] && m->argtype[j] != m->keytype[j])
			key[j] = InputFunctionCall(&m->keyin[j], OutputFunctionCall(&m->argout[j], key[j]), m->keyioparam[j], -1);
	}
	lo = 0;
	hi = m->ngroups - 1;
	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;
		int			c = compare_keys(m, key, null, m->keys + (size_t) mid * m->nkeys,
									 m->keynull + (size_t) mid * m->nkeys);

		if (c == 0)
			return m->trained[mid] ? m->coef + (size_t) mid * m->ncoef : NULL;
		if (c > 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

static int
find_id(const int64 *ids, int n, double x)
{
	int			lo = 0,
				hi = n - 1;
	int64		id;

	if (x != floor(x) || x < (double) PG_INT64_MIN || x >= -(double) PG_INT64_MIN)
		return -1;
	id = (int64) x;
	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (ids[mid] == id)
			return mid;
		if (ids[mid] < id)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/* The score of `features` under coefficients `coef` (NULL features or a NULL element: *isnull). */
static double
model_score(Model *m, const double *coef, ArrayType *a, bool *isnull)
{
	int			n;
	const double *x;
	double		s = 0.0;
	int			i;

	*isnull = false;
	if (array_contains_nulls(a))
	{
		*isnull = true;
		return 0.0;
	}
	if (ARR_NDIM(a) > 1)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("features must be a one-dimensional array")));
	n = ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a));
	x = (const double *) ARR_DATA_PTR(a);
	if (m->kind == MODEL_LMF)
	{
		int			r,
					c;

		if (n != 2)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("LMF models predict from ARRAY[row id, column id], not %d values", n)));
		r = find_id(m->row_ids, m->nrows, x[0]);
		c = find_id(m->col_ids, m->ncols, x[1]);
		if (r < 0 || c < 0)
		{
			*isnull = true;		/* an id the model has not seen */
			return 0.0;
		}
		for (i = 0; i < m->rank; i++)
			s += m->u[(size_t) r * m->rank + i] * m->v[(size_t) c * m->rank + i];
		return s;
	}
	if (n == m->ncoef)
	{
		/* the leading-1 form of a model with an intercept: the 1 is no feature to score */
		if (m->intercept && n > 0 && x[0] != 1.0)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("the model has an intercept and %d coefficients: %d features start with its 1, "
								   "not %g", m->ncoef, n, x[0]),
							errdetail("It takes %d features, or %d with a leading 1 for its intercept.",
									  m->ncoef - 1, m->ncoef)));
		for (i = 0; i < n; i++)
			s += coef[i] * x[i];
		return s;
	}
	if (n == m->ncoef - 1 && m->intercept)
	{
		s = coef[0];
		for (i = 0; i < n; i++)
			s += coef[i + 1] * x[i];
		return s;
	}
	ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					errmsg("the model has %d coefficients; %d features do not fit it", m->ncoef, n),
					errdetail(m->intercept ? "It takes %d features, or %d with a leading 1 for its intercept." :
							  "It takes %d features.", m->ncoef - 1, m->ncoef)));
	return 0.0;
}

/* The score of predict's arguments (model, features[, group...]): false when it is NULL (a NULL
 * argument or element, a group the model has not trained).  `proba`: the model must be a
 * logistic regression's. */
static bool
score_call(FunctionCallInfo fcinfo, bool proba, Model **mp, double *s)
{
	Model	   *m;
	const double *coef;
	bool		isnull;

	if (PG_ARGISNULL(0))
		return false;
	m = *mp = cached_model(fcinfo);
	if (proba && m->kind != MODEL_LOGREGR)
		ereport(ERROR, (errcode(ERRCODE_WRONG_OBJECT_TYPE),
						errmsg("predict_proba needs a logistic regression model; %s is not one",
							   get_rel_name(m->relid))));
	coef = m->kind == MODEL_LMF ? NULL : call_coef(fcinfo, m);
	if (PG_ARGISNULL(1) || (coef == NULL && m->kind != MODEL_LMF))
		return false;
	*s = model_score(m, coef, PG_GETARG_ARRAYTYPE_P(1), &isnull);
	return !isnull;
}

PG_FUNCTION_INFO_V1(learnedidx_predict);

/* learnedidx.predict(model regclass, features float8[] [, group...]): the score (linregr and DSL
 * models), the class 0/1 (logregr), the label (svm) or u[row] . v[column] (lmf). */
Datum
learnedidx_predict(PG_FUNCTION_ARGS)
{
	Model	   *m;
	double		s;

	if (!score_call(fcinfo, false, &m, &s))
		PG_RETURN_NULL();
	switch (m->kind)
	{
		case MODEL_LOGREGR: PG_RETURN_FLOAT8(s > 0 ? 1.0 : 0.0);
		case MODEL_SVM: PG_RETURN_FLOAT8(s > 0 ? m->labels[1] : m->labels[0]);
		default: PG_RETURN_FLOAT8(s);
	}
}

PG_FUNCTION_INFO_V1(learnedidx_predict_proba);

/* learnedidx.predict_proba(model regclass, features float8[] [, group...]): P(y = 1) of a
 * logregr model. */
Datum
learnedidx_predict_proba(PG_FUNCTION_ARGS)
{
	Model	   *m;
	double		s;

	if (!score_call(fcinfo, true, &m, &s))
		PG_RETURN_NULL();
	PG_RETURN_FLOAT8(lx_sigmoid(s));
}
