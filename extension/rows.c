/*
 * rows.c: the query path, the rows of an SPI query sent as float8.
 *
 * The query runs read-only, in the caller's snapshot, with the caller's search_path; a
 * DestReceiver writes its rows into the ring's slots.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "tcop/dest.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "learnedidx.h"

typedef struct RowReceiver
{
	DestReceiver pub;
	Conn	   *conn;
	TupleDesc	desc;
	Oid		   *types;			/* base type per column */
	Oid		   *elems;			/* element type of array columns, InvalidOid for scalars */
	int		   *widths;			/* elements of each array column, from the first usable row */
	int			rowlen;			/* float8 per row; -1 until the first usable row */
	uint64		rows;
	uint64		skipped;
	int			slot;			/* the ring's slot being filled, -1 when none */
	uint32		buffered;		/* rows in the slot */
	bool		array_form;		/* the features are one array column */
	MemoryContext outer;		/* the caller's context: SPI_finish frees the executor's, and what
								 * the receiver keeps (buffers, the reply) outlives it */
	MemoryContext rowcxt;		/* reset per row: detoasted arrays, numeric conversions */
	char	   *reply;			/* the server's reply, when it ended the call early */
} RowReceiver;

static bool
number_type(Oid t)
{
	return t == INT2OID || t == INT4OID || t == INT8OID || t == FLOAT4OID || t == FLOAT8OID || t == NUMERICOID ||
		t == BOOLOID || t == OIDOID;
}

static void
rows_startup(DestReceiver *self, int operation, TupleDesc desc)
{
	RowReceiver *r = (RowReceiver *) self;
	MemoryContext old = MemoryContextSwitchTo(r->outer);
	int			i;

	r->desc = desc;
	r->types = palloc(sizeof(Oid) * desc->natts);
	r->elems = palloc(sizeof(Oid) * desc->natts);
	r->widths = palloc0(sizeof(int) * desc->natts);
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute a = TupleDescAttr(desc, i);
		Oid			elem;

		r->types[i] = getBaseType(a->atttypid);
		elem = get_element_type(r->types[i]);
		r->elems[i] = elem;
		if (elem != InvalidOid && i > 0 && number_type(elem) && elem != BOOLOID && elem != OIDOID)
			continue;
		if (elem == InvalidOid && number_type(r->types[i]))
			continue;
		ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
						errmsg("%s \"%s\" has type %s; %s", i == 0 ? "the label" : "feature",
							   NameStr(a->attname), format_type_be(a->atttypid),
							   i == 0 ? "a number or boolean is required" : "numbers or numeric arrays are required")));
	}
	r->rowlen = -1;
	r->slot = -1;
	r->array_form = desc->natts == 2 && r->elems[1] != InvalidOid;
	r->rowcxt = AllocSetContextCreate(r->outer, "learnedidx rows", ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(old);
}

static double
scalar_value(Datum d, Oid t)
{
	switch (t)
	{
		case FLOAT8OID: return DatumGetFloat8(d);
		case FLOAT4OID: return DatumGetFloat4(d);
		case INT2OID: return DatumGetInt16(d);
		case INT4OID: return DatumGetInt32(d);
		case INT8OID: return (double) DatumGetInt64(d);
		case BOOLOID: return DatumGetBool(d) ? 1.0 : 0.0;
		case OIDOID: return DatumGetObjectId(d);
		default: return DatumGetFloat8(DirectFunctionCall1(numeric_float8, d));
	}
}

/* Hand the slot being filled to the server. */
static void
rows_flush(RowReceiver *r)
{
	MemoryContext old;

	if (r->slot < 0 || r->reply != NULL)
		return;
	old = MemoryContextSwitchTo(r->outer);
	if (!lx_ring_submit(r->conn, r->slot, SLOT_ROWS, r->buffered, r->rowlen, NULL))
		r->reply = r->conn->reply;
	MemoryContextSwitchTo(old);
	r->slot = -1;
	r->buffered = 0;
}

/* A row: label, then each feature column (numbers, or arrays' elements) as float8.  Rows with a
 * NULL (or a NULL element) are skipped and counted; arrays must keep their first row's length. */
static bool
rows_receive(TupleTableSlot *slot, DestReceiver *self)
{
	RowReceiver *r = (RowReceiver *) self;
	int			natts = r->desc->natts;
	int			i;
	ArrayType **arrays;
	MemoryContext old;
	double	   *out;

	if (r->reply != NULL)
		return false;
	MemoryContextReset(r->rowcxt);
	old = MemoryContextSwitchTo(r->rowcxt);
	arrays = palloc0(sizeof(ArrayType *) * natts);
	slot_getallattrs(slot);
	r->rows++;
	for (i = 0; i < natts; i++)
	{
		if (slot->tts_isnull[i])
			break;
		if (r->elems[i] != InvalidOid)
		{
			arrays[i] = DatumGetArrayTypeP(slot->tts_values[i]);
			if (array_contains_nulls(arrays[i]))
				break;
		}
	}
	if (i < natts)
	{
		r->skipped++;
		MemoryContextSwitchTo(old);
		return true;
	}
	for (i = 0; i < natts; i++)
	{
		int			n;

		if (arrays[i] == NULL)
			continue;
		if (ARR_NDIM(arrays[i]) > 1)
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("array column \"%s\" in row " UINT64_FORMAT " has %d dimensions; one is required",
								   NameStr(TupleDescAttr(r->desc, i)->attname), r->rows, ARR_NDIM(arrays[i]))));
		n = ArrayGetNItems(ARR_NDIM(arrays[i]), ARR_DIMS(arrays[i]));
		if (r->rowlen < 0)
			r->widths[i] = n;
		else if (n != r->widths[i])
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("array column \"%s\" has %d elements in row " UINT64_FORMAT
								   " but %d in the first row", NameStr(TupleDescAttr(r->desc, i)->attname), n,
								   r->rows, r->widths[i]),
							errdetail("Arrays of different lengths are not feature vectors of one model.")));
	}
	if (r->rowlen < 0)
	{
		uint64		len = 0;

		for (i = 0; i < natts; i++)
			len += arrays[i] ? r->widths[i] : 1;
		/* a row must fit one slot of the ring */
		if (len * sizeof(double) > r->conn->ring.slot_bytes)
			ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
							errmsg("a row of " UINT64_FORMAT " values exceeds the stream's slots of %u bytes", len,
								   r->conn->ring.slot_bytes)));
		r->rowlen = (int) len;
	}
	MemoryContextSwitchTo(old);
	if (r->slot < 0)
	{
		old = MemoryContextSwitchTo(r->outer);
		r->slot = lx_ring_acquire(r->conn);
		MemoryContextSwitchTo(old);
		if (r->slot < 0)
		{
			r->reply = r->conn->reply;
			return false;
		}
		r->buffered = 0;
	}
	out = (double *) (lx_ring_slot(r->conn, r->slot) + (size_t) r->buffered * r->rowlen * sizeof(double));
	for (i = 0; i < natts; i++)
	{
		ArrayType  *a = arrays[i];

		if (a == NULL)
		{
			old = MemoryContextSwitchTo(r->rowcxt);
			*out++ = scalar_value(slot->tts_values[i], r->types[i]);
			MemoryContextSwitchTo(old);
		}
		else
		{
			int			n = r->widths[i];
			int			j;
			char	   *data = ARR_DATA_PTR(a);

			switch (r->elems[i])
			{
				case FLOAT8OID: memcpy(out, data, n * sizeof(double)); break;
				case FLOAT4OID: for (j = 0; j < n; j++) out[j] = ((float4 *) data)[j]; break;
				case INT2OID: for (j = 0; j < n; j++) out[j] = ((int16 *) data)[j]; break;
				case INT4OID: for (j = 0; j < n; j++) out[j] = ((int32 *) data)[j]; break;
				case INT8OID: for (j = 0; j < n; j++) out[j] = (double) ((int64 *) data)[j]; break;
				default:
					{
						Datum	   *el;
						int			m;

						old = MemoryContextSwitchTo(r->rowcxt);
						deconstruct_array(a, NUMERICOID, -1, false, TYPALIGN_INT, &el, NULL, &m);
						for (j = 0; j < m; j++)
							out[j] = scalar_value(el[j], NUMERICOID);
						MemoryContextSwitchTo(old);
					}
			}
			out += n;
		}
	}
	if ((size_t) ++r->buffered * r->rowlen * sizeof(double) + r->rowlen * sizeof(double) > r->conn->ring.slot_bytes)
		rows_flush(r);
	return r->reply == NULL;
}

static void
rows_shutdown(DestReceiver *self)
{
}

static void
rows_destroy(DestReceiver *self)
{
}

/* Run `query` read-only in the caller's snapshot, with the caller's search_path, sending its rows. */
char *
lx_stream_query(Conn *c, const char *query, const char *search_path, int pass, const char *why)
{
	RowReceiver r;
	SPIPlanPtr	plan;
	SPIExecuteOptions opts;
	StringInfoData s;
	int			nest = NewGUCNestLevel();

	if (search_path != NULL)
		(void) set_config_option("search_path", search_path, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
								 false);
	memset(&r, 0, sizeof(r));
	r.pub.receiveSlot = rows_receive;
	r.pub.rStartup = rows_startup;
	r.pub.rShutdown = rows_shutdown;
	r.pub.rDestroy = rows_destroy;
	r.pub.mydest = DestNone;
	r.conn = c;
	r.outer = CurrentMemoryContext;
	initStringInfo(&s);
	appendStringInfo(&s, "{\"begin\": {\"pass\": %d, \"reader\": \"query\", \"why\": ", pass);
	if (why)
		escape_json(&s, why);
	else
		appendStringInfoString(&s, "null");
	appendStringInfoString(&s, "}}");
	lx_send_json(c, s.data);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = SPI_prepare(query, 0, NULL);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	if (list_length(SPI_plan_get_plan_sources(plan)) != 1 || !SPI_is_cursor_plan(plan))
		ereport(ERROR, (errcode(ERRCODE_WRONG_OBJECT_TYPE), errmsg("the training source must be one SELECT")));
	memset(&opts, 0, sizeof(opts));
	opts.read_only = true;
	opts.dest = (DestReceiver *) &r;
	SPI_execute_plan_extended(plan, &opts);
	SPI_finish();
	AtEOXact_GUC(true, nest);
	rows_flush(&r);
	if (r.rowcxt != NULL)
		MemoryContextDelete(r.rowcxt);
	if (r.reply != NULL)
		return r.reply;
	lx_send_json(c, psprintf("{\"end\": {\"pass\": %d, \"rows\": " UINT64_FORMAT ", \"skipped\": " UINT64_FORMAT
						  ", \"form\": \"%s\"}}", pass, r.rows, r.skipped, r.array_form ? "array" : "scalars"));
	return NULL;
}
