/*
 * shards.c: learnedidx._shard_states, a training call's per-shard work run on the shards of a
 * partitioned table whose partitions are postgres_fdw foreign tables, through postgres_fdw's own
 * connections.
 *
 * postgres_fdw does everything a foreign scan of the partition would do: it picks the user
 * mapping of the caller (or PUBLIC), checks it as it checks it for a scan (a password for a
 * non-superuser), opens or reuses the session's connection to the server, runs the remote query
 * in its remote transaction (REPEATABLE READ, the snapshot every foreign scan of the caller's
 * transaction shares), waits for it interruptibly, and on an error or a cancel cancels the
 * remote query and aborts the remote transaction.  So a shard reads its rows as the mapped role,
 * with the remote side's privileges and row-level security, exactly what a SELECT through
 * postgres_fdw would return; nothing but the call's request and the shard's reply (statistics,
 * never rows) crosses the network.
 *
 * The remote call names only the table and columns the foreign table's options name (never an
 * expression of the caller's), and the caller must hold what a SELECT of those columns of the
 * partitioned table needs here (a partition's own privileges are not checked, as in
 * PostgreSQL); a partitioned table with row-level security for the caller is refused, its
 * policies could not apply on the shards.
 *
 * postgres_fdw's functions are looked up in its module at the first call (the extension does
 * not need postgres_fdw otherwise); their signatures are PostgreSQL 15's.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_proc.h"
#include "commands/defrem.h"
#include "foreign/foreign.h"
#include "libpq-fe.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/rls.h"
#include "utils/syscache.h"

#include "learnedidx.h"

PG_FUNCTION_INFO_V1(learnedidx_shard_states);

/* postgres_fdw.h (PostgreSQL 15): the connection state is opaque here but for its first field. */
typedef struct PgFdwConnState
{
	void	   *pendingAreq;
} PgFdwConnState;

typedef PGconn *(*GetConnection_t) (UserMapping *user, bool will_prep_stmt, PgFdwConnState **state);
typedef void (*ReleaseConnection_t) (PGconn *conn);
typedef PGresult *(*pgfdw_exec_query_t) (PGconn *conn, const char *query, PgFdwConnState *state);
typedef PGresult *(*pgfdw_get_result_t) (PGconn *conn, const char *query);
typedef void (*pgfdw_report_error_t) (int elevel, PGresult *res, PGconn *conn, bool clear, const char *sql);
typedef void (*process_pending_request_t) (void *areq);

static struct
{
	GetConnection_t get_connection;
	ReleaseConnection_t release_connection;
	pgfdw_exec_query_t exec_query;
	pgfdw_get_result_t get_result;
	pgfdw_report_error_t report_error;
	process_pending_request_t process_pending;
}			fdw;

static void
load_fdw(void)
{
	const char *lib = "$libdir/postgres_fdw";

	if (fdw.get_connection != NULL)
		return;
	fdw.release_connection = (ReleaseConnection_t) load_external_function(lib, "ReleaseConnection", true, NULL);
	fdw.exec_query = (pgfdw_exec_query_t) load_external_function(lib, "pgfdw_exec_query", true, NULL);
	fdw.get_result = (pgfdw_get_result_t) load_external_function(lib, "pgfdw_get_result", true, NULL);
	fdw.report_error = (pgfdw_report_error_t) load_external_function(lib, "pgfdw_report_error", true, NULL);
	fdw.process_pending = (process_pending_request_t) load_external_function(lib, "process_pending_request", true,
																			  NULL);
	fdw.get_connection = (GetConnection_t) load_external_function(lib, "GetConnection", true, NULL);
}

/* One shard's call: its connection, the remote statement, its reply. */
typedef struct Shard
{
	Oid			relid;
	char	   *server;
	PGconn	   *conn;
	PgFdwConnState *state;
	char	   *sql;
	char	   *reply;
}			Shard;

static char *
option(List *options, const char *name, char *otherwise)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *d = (DefElem *) lfirst(lc);

		if (strcmp(d->defname, name) == 0)
			return defGetString(d);
	}
	return otherwise;
}

/* The caller's SELECT on `columns` of the partitioned table `parent`, as a SELECT's check. */
static void
check_parent(Oid parent, Datum *names, int n)
{
	int			i;

	LockRelationOid(parent, AccessShareLock);	/* as a SELECT of it: no DROP meanwhile */
	if (get_rel_relkind(parent) != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR, (errcode(ERRCODE_WRONG_OBJECT_TYPE),
						errmsg("\"%s\" is not a partitioned table", get_rel_name(parent))));
	for (i = 0; i < n; i++)
	{
		char	   *name = TextDatumGetCString(names[i]);
		AttrNumber	att = get_attnum(parent, name);

		if (att <= 0)
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
							errmsg("column \"%s\" of relation \"%s\" does not exist", name, get_rel_name(parent))));
		if (pg_class_aclcheck(parent, GetUserId(), ACL_SELECT) != ACLCHECK_OK &&
			pg_attribute_aclcheck(parent, att, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
			aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, get_rel_name(parent));
	}
	if (check_enable_rls(parent, InvalidOid, false) == RLS_ENABLED)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("row-level security of \"%s\" cannot apply on its shards", get_rel_name(parent))));
}

/* The remote statement of partition `part`: learnedidx._shard_state on the remote table and its
 * columns the foreign table's options name. */
static void
prepare_shard(Shard *s, Oid parent, Oid part, Datum *names, int n, text *request)
{
	ForeignTable *ft;
	ForeignServer *server;
	ForeignDataWrapper *wrapper;
	UserMapping *um;
	StringInfoData sql;
	char	   *lit;
	int			i;

	LockRelationOid(part, AccessShareLock);
	if (!list_member_oid(get_partition_ancestors(part), parent))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("\"%s\" is not a partition of \"%s\"", get_rel_name(part), get_rel_name(parent))));
	if (get_rel_relkind(part) != RELKIND_FOREIGN_TABLE)
		ereport(ERROR, (errcode(ERRCODE_WRONG_OBJECT_TYPE), errmsg("\"%s\" is not a foreign table", get_rel_name(part))));
	ft = GetForeignTable(part);
	server = GetForeignServer(ft->serverid);
	wrapper = GetForeignDataWrapper(server->fdwid);
	/* a handler of that name is postgres_fdw's: C functions are made by superusers only */
	if (!OidIsValid(wrapper->fdwhandler) || strcmp(get_func_name(wrapper->fdwhandler), "postgres_fdw_handler") != 0)
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("partition \"%s\" is not a postgres_fdw foreign table", get_rel_name(part))));
	s->relid = part;
	s->server = server->servername;

	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT learnedidx._shard_state(");
	lit = quote_literal_cstr(text_to_cstring(request));
	appendStringInfo(&sql, "%s::pg_catalog.jsonb, ", lit);
	appendStringInfo(&sql, "%s, ", quote_literal_cstr(option(ft->options, "schema_name",
															 get_namespace_name(get_rel_namespace(part)))));
	appendStringInfo(&sql, "%s, ARRAY[", quote_literal_cstr(option(ft->options, "table_name", get_rel_name(part))));
	for (i = 0; i < n; i++)
	{
		char	   *name = TextDatumGetCString(names[i]);
		AttrNumber	att = get_attnum(part, name);

		if (att <= 0)
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
							errmsg("column \"%s\" of relation \"%s\" does not exist", name, get_rel_name(part))));
		appendStringInfo(&sql, "%s%s", i ? ", " : "",
						 quote_literal_cstr(option(GetForeignColumnOptions(part, att), "column_name", name)));
	}
	appendStringInfoString(&sql, "]::pg_catalog.text[])");
	s->sql = sql.data;

	um = GetUserMapping(GetUserId(), server->serverid);
	s->conn = fdw.get_connection(um, false, &s->state);
}

/* Refuses (0A000) a shard without the extension, or with another version of it. */
static void
check_extension(Shard *s, const char *version)
{
	const char *q = "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'learnedidx'";
	PGresult   *res = fdw.exec_query(s->conn, q, s->state);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		fdw.report_error(ERROR, res, s->conn, true, q);
	if (PQntuples(res) != 1 || strcmp(PQgetvalue(res, 0, 0), version) != 0)
	{
		char	   *theirs = PQntuples(res) == 1 ? pstrdup(PQgetvalue(res, 0, 0)) : NULL;

		PQclear(res);
		if (theirs == NULL)
			ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							errmsg("shard server \"%s\" (partition \"%s\") has no learnedidx extension", s->server,
								   get_rel_name(s->relid)),
							errhint("CREATE EXTENSION learnedidx in the shard's database, with its own accelerator "
									"server, or read the partitions' rows with reader => 'query'.")));
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						errmsg("shard server \"%s\" has learnedidx %s, this database %s", s->server, theirs, version)));
	}
	PQclear(res);
}

/* Sends shard s's statement (its connection idle). */
static void
send_shard(Shard *s)
{
	if (s->state != NULL && s->state->pendingAreq != NULL)
		fdw.process_pending(s->state->pendingAreq);
	if (!PQsendQuery(s->conn, s->sql))
		fdw.report_error(ERROR, NULL, s->conn, false, s->sql);
}

static void
receive_shard(Shard *s)
{
	PGresult   *res = fdw.get_result(s->conn, s->sql);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		fdw.report_error(ERROR, res, s->conn, true, s->sql);
	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
	{
		PQclear(res);
		ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
						errmsg("shard server \"%s\" returned no state", s->server)));
	}
	s->reply = pstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
}

/*
 * learnedidx._shard_states(parent regclass, parts regclass[], columns text[], requests jsonb[],
 *                          version text) RETURNS text[]
 *
 * Runs learnedidx._shard_state(requests[i], remote table, remote columns) on the shard of each
 * foreign partition parts[i] of `parent` (columns: the parent's, mapped to the remote names),
 * all shards at once (partitions on one connection in turn), and returns their replies.
 */
Datum
learnedidx_shard_states(PG_FUNCTION_ARGS)
{
	Oid			parent = PG_GETARG_OID(0);
	Datum	   *parts,
			   *names,
			   *requests,
			   *out;
	bool	   *nulls;
	int			nparts,
				ncols,
				nreq,
				i,
				done = 0;
	char	   *version = text_to_cstring(PG_GETARG_TEXT_PP(4));
	Shard	   *shards;
	bool	   *sent;

	deconstruct_array(PG_GETARG_ARRAYTYPE_P(1), REGCLASSOID, sizeof(Oid), true, TYPALIGN_INT, &parts, &nulls, &nparts);
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(2), TEXTOID, -1, false, TYPALIGN_INT, &names, &nulls, &ncols);
	for (i = 0; i < ncols; i++)
		if (nulls[i])
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("column names must not be NULL")));
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(3), JSONBOID, -1, false, TYPALIGN_INT, &requests, &nulls, &nreq);
	if (nreq != nparts)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("one request per partition")));
	check_parent(parent, names, ncols);
	load_fdw();

	shards = palloc0(sizeof(Shard) * nparts);
	sent = palloc0(sizeof(bool) * nparts);
	for (i = 0; i < nparts; i++)
	{
		Jsonb	   *req = DatumGetJsonbP(requests[i]);

		prepare_shard(&shards[i], parent, DatumGetObjectId(parts[i]), names, ncols,
					  cstring_to_text(JsonbToCString(NULL, &req->root, VARSIZE(req))));
		check_extension(&shards[i], version);
	}
	/* Rounds: each sends the next statement of every connection, then waits for them all. */
	while (done < nparts)
	{
		List	   *busy = NIL;
		List	   *round = NIL;
		ListCell   *lc;

		for (i = 0; i < nparts; i++)
			if (!sent[i] && !list_member_ptr(busy, shards[i].conn))
			{
				busy = lappend(busy, shards[i].conn);
				round = lappend_int(round, i);
				sent[i] = true;
				send_shard(&shards[i]);
			}
		foreach(lc, round)
		{
			receive_shard(&shards[lfirst_int(lc)]);
			done++;
		}
	}
	out = palloc(sizeof(Datum) * nparts);
	for (i = 0; i < nparts; i++)
	{
		out[i] = CStringGetTextDatum(shards[i].reply);
		fdw.release_connection(shards[i].conn);
	}
	PG_RETURN_ARRAYTYPE_P(construct_array(out, nparts, TEXTOID, -1, false, TYPALIGN_INT));
}
