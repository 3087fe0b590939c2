/*
 * learnedidx.h: what the C files of the learnedidx extension share.
 *
 * Everything runs in the caller's backend, in the caller's statement, as the caller.  One file
 * per concern, as contrib modules are laid out:
 *
 *   learnedidx.c       the module: _PG_init, learnedidx.socket (PGC_SUSET: only superusers say
 *                      where the server is) and its default, the server's path rule
 *   conn.c             the accelerator server's socket: connecting (the server must run as the
 *                      backend's OS user and greet first), frames
 *   ring.c             the ring, the server's shared memory the data travel through
 *   pages.c            the page path: heap pages of a relation and its inheritors, PostgreSQL
 *                      having decided which tuples the caller's snapshot sees
 *   parallel.c         the page path read by parallel workers (PostgreSQL's parallel machinery:
 *                      a parallel heap scan per relation, each worker copying the pages of its
 *                      blocks into the ring, the backend naming the filled slots to the server)
 *   rows.c             the query path: an SPI query's rows (read-only, the caller's snapshot and
 *                      search_path), sent as float8
 *   offload.c          learnedidx._offload: sends a request and streams the caller's data as the
 *                      server asks for passes, then returns the server's reply (JSON text).  The
 *                      server never connects to PostgreSQL.
 *   predict.c          predict, predict_proba: feature vectors scored against a model table,
 *                      read once per query (a model trained with grouping_cols: the group's row,
 *                      picked by the group's values); reading a model runs no code of its owner's
 *   madlib_predict.c   linregr_predict, logregr_predict, logregr_predict_prob: MADlib's, over
 *                      coefficients
 *   svm.c              _svm_features: a row through the random feature map of MADlib's svm
 *                      kernels (gaussian, polynomial), for svm training and svm_predict
 *   linregr.c          MADlib's linregr and heteroskedasticity_test_linregr aggregates: their
 *                      state (bytea8: the R factor of [X y], merged exactly), transition,
 *                      combine and final functions, MADlib's statistics from the R factor
 *   qr.c               the dense numerics linregr.c needs: rows folded into an R factor, the
 *                      triangular solve and inverse, singular values (one-sided Jacobi), the
 *                      Student-t and chi-squared tails
 *   shards.c           _shard_states: a training call's per-shard passes run on the shards of a
 *                      partitioned table's postgres_fdw partitions, through postgres_fdw's own
 *                      connections (the caller's user mapping); statistics come back, not rows
 *
 * Functions shared between the files carry the prefix lx_: PostgreSQL loads modules with
 * RTLD_GLOBAL, so an unprefixed name another module exports first could take their calls.
 *
 * The wire format is docs/protocol.md's (frames of learnedidx.server.protocol; the stream frames
 * of an indb.train call); tests/indb/test_extension_sql.py checks the constants below against
 * the Python originals.
 */
#ifndef LEARNEDIDX_H
#define LEARNEDIDX_H

#include <math.h>
#include <time.h>

#include "access/relscan.h"
#include "fmgr.h"
#include "nodes/pg_list.h"
#include "utils/array.h"
#include "utils/relcache.h"

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
 *   'S', reader (READ_AS_CHOSEN or READ_QUERY, | READ_ANY_ORDER), 2 bytes padding, pass u32, then
 *        why (text): stream pass `pass` over the data (READ_ANY_ORDER: the call's result does not
 *        depend on the rows' order, so parallel workers may read the pages);
 *   'M', 3 bytes padding, slots u32, slot bytes u32, token (RING_TOKEN bytes), with a file
 *        descriptor (SCM_RIGHTS): the ring, a memfd the server sealed against shrinking, which
 *        the data travel through; the token names it to the indb.ring request of the backend's
 *        parallel workers;
 *   'F', 3 bytes padding, slot u32: the server is done with that slot of the ring.
 * The data frame of a filled slot: 'K', kind (SLOT_PAGES | SLOT_ROWS), 2 bytes padding, slot
 * u32, count u32 (pages or rows), extra u32 (visible tuples, or float8 per row), then for pages
 * the block numbers (u32 each). */
#define READ_AS_CHOSEN 0
#define READ_QUERY 1
#define READ_ANY_ORDER 2
#define RING_TOKEN 16
#define RING_FRAME 28			/* the 'M' payload with its token */
#define SLOT_PAGES 'P'
#define SLOT_ROWS 'R'
#define SLOT_HEADER 16
#define RING_MAX_SLOTS 64
#define RING_MAX_SLOT_BYTES (16 << 20)

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
	bool		has_token;		/* the server sent a token: parallel workers can map the ring */
	char		token[RING_TOKEN];
} Ring;

typedef struct Conn
{
	pgsocket	fd;
	const char *path;			/* NULL: learnedidx.socket (lx_conn_open sets it) */
	int			passed_fd;		/* a descriptor the server sent (SCM_RIGHTS), -1 when none */
	Ring		ring;
	char	   *reply;			/* the server's reply, when it ended the call while we stream */
} Conn;

/* The relations the page path reads and their wanted columns (pages.c). */
typedef struct PageSource
{
	Oid			relid;			/* the relation named */
	List	   *rels;			/* it and its inheritors that have storage (Oids) */
	int			ncols;
	char	  **names;			/* wanted columns: label first */
	Oid		   *types;			/* base type of each */
} PageSource;

/* A page producer's time in a pass: reading and copying pages (waits for a free slot excluded),
 * and its CPU time. */
typedef struct ProducerTime
{
	double		busy;
	double		cpu;
} ProducerTime;

/* learnedidx.c */
extern const char *lx_socket_path(void);
extern int	lx_parallel_workers_setting;

/* conn.c */
extern void lx_conn_open(Conn *c);
extern void lx_conn_fail(Conn *c, const char *what);
extern void lx_proto_fail(Conn *c, const char *what);
extern bool lx_conn_wait(Conn *c, int event, long timeout_ms);
extern void lx_conn_write(Conn *c, const char *buf, size_t len);
extern void lx_put_u32be(char *p, uint32 v);
extern uint32 lx_get_u32be(const char *p);
extern void lx_frame_header(char *h, int flags, uint32 len);
extern void lx_send_json(Conn *c, const char *json);
extern char *lx_read_frame(Conn *c, int *flags, uint32 *len, long timeout_ms);

/* ring.c */
extern void lx_ring_map(Conn *c, const char *frame, uint32 len);
extern void lx_ring_free(Conn *c, const char *frame);
extern int	lx_ring_acquire(Conn *c);
extern bool lx_ring_submit(Conn *c, int slot, char kind, uint32 count, uint32 extra, const uint32 *blocks);
extern bool lx_ring_poll(Conn *c, bool wait);

static inline char *
lx_ring_slot(Conn *c, int slot)
{
	return c->ring.base + (size_t) slot * c->ring.slot_bytes;
}

/* pages.c */
extern const char *lx_page_source(Oid relid, ArrayType *columns, PageSource *ps);
extern char *lx_stream_pages(Conn *c, PageSource *ps, int pass, bool any_order);
extern char *lx_relation_layout(Relation rel, PageSource *ps, BlockNumber nblocks);
extern uint32 lx_copy_page(char *dst, TableScanDesc scan);
extern char *lx_pass_end(int pass, uint64 tuples, const ProducerTime *times, int n, bool workers);
extern double lx_seconds(clockid_t clock);

/* parallel.c */
extern int	lx_parallel_plan(Conn *c, PageSource *ps);
extern char *lx_stream_pages_parallel(Conn *c, PageSource *ps, int pass, int nworkers, bool *done);

/* rows.c */
extern char *lx_stream_query(Conn *c, const char *query, const char *search_path, int pass, const char *why);

/* The linregr state (learnedidx.bytea8; learnedidx/indb/runtime/lstsq.py writes the same bytes,
 * in the host's byte order): the R factor of the rows [x y] seen, merged exactly by stacking two
 * R factors and factoring again, so that no X'X is ever formed.  After the varlena header:
 *   uint16 version (LX_LINREGR_VERSION), uint16 k (the length of x),
 *   int64 n (rows), float8 mean and m2 of y (Welford's; the centred sum of squares, exactly
 *   mergeable: the R factor of [1 y]), float8 R[(k + 1) * (k + 1)] (upper triangular, row-major).
 * An empty payload is the initial state (no rows).  With a 4-byte header and a MAXALIGN'ed
 * allocation, n and everything after it are 8-byte aligned. */
#define LX_LINREGR_VERSION 1
#define LX_LINREGR_HEAD 28		/* bytes of the payload before R */
#define LX_LINREGR_MAX_K 4096		/* a state of 128 MiB; MADlib's 65535 would exceed palloc's 1 GB */

/* qr.c */
extern void lx_qr_fold_row(double *R, int p, double *r, int start);
extern bool lx_tri_solve(const double *R, int ld, int k, const double *b, double *x);
extern bool lx_tri_inverse(const double *R, int ld, int k, double *inv, void (*tick) (void));
extern int	lx_jacobi_svd(double *A, double *V, double *sigma, int k, void (*tick) (void));
extern double lx_student_t_sf2(double t, double df);
extern double lx_chi2_sf(double x, double df);

/* P(y = 1) of score s, without overflow for any s (predict.c, madlib_predict.c). */
static inline double
lx_sigmoid(double s)
{
	return s >= 0 ? 1.0 / (1.0 + exp(-s)) : exp(s) / (1.0 + exp(s));
}

#endif							/* LEARNEDIDX_H */
