/*
 * ring.c: the ring, the server's shared memory the data travel through.
 *
 * The server sends it (an 'M' frame with a memfd) when a call begins; the backend fills a free
 * slot and names it in a 'K' frame, the server frees it with an 'F' frame.
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>


#include "learnedidx.h"

/* Map the ring the server sent ('M' frame): its descriptor must be a memfd sealed against
 * shrinking, so that no truncation can fault the backend while it writes. */
void
lx_ring_map(Conn *c, const char *frame, uint32 len)
{
	uint32		nslots,
				slot_bytes;
	struct stat st;
	int			seals;
	char	   *base;

	if (len < 12)
		lx_proto_fail(c, "a malformed ring frame");
	nslots = lx_get_u32be(frame + 4);
	slot_bytes = lx_get_u32be(frame + 8);
	if (c->passed_fd < 0)
		lx_proto_fail(c, "a ring frame without its memory");
	if (c->ring.base != NULL)
		lx_proto_fail(c, "a second ring");
	if (nslots < 1 || nslots > RING_MAX_SLOTS || slot_bytes < BLCKSZ || slot_bytes > RING_MAX_SLOT_BYTES ||
		slot_bytes % BLCKSZ != 0)
		lx_proto_fail(c, "a ring of unsupported shape");
	if (fstat(c->passed_fd, &st) < 0 || st.st_size < (off_t) nslots * slot_bytes)
		lx_proto_fail(c, "the ring's memory is smaller than the ring");
	seals = fcntl(c->passed_fd, F_GET_SEALS);
	if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
		lx_proto_fail(c, "the ring's memory is not sealed against shrinking");
	base = mmap(NULL, (size_t) nslots * slot_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c->passed_fd, 0);
	if (base == MAP_FAILED)
		lx_conn_fail(c, psprintf("cannot map the ring (%m)"));
	close(c->passed_fd);
	c->passed_fd = -1;
	c->ring.base = base;
	c->ring.size = (size_t) nslots * slot_bytes;
	c->ring.nslots = nslots;
	c->ring.slot_bytes = slot_bytes;
	memset(c->ring.busy, 0, sizeof(c->ring.busy));
	c->ring.has_token = len >= RING_FRAME;
	if (c->ring.has_token)
		memcpy(c->ring.token, frame + 12, RING_TOKEN);
}

/* An 'F' frame: the server is done with a slot. */
void
lx_ring_free(Conn *c, const char *frame)
{
	uint32		slot = lx_get_u32be(frame + 4);

	if (c->ring.base == NULL || slot >= c->ring.nslots || !c->ring.busy[slot])
		lx_proto_fail(c, "the server freed a slot it did not hold");
	c->ring.busy[slot] = false;
}

/* Handle one frame the server sends while data flow: 'F' frees a slot; a JSON frame is the
 * reply that ends the call (kept in c->reply).  `wait`: block for it, else only read one that
 * has arrived.  False when no frame was read. */
bool
lx_ring_poll(Conn *c, bool wait)
{
	int			flags;
	uint32		len;
	char		b;
	char	   *frame;

	if (!wait && recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 1)
		return false;
	frame = lx_read_frame(c, &flags, &len, -1);
	if (frame == NULL)
		lx_conn_fail(c, "the server closed the connection mid-request");
	if (flags == LX_JSON)
	{
		c->reply = frame;
		return true;
	}
	if (flags == LX_CONTROL && len >= 8 && frame[0] == 'F')
	{
		lx_ring_free(c, frame);
		pfree(frame);
		return true;
	}
	lx_proto_fail(c, "unexpected frame while streaming");
	return false;
}

/* A free slot of the ring, waiting for the server to free one; -1 when the server ended the
 * call instead (its reply in c->reply). */
int
lx_ring_acquire(Conn *c)
{
	if (c->ring.base == NULL)
		lx_proto_fail(c, "the server asked for data without a ring");
	while (c->reply == NULL)
	{
		uint32		i;

		for (i = 0; i < c->ring.nslots; i++)
			if (!c->ring.busy[i])
			{
				c->ring.busy[i] = true;
				return (int) i;
			}
		lx_ring_poll(c, true);
	}
	return -1;
}

/* Hand a filled slot to the server ('K' frame; `blocks`: the pages' block numbers, or NULL) and
 * read what the server has sent meanwhile.  False when the server ended the call. */
bool
lx_ring_submit(Conn *c, int slot, char kind, uint32 count, uint32 extra, const uint32 *blocks)
{
	uint32		nb = blocks ? count : 0;
	char	   *f = palloc(LX_HEADER + SLOT_HEADER + 4 * nb);
	uint32		i;

	lx_frame_header(f, LX_DATA, SLOT_HEADER + 4 * nb);
	memset(f + LX_HEADER, 0, SLOT_HEADER);
	f[LX_HEADER] = 'K';
	f[LX_HEADER + 1] = kind;
	lx_put_u32be(f + LX_HEADER + 4, slot);
	lx_put_u32be(f + LX_HEADER + 8, count);
	lx_put_u32be(f + LX_HEADER + 12, extra);
	for (i = 0; i < nb; i++)
		lx_put_u32be(f + LX_HEADER + SLOT_HEADER + 4 * i, blocks[i]);
	lx_conn_write(c, f, LX_HEADER + SLOT_HEADER + 4 * nb);
	pfree(f);
	while (c->reply == NULL && lx_ring_poll(c, false))
		;
	return c->reply == NULL;
}
