/*
 * pages.c: the page path, heap pages of a relation and its inheritors.
 *
 * PostgreSQL decides which tuples the caller's snapshot sees; each page holding one is copied
 * once from the buffer into the ring, the others' line pointers marked unused.
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"

#include "learnedidx.h"

static bool
scalar_decodable(Oid t)
{
	return t == INT2OID || t == INT4OID || t == INT8OID || t == FLOAT4OID || t == FLOAT8OID || t == OIDOID ||
		t == BOOLOID;
}

static bool
array_decodable(Oid t)
{
	return t == INT2ARRAYOID || t == INT4ARRAYOID || t == INT8ARRAYOID || t == FLOAT4ARRAYOID ||
		t == FLOAT8ARRAYOID;
}

/*
 * Check that the caller may read `columns` of `relid` and whether the page path can: NULL when
 * it can, else why not (then the query path reads it).  Privilege errors, missing columns and an
 * unpopulated materialized view are errors, as for the SELECT the query path would run.
 */
const char *
lx_page_source(Oid relid, ArrayType *columns, PageSource *ps)
{
	Relation	rel;
	Datum	   *names;
	bool	   *nulls;
	int			n,
				i;
	char		relkind;
	ListCell   *lc;
	const char *why = NULL;
	int			arrays = 0;

	rel = try_table_open(relid, AccessShareLock);
	if (rel == NULL)			/* a regclass argument may hold any OID */
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE), errmsg("relation with OID %u does not exist", relid)));
	relkind = rel->rd_rel->relkind;
	if (relkind != RELKIND_RELATION && relkind != RELKIND_MATVIEW && relkind != RELKIND_PARTITIONED_TABLE)
	{
		table_close(rel, NoLock);
		return "the source is not a table or materialized view";
	}
	deconstruct_array(columns, TEXTOID, -1, false, TYPALIGN_INT, &names, &nulls, &n);
	if (n < 1)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("no columns to read")));
	ps->relid = relid;
	ps->ncols = n;
	ps->names = palloc(sizeof(char *) * n);
	ps->types = palloc(sizeof(Oid) * n);
	for (i = 0; i < n; i++)
	{
		AttrNumber	att;

		if (nulls[i])
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("column names must not be NULL")));
		ps->names[i] = TextDatumGetCString(names[i]);
		att = get_attnum(relid, ps->names[i]);
		if (att <= 0)
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
							errmsg("column \"%s\" of relation \"%s\" does not exist", ps->names[i],
								   RelationGetRelationName(rel))));
		/* SELECT privilege on the table or on the column, as the SELECT's permission check */
		if (pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK &&
			pg_attribute_aclcheck(relid, att, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
			aclcheck_error(ACLCHECK_NO_PRIV, get_relkind_objtype(relkind), RelationGetRelationName(rel));
		ps->types[i] = getBaseType(get_atttype(relid, att));
		if (array_decodable(ps->types[i]))
			arrays++;
		else if (!scalar_decodable(ps->types[i]) && why == NULL)
			why = psprintf("column \"%s\" has type %s", ps->names[i], format_type_be(ps->types[i]));
	}
	if (relkind == RELKIND_MATVIEW && !RelationIsPopulated(rel))
		ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						errmsg("materialized view \"%s\" has not been populated", RelationGetRelationName(rel)),
						errhint("Use the REFRESH MATERIALIZED VIEW command.")));
	if (why == NULL && check_enable_rls(relid, InvalidOid, true) == RLS_ENABLED)
		why = "row-level security applies to the caller";
	if (why == NULL && (array_decodable(ps->types[0]) || arrays > 1 || (arrays == 1 && n > 2)))
		why = "the page reader reads a numeric label with numeric columns or one array column";
	table_close(rel, NoLock);
	if (why != NULL)
		return why;

	/* SELECT on a parent reads its inheritors and partitions; their own privileges are not
	 * checked (nor their policies applied), as in PostgreSQL. */
	ps->rels = NIL;
	foreach(lc, find_all_inheritors(relid, AccessShareLock, NULL))
	{
		Oid			child = lfirst_oid(lc);
		Relation	r = table_open(child, NoLock);

		if (r->rd_rel->relkind == RELKIND_FOREIGN_TABLE)
			why = psprintf("\"%s\" is a foreign table", RelationGetRelationName(r));
		else if (RELKIND_HAS_STORAGE(r->rd_rel->relkind))
		{
			if (r->rd_rel->relam != HEAP_TABLE_AM_OID)
				why = psprintf("\"%s\" does not use the heap table access method", RelationGetRelationName(r));
			for (i = 0; i < n && why == NULL; i++)
			{
				AttrNumber	att = get_attnum(child, ps->names[i]);

				if (TupleDescAttr(RelationGetDescr(r), att - 1)->atthasmissing && array_decodable(ps->types[i]))
					why = psprintf("array column \"%s\" of \"%s\" was added with a default", ps->names[i],
								   RelationGetRelationName(r));
			}
			ps->rels = lappend_oid(ps->rels, child);
		}
		table_close(r, NoLock);
		if (why != NULL)
			return why;
	}
	return NULL;
}

/* The layout of one relation of the stream, as JSON: its name, its number of blocks, the wanted
 * columns (attnum, base type, the value rows stored before the column was added have (NULL
 * unless atthasmissing), name) and
 * the length and alignment of every attribute up to the last wanted one (dropped ones too). */
char *
lx_relation_layout(Relation rel, PageSource *ps, BlockNumber nblocks)
{
	TupleDesc	desc = RelationGetDescr(rel);
	StringInfoData s;
	int			i,
				last = 0;

	initStringInfo(&s);
	appendStringInfoString(&s, "{\"relation\": {\"name\": ");
	escape_json(&s, quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
											   RelationGetRelationName(rel)));
	appendStringInfo(&s, ", \"blocks\": %u, \"columns\": [", nblocks);
	for (i = 0; i < ps->ncols; i++)
	{
		AttrNumber	att = get_attnum(RelationGetRelid(rel), ps->names[i]);
		Form_pg_attribute a = TupleDescAttr(desc, att - 1);

		last = Max(last, att);
		appendStringInfo(&s, "%s[%d, %u, ", i ? ", " : "", att, ps->types[i]);
		if (a->atthasmissing)
		{
			bool		isnull;
			Datum		d = getmissingattr(desc, att, &isnull);

			if (isnull)
				appendStringInfoString(&s, "null");
			else
			{
				double		v;

				switch (ps->types[i])
				{
					case INT2OID: v = DatumGetInt16(d); break;
					case INT4OID: v = DatumGetInt32(d); break;
					case INT8OID: v = (double) DatumGetInt64(d); break;
					case FLOAT4OID: v = DatumGetFloat4(d); break;
					case OIDOID: v = DatumGetObjectId(d); break;
					case BOOLOID: v = DatumGetBool(d); break;
					default: v = DatumGetFloat8(d); break;
				}
				if (isnan(v))
					appendStringInfoString(&s, "NaN");
				else if (isinf(v))
					appendStringInfoString(&s, v > 0 ? "Infinity" : "-Infinity");
				else
					appendStringInfo(&s, "%.17g", v);
			}
		}
		else
			appendStringInfoString(&s, "null");
		appendStringInfoString(&s, ", ");
		escape_json(&s, ps->names[i]);
		appendStringInfoChar(&s, ']');
	}
	appendStringInfoString(&s, "], \"attrs\": [");
	for (i = 0; i < last; i++)
	{
		Form_pg_attribute a = TupleDescAttr(desc, i);

		appendStringInfo(&s, "%s[%d, %d]", i ? ", " : "", a->attlen,
						 a->attalign == TYPALIGN_DOUBLE ? 8 : a->attalign == TYPALIGN_INT ? 4 :
						 a->attalign == TYPALIGN_SHORT ? 2 : 1);
	}
	appendStringInfoString(&s, "]}}");
	return s.data;
}

/* In our copy of a page, mark the normal line pointers the snapshot does not see as unused, so
 * that the server decodes exactly the visible tuples (vis: ascending offsets). */
static void
hide_invisible(Page page, const OffsetNumber *vis, int nvis)
{
	OffsetNumber max = PageGetMaxOffsetNumber(page);
	OffsetNumber off;
	int			v = 0;

	for (off = FirstOffsetNumber; off <= max; off++)
	{
		ItemId		id = PageGetItemId(page, off);

		if (v < nvis && vis[v] == off)
			v++;
		else if (ItemIdIsNormal(id))
			ItemIdSetUnused(id);
	}
}

/* Copy the page heapgetpage just read (its visible tuples in rs_vistuples) into dst, under the
 * buffer's share lock, hiding the tuples the snapshot does not see; its visible tuples. */
uint32
lx_copy_page(char *dst, TableScanDesc scan)
{
	HeapScanDesc hs = (HeapScanDesc) scan;

	LockBuffer(hs->rs_cbuf, BUFFER_LOCK_SHARE);
	memcpy(dst, BufferGetPage(hs->rs_cbuf), BLCKSZ);
	LockBuffer(hs->rs_cbuf, BUFFER_LOCK_UNLOCK);
	hide_invisible((Page) dst, hs->rs_vistuples, hs->rs_ntuples);
	return (uint32) hs->rs_ntuples;
}

double
lx_seconds(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The `end` frame of a page pass: its visible tuples and each producer's time (the parallel
 * workers', or the backend's). */
char *
lx_pass_end(int pass, uint64 tuples, const ProducerTime *times, int n, bool workers)
{
	StringInfoData s;
	int			i;

	initStringInfo(&s);
	appendStringInfo(&s, "{\"end\": {\"pass\": %d, \"rows\": " UINT64_FORMAT ", \"workers\": %d, \"producers\": [",
					 pass, tuples, workers ? n : 0);
	for (i = 0; i < n; i++)
		appendStringInfo(&s, "%s[%.6f, %.6f]", i ? ", " : "", times[i].busy, times[i].cpu);
	appendStringInfoString(&s, "]}}");
	return s.data;
}

/* Pass `pass` over the relations' heap pages: each page with a tuple the snapshot sees is copied
 * once, from the buffer into a slot of the ring (under the buffer's share lock), with the line
 * pointers of the tuples the snapshot does not see marked unused.  When the server says the
 * rows' order does not matter (`any_order`), parallel workers read them if PostgreSQL's settings
 * give any (parallel.c); else this backend.  Returns the server's reply when it ended the call,
 * else NULL. */
char *
lx_stream_pages(Conn *c, PageSource *ps, int pass, bool any_order)
{
	uint32		per_slot;
	uint32	   *blocks;
	uint64		tuples = 0;
	ListCell   *lc;
	ProducerTime t;
	double		t0,
				cpu0,
				waited = 0;
	int			nworkers;

	if (c->ring.base == NULL)
		lx_proto_fail(c, "the server asked for data without a ring");
	nworkers = any_order ? lx_parallel_plan(c, ps) : 0;
	if (nworkers > 0)
	{
		bool		done;
		char	   *reply = lx_stream_pages_parallel(c, ps, pass, nworkers, &done);

		if (done)
			return reply;
	}
	t0 = lx_seconds(CLOCK_MONOTONIC);
	cpu0 = lx_seconds(CLOCK_THREAD_CPUTIME_ID);
	per_slot = c->ring.slot_bytes / BLCKSZ;
	blocks = palloc(sizeof(uint32) * per_slot);
	lx_send_json(c, psprintf("{\"begin\": {\"pass\": %d, \"reader\": \"pages\"}}", pass));
	foreach(lc, ps->rels)
	{
		Relation	rel = table_open(lfirst_oid(lc), NoLock);	/* locked by page_source */
		TableScanDesc scan = table_beginscan_strat(rel, GetActiveSnapshot(), 0, NULL, true, false);
		HeapScanDesc hs = (HeapScanDesc) scan;
		BlockNumber blk;
		int			slot = -1;
		uint32		count = 0,
					in_slot = 0;

		lx_send_json(c, lx_relation_layout(rel, ps, hs->rs_nblocks));
		for (blk = 0; blk < hs->rs_nblocks; blk++)
		{
			uint32		n;

			CHECK_FOR_INTERRUPTS(); /* a cancel must not wait for the end of a long scan */
			heapgetpage(scan, blk); /* visibility: PostgreSQL's, into rs_vistuples */
			if (hs->rs_ntuples == 0)
				continue;
			if (slot < 0)
			{
				double		w = lx_seconds(CLOCK_MONOTONIC);

				slot = lx_ring_acquire(c);
				waited += lx_seconds(CLOCK_MONOTONIC) - w;
				if (slot < 0)
					break;
				count = in_slot = 0;
			}
			n = lx_copy_page(lx_ring_slot(c, slot) + (size_t) count * BLCKSZ, scan);
			tuples += n;
			in_slot += n;
			blocks[count++] = blk;
			if (count == per_slot)
			{
				if (!lx_ring_submit(c, slot, SLOT_PAGES, count, in_slot, blocks))
					break;
				slot = -1;
			}
		}
		if (slot >= 0 && count > 0 && c->reply == NULL)
			lx_ring_submit(c, slot, SLOT_PAGES, count, in_slot, blocks);
		table_endscan(scan);
		table_close(rel, NoLock);
		if (c->reply != NULL)
			return c->reply;
	}
	t.busy = lx_seconds(CLOCK_MONOTONIC) - t0 - waited;
	t.cpu = lx_seconds(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	lx_send_json(c, lx_pass_end(pass, tuples, &t, 1, false));
	pfree(blocks);
	return NULL;
}
