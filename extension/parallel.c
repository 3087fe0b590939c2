/*
 * parallel.c: the page path read by parallel workers.
 *
 * PostgreSQL's parallel machinery, as a parallel sequential scan uses it: the caller's backend
 * (the leader) enters parallel mode and makes a parallel context, whose workers run with the
 * leader's transaction, snapshots, user and security context and settings (parallel.c
 * restores them), in its lock group.  Each relation of the pass gets a parallel heap scan
 * (table_parallelscan_initialize with the caller's active snapshot); the workers take its
 * blocks as a parallel sequential scan does (table_block_parallelscan_nextpage), let
 * heapgetpage decide visibility, and copy each page holding a visible tuple into a slot of
 * the server's ring, as the serial path does (pages.c).  Each worker maps the ring itself: it
 * asks the server for it (indb.ring) with the token the server gave the call's connection.
 *
 * The leader reads no pages: it keeps the call's one connection to the server, sends the
 * pass's frames in order (begin, each relation's layout, the filled slots, end), hands out the
 * slots the server frees and relays the slots the workers fill.  The relations are read one
 * after another (the workers wait for the leader to announce the next), so every slot follows
 * its relation's layout on the connection.  The slots reach the server in the order they are
 * filled, not in the blocks' order: the server asks for this only for calls whose result does
 * not depend on the rows' order (READ_ANY_ORDER).
 *
 * Errors: a worker's error is raised in the leader (PostgreSQL's error queues); an error or a
 * cancel in the leader aborts its (sub)transaction, which ends the workers and waits for them.
 */
#include "postgres.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "access/heapam.h"
#include "access/parallel.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "nodes/pathnodes.h"
#include "optimizer/cost.h"
#include "optimizer/paths.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/bufmgr.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/spin.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/wait_event.h"

#include "learnedidx.h"

#define MAX_WORKERS 64
#define KEY_SHARED 1
#define KEY_BLOCKS 2
#define KEY_SCAN(i) (3 + (uint64) (i))

/* A slot's state: free for a worker, being filled, filled and waiting for the leader, at the
 * server (c->ring.busy in the leader). */
enum
{
	SLOT_FREE, SLOT_TAKEN, SLOT_FILLED, SLOT_SENT
};

typedef struct ParShared
{
	slock_t		mutex;
	ConditionVariable cv;		/* workers wait here: a free slot, the next relation, stop */
	Latch	   *leader;			/* the leader's latch: set when a slot is filled, a relation read */
	char		socket[MAXPGPATH];	/* the server's socket (the leader's connection's) */
	char		token[RING_TOKEN];
	uint32		nslots;
	uint32		per_slot;		/* pages per slot */
	int			nrels;
	int			rel;			/* the relation the workers may read now (-1: none yet) */
	bool		stop;			/* the server ended the call: read no more */
	int			ready;			/* workers that mapped the ring */
	int			done;			/* workers done with relation `rel` */
	uint64		tuples;			/* visible tuples copied */
	uint8		state[RING_MAX_SLOTS];
	uint32		count[RING_MAX_SLOTS];	/* a filled slot's pages */
	uint32		visible[RING_MAX_SLOTS];	/* and its visible tuples */
	int			queue[RING_MAX_SLOTS];	/* filled slots, in the order filled */
	int			head,
				queued;
	bool		finished[MAX_WORKERS];
	ProducerTime times[MAX_WORKERS];
} ParShared;

PGDLLEXPORT void lx_parallel_main(dsm_segment *seg, shm_toc *toc);

/*
 * The parallel workers for reading `ps`'s pages, 0 for the serial path: learnedidx.parallel_workers
 * when set, else as PostgreSQL's planner sizes a parallel sequential scan of that many pages
 * (compute_parallel_worker: min_parallel_table_scan_size, the table's parallel_workers storage
 * parameter), at most max_parallel_workers_per_gather either way.  None for a temporary
 * relation (its pages are in the leader's local buffers), inside parallel mode, or when the
 * server gave no token for the ring.
 */
int
lx_parallel_plan(Conn *c, PageSource *ps)
{
	double		pages = 0;
	int			reloption = -1;
	int			n;
	ListCell   *lc;

	if (lx_parallel_workers_setting == 0 || max_parallel_workers_per_gather == 0 || !c->ring.has_token ||
		!IsUnderPostmaster || IsInParallelMode() || ps->rels == NIL)
		return 0;
	foreach(lc, ps->rels)
	{
		Relation	rel = table_open(lfirst_oid(lc), NoLock);	/* locked by page_source */
		bool		local = RelationUsesLocalBuffers(rel);

		pages += RelationGetNumberOfBlocks(rel);
		if (RelationGetRelid(rel) == ps->relid)
			reloption = RelationGetParallelWorkers(rel, -1);
		table_close(rel, NoLock);
		if (local)
			return 0;
	}
	if (lx_parallel_workers_setting > 0)
		n = lx_parallel_workers_setting;
	else
	{
		RelOptInfo *ro = makeNode(RelOptInfo);

		ro->reloptkind = RELOPT_BASEREL;
		ro->rel_parallel_workers = reloption;
		n = compute_parallel_worker(ro, pages, -1, max_parallel_workers_per_gather);
	}
	return Min(Min(n, max_parallel_workers_per_gather), MAX_WORKERS);
}

/* ---------------------------------------------------------------- the workers */

/* Map the call's ring: ask the server for it with the token (indb.ring). */
static void
attach_ring(Conn *c, ParShared *sh)
{
	static const char hex[] = "0123456789abcdef";
	char		token[2 * RING_TOKEN + 1];
	int			i;

	for (i = 0; i < RING_TOKEN; i++)
	{
		token[2 * i] = hex[(unsigned char) sh->token[i] >> 4];
		token[2 * i + 1] = hex[(unsigned char) sh->token[i] & 15];
	}
	token[2 * RING_TOKEN] = '\0';
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		ereport(ERROR, (errcode_for_socket_access(), errmsg("cannot create a socket: %m")));
	c->path = sh->socket;
	lx_conn_open(c);
	lx_send_json(c, psprintf("{\"op\": \"indb.ring\", \"id\": 1, \"args\": {\"token\": \"%s\"}}", token));
	for (;;)
	{
		int			flags;
		uint32		len;
		char	   *frame = lx_read_frame(c, &flags, &len, -1);

		if (frame == NULL)
			lx_conn_fail(c, "the server closed the connection mid-request");
		if (flags == LX_CONTROL && len >= RING_FRAME && frame[0] == 'M' && c->ring.base == NULL)
		{
			lx_ring_map(c, frame, len);
			if (!c->ring.has_token || memcmp(c->ring.token, sh->token, RING_TOKEN) != 0 ||
				c->ring.nslots != sh->nslots || c->ring.slot_bytes / BLCKSZ != sh->per_slot)
				lx_proto_fail(c, "the server sent a parallel worker another ring");
		}
		else if (flags == LX_JSON && c->ring.base != NULL &&
				 (strstr(frame, "\"ok\":true") != NULL || strstr(frame, "\"ok\": true") != NULL))
			return;
		else if (flags == LX_JSON)
			lx_proto_fail(c, psprintf("the server did not give a parallel worker the call's ring: %s", frame));
		else
			lx_proto_fail(c, "unexpected frame");
	}
}

/* A free slot (waiting for the leader to hand one out), or -1 when the call stops. */
static int
take_slot(ParShared *sh)
{
	int			slot = -1;

	for (;;)
	{
		uint32		i;
		bool		stop;

		SpinLockAcquire(&sh->mutex);
		stop = sh->stop;
		for (i = 0; i < sh->nslots && !stop; i++)
			if (sh->state[i] == SLOT_FREE)
			{
				sh->state[i] = SLOT_TAKEN;
				slot = (int) i;
				break;
			}
		SpinLockRelease(&sh->mutex);
		if (slot >= 0 || stop)
			break;
		ConditionVariableSleep(&sh->cv, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	return slot;
}

/* Hand a filled slot to the leader (or give back an empty one). */
static void
fill_slot(ParShared *sh, int slot, uint32 count, uint32 visible)
{
	SpinLockAcquire(&sh->mutex);
	if (count == 0)
		sh->state[slot] = SLOT_FREE;
	else
	{
		sh->state[slot] = SLOT_FILLED;
		sh->count[slot] = count;
		sh->visible[slot] = visible;
		sh->tuples += visible;
		sh->queue[(sh->head + sh->queued++) % RING_MAX_SLOTS] = slot;
	}
	SpinLockRelease(&sh->mutex);
	if (count == 0)
		ConditionVariableBroadcast(&sh->cv);
	else
		SetLatch(sh->leader);
}

/* Wait until the leader lets the workers read relation r; false when the call stops. */
static bool
wait_for_relation(ParShared *sh, int r)
{
	bool		go,
				stop;

	for (;;)
	{
		SpinLockAcquire(&sh->mutex);
		go = sh->rel >= r;
		stop = sh->stop;
		SpinLockRelease(&sh->mutex);
		if (go || stop)
			break;
		ConditionVariableSleep(&sh->cv, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	return !stop;
}

/* Read this worker's share of relation r's blocks into the ring; false when the call stops. */
static bool
read_relation(Conn *c, ParShared *sh, uint32 *blocks, shm_toc *toc, int r, ProducerTime *t)
{
	ParallelTableScanDesc pscan = shm_toc_lookup(toc, KEY_SCAN(r), false);
	Relation	rel = table_open(pscan->phs_relid, AccessShareLock);
	TableScanDesc scan = table_beginscan_parallel(rel, pscan);
	HeapScanDesc hs = (HeapScanDesc) scan;
	int			slot = -1;
	uint32		count = 0,
				visible = 0;
	bool		stopped = false;
	double		t0 = lx_seconds(CLOCK_MONOTONIC);

	table_block_parallelscan_startblock_init(rel, hs->rs_parallelworkerdata, (ParallelBlockTableScanDesc) pscan);
	for (;;)
	{
		BlockNumber blk = table_block_parallelscan_nextpage(rel, hs->rs_parallelworkerdata,
															(ParallelBlockTableScanDesc) pscan);

		if (blk == InvalidBlockNumber)
			break;
		heapgetpage(scan, blk); /* visibility: PostgreSQL's, into rs_vistuples; serves interrupts */
		if (hs->rs_ntuples == 0)
			continue;
		if (slot < 0)
		{
			double		w = lx_seconds(CLOCK_MONOTONIC);

			slot = take_slot(sh);
			t0 += lx_seconds(CLOCK_MONOTONIC) - w;	/* waiting for the server is not reading */
			if (slot < 0)
			{
				stopped = true;
				break;
			}
			count = visible = 0;
		}
		visible += lx_copy_page(lx_ring_slot(c, slot) + (size_t) count * BLCKSZ, scan);
		blocks[(size_t) slot * sh->per_slot + count++] = blk;
		if (count == sh->per_slot)
		{
			fill_slot(sh, slot, count, visible);
			slot = -1;
		}
	}
	if (slot >= 0)
		fill_slot(sh, slot, count, visible);
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	t->busy += lx_seconds(CLOCK_MONOTONIC) - t0;
	return !stopped;
}

/* A parallel worker: map the ring, then read its share of each relation as the leader lets it. */
void
lx_parallel_main(dsm_segment *seg, shm_toc *toc)
{
	ParShared  *sh = shm_toc_lookup(toc, KEY_SHARED, false);
	uint32	   *blocks = shm_toc_lookup(toc, KEY_BLOCKS, false);
	Conn		conn;
	ProducerTime t = {0, 0};
	double		cpu0 = lx_seconds(CLOCK_THREAD_CPUTIME_ID);
	int			r;

	memset(&conn, 0, sizeof(conn));
	conn.fd = -1;
	conn.passed_fd = -1;
	PG_TRY();
	{
		attach_ring(&conn, sh);
		close(conn.fd);
		conn.fd = -1;
		SpinLockAcquire(&sh->mutex);
		sh->ready++;
		SpinLockRelease(&sh->mutex);
		SetLatch(sh->leader);
		for (r = 0; r < sh->nrels; r++)
		{
			if (!wait_for_relation(sh, r) || !read_relation(&conn, sh, blocks, toc, r, &t))
				break;
			SpinLockAcquire(&sh->mutex);
			sh->done++;
			SpinLockRelease(&sh->mutex);
			SetLatch(sh->leader);
		}
	}
	PG_FINALLY();
	{
		if (conn.fd >= 0)
			close(conn.fd);
		if (conn.passed_fd >= 0)
			close(conn.passed_fd);
		if (conn.ring.base != NULL)
			munmap(conn.ring.base, conn.ring.size);
	}
	PG_END_TRY();
	t.cpu = lx_seconds(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	SpinLockAcquire(&sh->mutex);
	sh->times[ParallelWorkerNumber] = t;
	sh->finished[ParallelWorkerNumber] = true;
	SpinLockRelease(&sh->mutex);
	SetLatch(sh->leader);
}

/* ---------------------------------------------------------------- the leader */

/* Send the server the slots the workers filled, in the order they were filled; hand the slots
 * the server freed back to the workers. */
static void
relay(Conn *c, ParShared *sh, uint32 *blocks)
{
	bool		freed = false;
	uint32		i;

	while (c->reply == NULL)
	{
		int			slot = -1;
		uint32		count = 0,
					visible = 0;

		SpinLockAcquire(&sh->mutex);
		if (sh->queued > 0)
		{
			slot = sh->queue[sh->head];
			sh->head = (sh->head + 1) % RING_MAX_SLOTS;
			sh->queued--;
			sh->state[slot] = SLOT_SENT;
			count = sh->count[slot];
			visible = sh->visible[slot];
		}
		SpinLockRelease(&sh->mutex);
		if (slot < 0)
			break;
		c->ring.busy[slot] = true;
		lx_ring_submit(c, slot, SLOT_PAGES, count, visible, blocks + (size_t) slot * sh->per_slot);
	}
	SpinLockAcquire(&sh->mutex);
	for (i = 0; i < sh->nslots; i++)
		if (sh->state[i] == SLOT_SENT && !c->ring.busy[i])
		{
			sh->state[i] = SLOT_FREE;
			freed = true;
		}
	if (c->reply != NULL)
		sh->stop = true;
	SpinLockRelease(&sh->mutex);
	if (freed || c->reply != NULL)
		ConditionVariableBroadcast(&sh->cv);
}

/* A worker that stopped without finishing: let PostgreSQL raise its error (or say it died). */
static void
check_workers(ParallelContext *pcxt, ParShared *sh)
{
	int			i;

	for (i = 0; i < pcxt->nworkers_launched; i++)
	{
		pid_t		pid;
		bool		finished;

		SpinLockAcquire(&sh->mutex);
		finished = sh->finished[i];
		SpinLockRelease(&sh->mutex);
		if (!finished && GetBackgroundWorkerPid(pcxt->worker[i].bgwhandle, &pid) == BGWH_STOPPED)
		{
			SpinLockAcquire(&sh->mutex);
			sh->stop = true;
			SpinLockRelease(&sh->mutex);
			ConditionVariableBroadcast(&sh->cv);
			WaitForParallelWorkersToFinish(pcxt);	/* raises the worker's error, if it sent one */
			ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("a parallel worker reading pages exited early")));
		}
	}
}

/* Wait for a worker to fill a slot or finish, or for the server to send a frame. */
static void
leader_wait(Conn *c, ParallelContext *pcxt, ParShared *sh)
{
	int			rc = WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
									   c->fd, 1000L, PG_WAIT_EXTENSION);

	if (rc & WL_LATCH_SET)
		ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();		/* a cancel; a worker's error */
	if (rc & WL_SOCKET_READABLE)
		while (c->reply == NULL && lx_ring_poll(c, false))
			;
	check_workers(pcxt, sh);
}

/* The leader's side of a pass: the frames in order, the slots relayed.  The server's reply when
 * it ended the call, else NULL. */
static char *
lead_pass(Conn *c, PageSource *ps, int pass, ParallelContext *pcxt, ParShared *sh, uint32 *blocks)
{
	int			r = 0;
	int			n = pcxt->nworkers_launched;
	ListCell   *lc;

	for (;;)					/* every worker has the ring before the server hears of the pass */
	{
		bool		ready;

		SpinLockAcquire(&sh->mutex);
		ready = sh->ready == n;
		SpinLockRelease(&sh->mutex);
		if (ready)
			break;
		leader_wait(c, pcxt, sh);
	}
	lx_send_json(c, psprintf("{\"begin\": {\"pass\": %d, \"reader\": \"pages\"}}", pass));
	foreach(lc, ps->rels)
	{
		ParallelTableScanDesc pscan = shm_toc_lookup(pcxt->toc, KEY_SCAN(r), false);
		Relation	rel = table_open(lfirst_oid(lc), NoLock);	/* locked by page_source */

		lx_send_json(c, lx_relation_layout(rel, ps, ((ParallelBlockTableScanDesc) pscan)->phs_nblocks));
		table_close(rel, NoLock);
		SpinLockAcquire(&sh->mutex);
		sh->rel = r;
		sh->done = 0;
		SpinLockRelease(&sh->mutex);
		ConditionVariableBroadcast(&sh->cv);
		for (;;)
		{
			bool		done;

			relay(c, sh, blocks);
			if (c->reply != NULL)
				return c->reply;
			SpinLockAcquire(&sh->mutex);
			done = sh->done == n && sh->queued == 0;
			SpinLockRelease(&sh->mutex);
			if (done)
				break;
			leader_wait(c, pcxt, sh);
		}
		r++;
	}
	return NULL;
}

/*
 * Pass `pass` over `ps`'s pages read by up to `nworkers` parallel workers.  *done is false
 * when no worker could be started (the caller reads the pass itself), else the pass was made:
 * the server's reply when it ended the call, else NULL.
 */
char *
lx_stream_pages_parallel(Conn *c, PageSource *ps, int pass, int nworkers, bool *done)
{
	Snapshot	snapshot = GetActiveSnapshot();
	int			nrels = list_length(ps->rels);
	uint32		per_slot = c->ring.slot_bytes / BLCKSZ;
	Size	   *scan_size = palloc(sizeof(Size) * nrels);
	ParallelContext *pcxt;
	ParShared  *sh;
	uint32	   *blocks;
	ListCell   *lc;
	int			i;
	char	   *reply;
	ProducerTime *times;

	*done = false;
	EnterParallelMode();
	pcxt = CreateParallelContext("$libdir/learnedidx", "lx_parallel_main", nworkers);
	shm_toc_estimate_chunk(&pcxt->estimator, sizeof(ParShared));
	shm_toc_estimate_chunk(&pcxt->estimator, sizeof(uint32) * c->ring.nslots * per_slot);
	i = 0;
	foreach(lc, ps->rels)
	{
		Relation	rel = table_open(lfirst_oid(lc), NoLock);

		scan_size[i] = table_parallelscan_estimate(rel, snapshot);
		shm_toc_estimate_chunk(&pcxt->estimator, scan_size[i++]);
		table_close(rel, NoLock);
	}
	shm_toc_estimate_keys(&pcxt->estimator, 2 + nrels);
	InitializeParallelDSM(pcxt);
	if (pcxt->seg == NULL || pcxt->nworkers == 0)
	{
		DestroyParallelContext(pcxt);
		ExitParallelMode();
		return NULL;
	}
	sh = shm_toc_allocate(pcxt->toc, sizeof(ParShared));
	memset(sh, 0, sizeof(ParShared));
	SpinLockInit(&sh->mutex);
	ConditionVariableInit(&sh->cv);
	sh->leader = MyLatch;
	strlcpy(sh->socket, c->path, sizeof(sh->socket));
	memcpy(sh->token, c->ring.token, RING_TOKEN);
	sh->nslots = c->ring.nslots;
	sh->per_slot = per_slot;
	sh->nrels = nrels;
	sh->rel = -1;
	for (i = 0; i < (int) c->ring.nslots; i++)
		sh->state[i] = c->ring.busy[i] ? SLOT_SENT : SLOT_FREE;
	shm_toc_insert(pcxt->toc, KEY_SHARED, sh);
	blocks = shm_toc_allocate(pcxt->toc, sizeof(uint32) * c->ring.nslots * per_slot);
	shm_toc_insert(pcxt->toc, KEY_BLOCKS, blocks);
	i = 0;
	foreach(lc, ps->rels)
	{
		Relation	rel = table_open(lfirst_oid(lc), NoLock);
		ParallelTableScanDesc pscan = shm_toc_allocate(pcxt->toc, scan_size[i]);

		table_parallelscan_initialize(rel, pscan, snapshot);	/* the caller's snapshot, serialized */
		shm_toc_insert(pcxt->toc, KEY_SCAN(i), pscan);
		table_close(rel, NoLock);
		i++;
	}
	LaunchParallelWorkers(pcxt);
	if (pcxt->nworkers_launched == 0)
	{
		DestroyParallelContext(pcxt);
		ExitParallelMode();
		return NULL;
	}
	*done = true;
	WaitForParallelWorkersToAttach(pcxt);
	reply = lead_pass(c, ps, pass, pcxt, sh, blocks);
	if (reply != NULL)
	{
		SpinLockAcquire(&sh->mutex);
		sh->stop = true;
		SpinLockRelease(&sh->mutex);
		ConditionVariableBroadcast(&sh->cv);
	}
	WaitForParallelWorkersToFinish(pcxt);
	if (reply == NULL)
	{
		times = palloc(sizeof(ProducerTime) * pcxt->nworkers_launched);
		memcpy(times, sh->times, sizeof(ProducerTime) * pcxt->nworkers_launched);
		lx_send_json(c, lx_pass_end(pass, sh->tuples, times, pcxt->nworkers_launched, true));
	}
	DestroyParallelContext(pcxt);
	ExitParallelMode();
	return reply;
}
