/*
 * offload.c: learnedidx._offload, a request to the server and the passes over the data it asks for.
 *
 * The page path (pages.c) when it can read the source, else the query path (rows.c).
 */
#include "postgres.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"

#include "learnedidx.h"

PG_FUNCTION_INFO_V1(learnedidx_offload);

/*
 * learnedidx._offload(op text, args jsonb, source regclass, columns text[], query text,
 *                     search_path text) RETURNS text
 *
 * Sends {"op": op, "id": 1, "args": args} (op: indb.train or indb.register) and serves the
 * server's requests for passes over the data: the page path over `source`'s `columns` when it
 * can read them, else the query path over `query` (evaluated with `search_path`).  Returns the
 * server's final reply.  Safe whatever a caller passes: it takes no identity and no connection
 * target, and checks the caller's privileges itself.
 */
Datum
learnedidx_offload(PG_FUNCTION_ARGS)
{
	char	   *op = PG_ARGISNULL(0) ? "" : text_to_cstring(PG_GETARG_TEXT_PP(0));
	Jsonb	   *args = PG_ARGISNULL(1) ? NULL : PG_GETARG_JSONB_P(1);
	char	   *query = PG_ARGISNULL(4) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(4));
	char	   *search_path = PG_ARGISNULL(5) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(5));
	PageSource	ps;
	const char *why = NULL;
	bool		pages = false;
	Conn		conn;
	char	   *volatile reply = NULL;
	StringInfoData req;

	if (strcmp(op, "indb.train") != 0 && strcmp(op, "indb.register") != 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("unknown operation \"%s\"", op)));
	if (args == NULL || !JB_ROOT_IS_OBJECT(args))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("args must be a JSON object")));
	if (!PG_ARGISNULL(2))
	{
		if (PG_ARGISNULL(3))
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("the page reader needs columns")));
		why = lx_page_source(PG_GETARG_OID(2), PG_GETARG_ARRAYTYPE_P(3), &ps);
		if (why != NULL && query == NULL)
			ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							errmsg("the page reader cannot read %s: %s", get_rel_name(PG_GETARG_OID(2)), why)));
		pages = why == NULL;
	}
	initStringInfo(&req);
	appendStringInfoString(&req, "{\"op\": ");
	escape_json(&req, op);
	appendStringInfoString(&req, ", \"id\": 1, \"args\": ");
	(void) JsonbToCString(&req, &args->root, VARSIZE(args));
	appendStringInfoString(&req, "}");

	memset(&conn, 0, sizeof(conn));
	conn.passed_fd = -1;
	conn.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (conn.fd < 0)
		ereport(ERROR, (errcode_for_socket_access(), errmsg("cannot create a socket: %m")));
	PG_TRY();
	{
		lx_conn_open(&conn);
		lx_send_json(&conn, req.data);
		while (reply == NULL)
		{
			int			flags;
			uint32		len;
			char	   *frame = lx_read_frame(&conn, &flags, &len, -1);

			if (frame == NULL)
				lx_conn_fail(&conn, "the server closed the connection mid-request");
			if (flags == LX_JSON)
				reply = frame;
			else if (flags == LX_CONTROL && len >= 12 && frame[0] == 'M')
				lx_ring_map(&conn, frame, len);
			else if (flags == LX_CONTROL && len >= 8 && frame[0] == 'F')
				lx_ring_free(&conn, frame);
			else if (flags == LX_CONTROL && len >= 8 && frame[0] == 'S')
			{
				int			pass = (int) lx_get_u32be(frame + 4);

				if ((frame[1] & READ_QUERY) && pages)
				{
					if (query == NULL)
						ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
										errmsg("the page reader cannot read %s: %s",
											   get_rel_name(ps.relid), frame + 8)));
					pages = false;
					why = pstrdup(frame + 8);
				}
				if (pages)
					reply = lx_stream_pages(&conn, &ps, pass, (frame[1] & READ_ANY_ORDER) != 0);
				else if (query != NULL)
					reply = lx_stream_query(&conn, query, search_path, pass, why);
				else
					lx_proto_fail(&conn, "the server asked for data this call has none of");
			}
			else
				lx_proto_fail(&conn, "unexpected frame");
		}
	}
	PG_FINALLY();
	{
		close(conn.fd);
		if (conn.passed_fd >= 0)
			close(conn.passed_fd);
		if (conn.ring.base != NULL)
			munmap(conn.ring.base, conn.ring.size);
	}
	PG_END_TRY();
	PG_RETURN_TEXT_P(cstring_to_text(reply));
}
