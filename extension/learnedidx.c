/*
 * learnedidx.c: the native part of the learnedidx extension.
 *
 * Everything here runs in the caller's backend, in the caller's statement, as the caller:
 *
 *   _PG_init       defines learnedidx.socket (PGC_SUSET: only superusers say where the server is).
 *   _offload       connects to the accelerator server, sends a request and streams the caller's
 *                  data as the server asks for passes, then returns the server's reply (JSON text).
 *                  The page path sends heap pages of a relation and its inheritors, PostgreSQL
 *                  having decided which tuples the caller's snapshot sees; the query path runs an
 *                  SPI query (read-only, the caller's snapshot and search_path) and sends its rows
 *                  as float8.  The server never connects to PostgreSQL.
 *   predict        scores feature vectors against a model table, read once per query (a model
 *   predict_proba  trained with grouping_cols: the group's row, picked by the group's values);
 *                  reading a model runs no code of its owner's.
 *   linregr_predict, logregr_predict, logregr_predict_prob: MADlib's, over coefficients.
 *
 * The wire format is docs/protocol.md's (frames of learnedidx.server.protocol; the stream frames
 * of an indb.train call); tests/indb/test_extension_sql.py checks the constants below against
 * the Python originals.
 */
#include "postgres.h"

#include <fcntl.h>
#include <math.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/latch.h"
#include "tcop/dest.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/typcache.h"
#include "utils/wait_event.h"

PG_MODULE_MAGIC;

/* learnedidx.server.protocol: frame header ">2sBBI" (magic, version, flags, payload length). */
#define LX_MAGIC "LX"
#define LX_VERSION 2
#define LX_HEADER 8
#define LX_JSON 0				/* flags: a JSON object */
#define LX_DATA 1				/* flags: a binary data frame of the stream */
#define LX_CONTROL 2			/* flags: a binary control frame of the stream */
#define LX_MAX_REPLY (64 << 20) /* protocol.DEFAULT_MAX_MESSAGE */
#define HELLO_TIMEOUT_MS 5000

/* Control frame payloads (learnedidx.server.stream):
 *   'S', reader (READ_AS_CHOSEN | READ_QUERY), 2 bytes padding, pass u32, then why (text):
 *        stream pass `pass` over the data;
 *   'M', 3 bytes padding, slots u32, slot bytes u32, with a file descriptor (SCM_RIGHTS): the
 *        ring, a memfd the server sealed against shrinking, which the data travel through;
 *   'F', 3 bytes padding, slot u32: the server is done with that slot of the ring.
 * The data frame of a filled slot: 'K', kind (SLOT_PAGES | SLOT_ROWS), 2 bytes padding, slot
 * u32, count u32 (pages or rows), extra u32 (visible tuples, or float8 per row), then for pages
 * the block numbers (u32 each). */
#define READ_AS_CHOSEN 0
#define READ_QUERY 1
#define SLOT_PAGES 'P'
#define SLOT_ROWS 'R'
#define SLOT_HEADER 16
#define RING_MAX_SLOTS 64
#define RING_MAX_SLOT_BYTES (16 << 20)

static char *socket_path = NULL;

void		_PG_init(void);

/* ---------------------------------------------------------------- the server's socket */

/* learnedidx.server.protocol.default_socket_path(), in the backend's environment. */
static char *
default_socket_path(void)
{
	const char *env = getenv("LEARNEDIDX_SOCKET");
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	char	   *path;

	if (env && *env)
		path = pstrdup(env);
	else if (xdg && *xdg)
	{
		size_t		n = strlen(xdg);

		while (n > 1 && xdg[n - 1] == '/')
			n--;
		path = psprintf("%.*s/learnedidx/accel.sock", (int) n, xdg);
	}
	else
		path = psprintf("/tmp/learnedidx-%d/accel.sock", (int) getuid());
	return MemoryContextStrdup(TopMemoryContext, path);
}

void
_PG_init(void)
{
	DefineCustomStringVariable("learnedidx.socket",
							   "Unix socket of the learnedidx accelerator server.",
							   "Only superusers set it; unset, the server's default path rule applies.",
							   &socket_path, default_socket_path(), PGC_SUSET, 0, NULL, NULL, NULL);
}

/* The ring: the server's shared memory the data travel through, mapped here (no copy of the
 * data crosses the socket).  The backend fills a free slot and names it in a 'K' frame; the
 * server decodes it and frees it with an 'F' frame. */
typedef struct Ring
{
	char	   *base;			/* mapped; NULL until the server sends it */
	size_t		size;
	uint32		nslots;
	uint32		slot_bytes;
	bool		busy[RING_MAX_SLOTS];	/* filled and not yet freed by the server */
} Ring;

typedef struct Conn
{
	pgsocket	fd;
	const char *path;
	int			passed_fd;		/* a descriptor the server sent (SCM_RIGHTS), -1 when none */
	Ring		ring;
	char	   *reply;			/* the server's reply, when it ended the call while we stream */
} Conn;

static void
conn_fail(Conn *c, const char *what)
{
	ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
					errmsg("learnedidx accelerator server at %s: %s", c->path, what),
					errhint("Start it with: learnedidx server start --socket %s", c->path)));
}

/* The peer broke the protocol (learnedidx.errors.ProtocolError's SQLSTATE). */
static void
proto_fail(Conn *c, const char *what)
{
	ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
					errmsg("learnedidx accelerator server at %s: %s", c->path, what)));
}

/* Wait until the socket is ready for `event` (or timeout_ms passes; -1: no timeout), serving
 * cancel requests, statement_timeout and postmaster death meanwhile.  False on timeout. */
static bool
conn_wait(Conn *c, int event, long timeout_ms)
{
	int			rc;

	rc = WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | event | (timeout_ms >= 0 ? WL_TIMEOUT : 0),
						   c->fd, timeout_ms, PG_WAIT_EXTENSION);
	if (rc & WL_LATCH_SET)
		ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	return (rc & WL_TIMEOUT) == 0;
}

static void
conn_write(Conn *c, const char *buf, size_t len)
{
	while (len > 0)
	{
		ssize_t		n = send(c->fd, buf, len, MSG_NOSIGNAL);

		if (n > 0)
		{
			buf += n;
			len -= n;
		}
		else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			conn_wait(c, WL_SOCKET_WRITEABLE, -1);
		else
			conn_fail(c, "the connection closed while sending");
	}
}

/* Keep the descriptor a message carries (the ring's memory); refuse anything else. */
static void
take_descriptor(Conn *c, struct msghdr *msg)
{
	struct cmsghdr *cm;

	for (cm = CMSG_FIRSTHDR(msg); cm != NULL; cm = CMSG_NXTHDR(msg, cm))
	{
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len == CMSG_LEN(sizeof(int)))
		{
			int			fd;

			memcpy(&fd, CMSG_DATA(cm), sizeof(int));
			if (c->passed_fd >= 0)
				close(c->passed_fd);
			c->passed_fd = fd;
		}
	}
	if (msg->msg_flags & MSG_CTRUNC)
		proto_fail(c, "the server sent more than one descriptor");
}

/* Read exactly len bytes; false when the peer closed the connection before the first byte. */
static bool
conn_read(Conn *c, char *buf, size_t len, long timeout_ms)
{
	size_t		got = 0;

	while (got < len)
	{
		union
		{
			char		buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		}			control;
		struct iovec iov = {buf + got, len - got};
		struct msghdr msg;
		ssize_t		n;

		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = control.buf;
		msg.msg_controllen = sizeof(control.buf);
		n = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC);
		if (n > 0)
			take_descriptor(c, &msg);
		if (n > 0)
			got += n;
		else if (n == 0)
		{
			if (got == 0)
				return false;
			conn_fail(c, "the connection closed mid-message");
		}
		else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		{
			if (!conn_wait(c, WL_SOCKET_READABLE, timeout_ms))
				conn_fail(c, "no answer (is it the learnedidx server?)");
		}
		else
			conn_fail(c, "the connection failed while receiving");
	}
	return true;
}

static void
put_u32be(char *p, uint32 v)
{
	p[0] = (char) (v >> 24);
	p[1] = (char) (v >> 16);
	p[2] = (char) (v >> 8);
	p[3] = (char) v;
}

static uint32
get_u32be(const char *p)
{
	const unsigned char *u = (const unsigned char *) p;

	return ((uint32) u[0] << 24) | ((uint32) u[1] << 16) | ((uint32) u[2] << 8) | u[3];
}

static void
frame_header(char *h, int flags, uint32 len)
{
	h[0] = LX_MAGIC[0];
	h[1] = LX_MAGIC[1];
	h[2] = LX_VERSION;
	h[3] = (char) flags;
	put_u32be(h + 4, len);
}

static void
send_json(Conn *c, const char *json)
{
	char		h[LX_HEADER];

	frame_header(h, LX_JSON, strlen(json));
	conn_write(c, h, LX_HEADER);
	conn_write(c, json, strlen(json));
}

/* One frame from the server: its flags and payload (NUL-terminated).  NULL at end of stream. */
static char *
read_frame(Conn *c, int *flags, uint32 *len, long timeout_ms)
{
	unsigned char h[LX_HEADER];
	char	   *payload;

	if (!conn_read(c, (char *) h, LX_HEADER, timeout_ms))
		return NULL;
	if (h[0] != LX_MAGIC[0] || h[1] != LX_MAGIC[1] || h[2] != LX_VERSION)
		proto_fail(c, "the socket does not speak the learnedidx protocol");
	*flags = h[3];
	*len = ((uint32) h[4] << 24) | ((uint32) h[5] << 16) | ((uint32) h[6] << 8) | h[7];
	if (*len > LX_MAX_REPLY)
		proto_fail(c, "a reply exceeds the protocol's size limit");
	payload = palloc(*len + 1);
	if (*len > 0 && !conn_read(c, payload, *len, timeout_ms))
		conn_fail(c, "the connection closed mid-message");
	payload[*len] = '\0';
	return payload;
}

/* Connect to the server: it must run as this backend's OS user and greet first (a socket that
 * waits for us to speak, such as PostgreSQL's own, is refused before we send a byte). */
static void
conn_open(Conn *c)
{
	struct sockaddr_un addr;
	struct ucred cred;
	socklen_t	credlen = sizeof(cred);
	int			flags;
	uint32		len;
	char	   *hello;

	c->path = (socket_path && *socket_path) ? socket_path : default_socket_path();
	if (strlen(c->path) >= sizeof(addr.sun_path))
		conn_fail(c, "the socket path is too long");
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	strlcpy(addr.sun_path, c->path, sizeof(addr.sun_path));
	if (connect(c->fd, (struct sockaddr *) &addr, sizeof(addr)) < 0)
	{
		int			err = errno;
		socklen_t	errlen = sizeof(err);

		/* a full listen backlog: wait for the server to accept */
		if ((err != EAGAIN && err != EINPROGRESS) || !conn_wait(c, WL_SOCKET_WRITEABLE, HELLO_TIMEOUT_MS) ||
			getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &errlen) < 0 || err != 0)
		{
			errno = err;
			conn_fail(c, psprintf("not reachable (%m)"));
		}
	}
	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &credlen) < 0 || cred.uid != geteuid())
		conn_fail(c, "the process listening there does not run as the database's OS user");
	hello = read_frame(c, &flags, &len, HELLO_TIMEOUT_MS);
	if (hello == NULL || flags != LX_JSON || strstr(hello, "\"hello\"") == NULL)
		proto_fail(c, "the socket does not speak the learnedidx protocol");
}

/* --------------------------------------------------------------------------- the page path */

typedef struct PageSource
{
	Oid			relid;			/* the relation named */
	List	   *rels;			/* it and its inheritors that have storage (Oids) */
	int			ncols;
	char	  **names;			/* wanted columns: label first */
	Oid		   *types;			/* base type of each */
} PageSource;

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
static const char *
page_source(Oid relid, ArrayType *columns, PageSource *ps)
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
static char *
relation_layout(Relation rel, PageSource *ps, BlockNumber nblocks)
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

/* Map the ring the server sent ('M' frame): its descriptor must be a memfd sealed against
 * shrinking, so that no truncation can fault the backend while it writes. */
static void
ring_map(Conn *c, const char *frame, uint32 len)
{
	uint32		nslots,
				slot_bytes;
	struct stat st;
	int			seals;
	char	   *base;

	if (len < 12)
		proto_fail(c, "a malformed ring frame");
	nslots = get_u32be(frame + 4);
	slot_bytes = get_u32be(frame + 8);
	if (c->passed_fd < 0)
		proto_fail(c, "a ring frame without its memory");
	if (c->ring.base != NULL)
		proto_fail(c, "a second ring");
	if (nslots < 1 || nslots > RING_MAX_SLOTS || slot_bytes < BLCKSZ || slot_bytes > RING_MAX_SLOT_BYTES ||
		slot_bytes % BLCKSZ != 0)
		proto_fail(c, "a ring of unsupported shape");
	if (fstat(c->passed_fd, &st) < 0 || st.st_size < (off_t) nslots * slot_bytes)
		proto_fail(c, "the ring's memory is smaller than the ring");
	seals = fcntl(c->passed_fd, F_GET_SEALS);
	if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
		proto_fail(c, "the ring's memory is not sealed against shrinking");
	base = mmap(NULL, (size_t) nslots * slot_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c->passed_fd, 0);
	if (base == MAP_FAILED)
		conn_fail(c, psprintf("cannot map the ring (%m)"));
	close(c->passed_fd);
	c->passed_fd = -1;
	c->ring.base = base;
	c->ring.size = (size_t) nslots * slot_bytes;
	c->ring.nslots = nslots;
	c->ring.slot_bytes = slot_bytes;
	memset(c->ring.busy, 0, sizeof(c->ring.busy));
}

/* An 'F' frame: the server is done with a slot. */
static void
ring_free(Conn *c, const char *frame)
{
	uint32		slot = get_u32be(frame + 4);

	if (c->ring.base == NULL || slot >= c->ring.nslots || !c->ring.busy[slot])
		proto_fail(c, "the server freed a slot it did not hold");
	c->ring.busy[slot] = false;
}

/* Handle one frame the server sends while data flow: 'F' frees a slot; a JSON frame is the
 * reply that ends the call (kept in c->reply).  `wait`: block for it, else only read one that
 * has arrived.  False when no frame was read. */
static bool
server_frame(Conn *c, bool wait)
{
	int			flags;
	uint32		len;
	char		b;
	char	   *frame;

	if (!wait && recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 1)
		return false;
	frame = read_frame(c, &flags, &len, -1);
	if (frame == NULL)
		conn_fail(c, "the server closed the connection mid-request");
	if (flags == LX_JSON)
	{
		c->reply = frame;
		return true;
	}
	if (flags == LX_CONTROL && len >= 8 && frame[0] == 'F')
	{
		ring_free(c, frame);
		pfree(frame);
		return true;
	}
	proto_fail(c, "unexpected frame while streaming");
	return false;
}

/* A free slot of the ring, waiting for the server to free one; -1 when the server ended the
 * call instead (its reply in c->reply). */
static int
ring_acquire(Conn *c)
{
	if (c->ring.base == NULL)
		proto_fail(c, "the server asked for data without a ring");
	while (c->reply == NULL)
	{
		uint32		i;

		for (i = 0; i < c->ring.nslots; i++)
			if (!c->ring.busy[i])
			{
				c->ring.busy[i] = true;
				return (int) i;
			}
		server_frame(c, true);
	}
	return -1;
}

static inline char *
ring_slot(Conn *c, int slot)
{
	return c->ring.base + (size_t) slot * c->ring.slot_bytes;
}

/* Hand a filled slot to the server ('K' frame; `blocks`: the pages' block numbers, or NULL) and
 * read what the server has sent meanwhile.  False when the server ended the call. */
static bool
ring_submit(Conn *c, int slot, char kind, uint32 count, uint32 extra, const uint32 *blocks)
{
	uint32		nb = blocks ? count : 0;
	char	   *f = palloc(LX_HEADER + SLOT_HEADER + 4 * nb);
	uint32		i;

	frame_header(f, LX_DATA, SLOT_HEADER + 4 * nb);
	memset(f + LX_HEADER, 0, SLOT_HEADER);
	f[LX_HEADER] = 'K';
	f[LX_HEADER + 1] = kind;
	put_u32be(f + LX_HEADER + 4, slot);
	put_u32be(f + LX_HEADER + 8, count);
	put_u32be(f + LX_HEADER + 12, extra);
	for (i = 0; i < nb; i++)
		put_u32be(f + LX_HEADER + SLOT_HEADER + 4 * i, blocks[i]);
	conn_write(c, f, LX_HEADER + SLOT_HEADER + 4 * nb);
	pfree(f);
	while (c->reply == NULL && server_frame(c, false))
		;
	return c->reply == NULL;
}

/* Pass `pass` over the relations' heap pages: each page with a tuple the snapshot sees is copied
 * once, from the buffer into a slot of the ring (under the buffer's share lock), with the line
 * pointers of the tuples the snapshot does not see marked unused.  Returns the server's reply
 * when it ended the call, else NULL. */
static char *
stream_pages(Conn *c, PageSource *ps, int pass)
{
	uint32		per_slot;
	uint32	   *blocks;
	uint64		tuples = 0;
	ListCell   *lc;

	if (c->ring.base == NULL)
		proto_fail(c, "the server asked for data without a ring");
	per_slot = c->ring.slot_bytes / BLCKSZ;
	blocks = palloc(sizeof(uint32) * per_slot);
	send_json(c, psprintf("{\"begin\": {\"pass\": %d, \"reader\": \"pages\"}}", pass));
	foreach(lc, ps->rels)
	{
		Relation	rel = table_open(lfirst_oid(lc), NoLock);	/* locked by page_source */
		TableScanDesc scan = table_beginscan_strat(rel, GetActiveSnapshot(), 0, NULL, true, false);
		HeapScanDesc hs = (HeapScanDesc) scan;
		BlockNumber blk;
		int			slot = -1;
		uint32		count = 0,
					in_slot = 0;

		send_json(c, relation_layout(rel, ps, hs->rs_nblocks));
		for (blk = 0; blk < hs->rs_nblocks; blk++)
		{
			char	   *dst;

			CHECK_FOR_INTERRUPTS(); /* a cancel must not wait for the end of a long scan */
			heapgetpage(scan, blk); /* visibility: PostgreSQL's, into rs_vistuples */
			if (hs->rs_ntuples == 0)
				continue;
			if (slot < 0)
			{
				if ((slot = ring_acquire(c)) < 0)
					break;
				count = in_slot = 0;
			}
			dst = ring_slot(c, slot) + (size_t) count * BLCKSZ;
			LockBuffer(hs->rs_cbuf, BUFFER_LOCK_SHARE);
			memcpy(dst, BufferGetPage(hs->rs_cbuf), BLCKSZ);
			LockBuffer(hs->rs_cbuf, BUFFER_LOCK_UNLOCK);
			hide_invisible((Page) dst, hs->rs_vistuples, hs->rs_ntuples);
			tuples += hs->rs_ntuples;
			in_slot += hs->rs_ntuples;
			blocks[count++] = blk;
			if (count == per_slot)
			{
				if (!ring_submit(c, slot, SLOT_PAGES, count, in_slot, blocks))
					break;
				slot = -1;
			}
		}
		if (slot >= 0 && count > 0 && c->reply == NULL)
			ring_submit(c, slot, SLOT_PAGES, count, in_slot, blocks);
		table_endscan(scan);
		table_close(rel, NoLock);
		if (c->reply != NULL)
			return c->reply;
	}
	send_json(c, psprintf("{\"end\": {\"pass\": %d, \"rows\": " UINT64_FORMAT "}}", pass, tuples));
	pfree(blocks);
	return NULL;
}

/* -------------------------------------------------------------------------- the query path */

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
	if (!ring_submit(r->conn, r->slot, SLOT_ROWS, r->buffered, r->rowlen, NULL))
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
		r->slot = ring_acquire(r->conn);
		MemoryContextSwitchTo(old);
		if (r->slot < 0)
		{
			r->reply = r->conn->reply;
			return false;
		}
		r->buffered = 0;
	}
	out = (double *) (ring_slot(r->conn, r->slot) + (size_t) r->buffered * r->rowlen * sizeof(double));
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
static char *
stream_query(Conn *c, const char *query, const char *search_path, int pass, const char *why)
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
	send_json(c, s.data);

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
	send_json(c, psprintf("{\"end\": {\"pass\": %d, \"rows\": " UINT64_FORMAT ", \"skipped\": " UINT64_FORMAT
						  ", \"form\": \"%s\"}}", pass, r.rows, r.skipped, r.array_form ? "array" : "scalars"));
	return NULL;
}

/* ------------------------------------------------------------------------------- _offload */

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
		why = page_source(PG_GETARG_OID(2), PG_GETARG_ARRAYTYPE_P(3), &ps);
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
		conn_open(&conn);
		send_json(&conn, req.data);
		while (reply == NULL)
		{
			int			flags;
			uint32		len;
			char	   *frame = read_frame(&conn, &flags, &len, -1);

			if (frame == NULL)
				conn_fail(&conn, "the server closed the connection mid-request");
			if (flags == LX_JSON)
				reply = frame;
			else if (flags == LX_CONTROL && len >= 12 && frame[0] == 'M')
				ring_map(&conn, frame, len);
			else if (flags == LX_CONTROL && len >= 8 && frame[0] == 'F')
				ring_free(&conn, frame);
			else if (flags == LX_CONTROL && len >= 8 && frame[0] == 'S')
			{
				int			pass = (int) get_u32be(frame + 4);

				if (frame[1] == READ_QUERY && pages)
				{
					if (query == NULL)
						ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
										errmsg("the page reader cannot read %s: %s",
											   get_rel_name(ps.relid), frame + 8)));
					pages = false;
					why = pstrdup(frame + 8);
				}
				if (pages)
					reply = stream_pages(&conn, &ps, pass);
				else if (query != NULL)
					reply = stream_query(&conn, query, search_path, pass, why);
				else
					proto_fail(&conn, "the server asked for data this call has none of");
			}
			else
				proto_fail(&conn, "unexpected frame");
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

/* ---------------------------------------------------------------------------------- predict */

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
		Oid			want[2] = {FLOAT8ARRAYOID, FLOAT8ARRAYOID};

		require_types(t, name, nk, want, m->kind == MODEL_SVM ? 2 : 1);	/* after the keys */
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
		{
			int			nl;
			double	   *labels;
			Datum		l = SPI_getbinval(row, t->tupdesc, nk + 2, &isnull);

			if (isnull || (labels = float8s(l, &nl, 1, NULL), nl != 2))
				ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("model %s lacks its two labels", name)));
			m->labels[0] = labels[0];
			m->labels[1] = labels[1];
		}
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
		Oid			want[2] = {FLOAT8ARRAYOID, FLOAT8ARRAYOID};
		Datum		c = model_value(psprintf("SELECT %s FROM ONLY %s", cols, name), name, want,
									m->kind == MODEL_SVM ? 2 : 1, &isnull);

		if (isnull)
			ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("model %s has no coefficients", name)));
		coef = float8s(c, &m->ncoef, 1, NULL);
		old = MemoryContextSwitchTo(mcxt);
		m->coef = palloc(sizeof(double) * Max(1, m->ncoef));
		memcpy(m->coef, coef, sizeof(double) * m->ncoef);
		MemoryContextSwitchTo(old);
		if (m->kind == MODEL_SVM)
		{
			int			nl;
			double	   *labels;
			Datum		l = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);

			if (isnull || (labels = float8s(l, &nl, 1, NULL), nl != 2))
				ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED), errmsg("model %s lacks its two labels", name)));
			m->labels[0] = labels[0];
			m->labels[1] = labels[1];
		}
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

/* P(y = 1) of score s, without overflow for any s. */
static double
sigmoid(double s)
{
	return s >= 0 ? 1.0 / (1.0 + exp(-s)) : exp(s) / (1.0 + exp(s));
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
	PG_RETURN_FLOAT8(sigmoid(s));
}

/* ------------------------------------------------------------------- MADlib's predict functions */

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
	PG_RETURN_FLOAT8(sigmoid(s));
}
