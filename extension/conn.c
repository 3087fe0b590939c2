/*
 * conn.c: the accelerator server's socket: connecting, the hello, frames.
 *
 * The server must run as the backend's OS user (SO_PEERCRED) and greet first; a socket that waits
 * for us to speak, such as PostgreSQL's own, is refused before we send a byte.  Waits serve
 * cancel requests, statement_timeout and postmaster death.
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/wait_event.h"

#include "learnedidx.h"

void
lx_conn_fail(Conn *c, const char *what)
{
	ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
					errmsg("learnedidx accelerator server at %s: %s", c->path, what),
					errhint("Start it with: learnedidx server start --socket %s", c->path)));
}

/* The peer broke the protocol (learnedidx.errors.ProtocolError's SQLSTATE). */
void
lx_proto_fail(Conn *c, const char *what)
{
	ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
					errmsg("learnedidx accelerator server at %s: %s", c->path, what)));
}

/* Wait until the socket is ready for `event` (or timeout_ms passes; -1: no timeout), serving
 * cancel requests, statement_timeout and postmaster death meanwhile.  False on timeout. */
bool
lx_conn_wait(Conn *c, int event, long timeout_ms)
{
	int			rc;

	rc = WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | event | (timeout_ms >= 0 ? WL_TIMEOUT : 0),
						   c->fd, timeout_ms, PG_WAIT_EXTENSION);
	if (rc & WL_LATCH_SET)
		ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	return (rc & WL_TIMEOUT) == 0;
}

void
lx_conn_write(Conn *c, const char *buf, size_t len)
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
			lx_conn_wait(c, WL_SOCKET_WRITEABLE, -1);
		else
			lx_conn_fail(c, "the connection closed while sending");
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
		lx_proto_fail(c, "the server sent more than one descriptor");
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
			lx_conn_fail(c, "the connection closed mid-message");
		}
		else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		{
			if (!lx_conn_wait(c, WL_SOCKET_READABLE, timeout_ms))
				lx_conn_fail(c, "no answer (is it the learnedidx server?)");
		}
		else
			lx_conn_fail(c, "the connection failed while receiving");
	}
	return true;
}

void
lx_put_u32be(char *p, uint32 v)
{
	p[0] = (char) (v >> 24);
	p[1] = (char) (v >> 16);
	p[2] = (char) (v >> 8);
	p[3] = (char) v;
}

uint32
lx_get_u32be(const char *p)
{
	const unsigned char *u = (const unsigned char *) p;

	return ((uint32) u[0] << 24) | ((uint32) u[1] << 16) | ((uint32) u[2] << 8) | u[3];
}

void
lx_frame_header(char *h, int flags, uint32 len)
{
	h[0] = LX_MAGIC[0];
	h[1] = LX_MAGIC[1];
	h[2] = LX_VERSION;
	h[3] = (char) flags;
	lx_put_u32be(h + 4, len);
}

void
lx_send_json(Conn *c, const char *json)
{
	char		h[LX_HEADER];

	lx_frame_header(h, LX_JSON, strlen(json));
	lx_conn_write(c, h, LX_HEADER);
	lx_conn_write(c, json, strlen(json));
}

/* One frame from the server: its flags and payload (NUL-terminated).  NULL at end of stream. */
char *
lx_read_frame(Conn *c, int *flags, uint32 *len, long timeout_ms)
{
	unsigned char h[LX_HEADER];
	char	   *payload;

	if (!conn_read(c, (char *) h, LX_HEADER, timeout_ms))
		return NULL;
	if (h[0] != LX_MAGIC[0] || h[1] != LX_MAGIC[1] || h[2] != LX_VERSION)
		lx_proto_fail(c, "the socket does not speak the learnedidx protocol");
	*flags = h[3];
	*len = ((uint32) h[4] << 24) | ((uint32) h[5] << 16) | ((uint32) h[6] << 8) | h[7];
	if (*len > LX_MAX_REPLY)
		lx_proto_fail(c, "a reply exceeds the protocol's size limit");
	payload = palloc(*len + 1);
	if (*len > 0 && !conn_read(c, payload, *len, timeout_ms))
		lx_conn_fail(c, "the connection closed mid-message");
	payload[*len] = '\0';
	return payload;
}

/* Connect to the server: it must run as this backend's OS user and greet first (a socket that
 * waits for us to speak, such as PostgreSQL's own, is refused before we send a byte). */
void
lx_conn_open(Conn *c)
{
	struct sockaddr_un addr;
	struct ucred cred;
	socklen_t	credlen = sizeof(cred);
	int			flags;
	uint32		len;
	char	   *hello;

	if (c->path == NULL)
		c->path = lx_socket_path();
	if (strlen(c->path) >= sizeof(addr.sun_path))
		lx_conn_fail(c, "the socket path is too long");
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	strlcpy(addr.sun_path, c->path, sizeof(addr.sun_path));
	if (connect(c->fd, (struct sockaddr *) &addr, sizeof(addr)) < 0)
	{
		int			err = errno;
		socklen_t	errlen = sizeof(err);

		/* a full listen backlog: wait for the server to accept */
		if ((err != EAGAIN && err != EINPROGRESS) || !lx_conn_wait(c, WL_SOCKET_WRITEABLE, HELLO_TIMEOUT_MS) ||
			getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &errlen) < 0 || err != 0)
		{
			errno = err;
			lx_conn_fail(c, psprintf("not reachable (%m)"));
		}
	}
	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &credlen) < 0 || cred.uid != geteuid())
		lx_conn_fail(c, "the process listening there does not run as the database's OS user");
	hello = lx_read_frame(c, &flags, &len, HELLO_TIMEOUT_MS);
	if (hello == NULL || flags != LX_JSON || strstr(hello, "\"hello\"") == NULL)
		lx_proto_fail(c, "the socket does not speak the learnedidx protocol");
}
